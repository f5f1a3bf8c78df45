"""``train.strategy: pipeline`` without processes: the FT-Transformer's stages compute its
forward, and what cannot be cut or shared is refused naming the setting."""

import pytest
import torch

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.models import BatchShape
from pipeline_steps.core.settings import SettingsError, TrainSettings
from pipeline_steps.steps.train.distributed import Processes
from pipeline_steps.steps.train.models import build_ft_transformer, build_mlp
from pipeline_steps.steps.train.pipeline import Pipelined

SHAPE = BatchShape(cardinalities=[5, 7], numeric_width=6, outputs=3, task="multiclass")


def _model(layers: int) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_ft_transformer(
        SHAPE, token_dim=16, transformer_layers=layers, attention_heads=2, dropout=0.0
    )
    return model.eval()


def _batch(rows: int = 9) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    codes = torch.stack([torch.randint(0, n, (rows,), generator=generator) for n in (5, 7)], 1)
    return codes, torch.randn(rows, 6, generator=generator)


@pytest.mark.parametrize(("layers", "count"), [(1, 1), (2, 2), (3, 2), (4, 3), (4, 4)])
def test_the_stages_one_after_another_are_the_model(layers: int, count: int) -> None:
    model = _model(layers)
    codes, numeric = _batch()
    stages = model.pipeline_stages(count)
    assert len(stages) == count
    outputs: tuple[torch.Tensor, ...] = (codes, numeric)
    with torch.no_grad():
        for stage in stages:
            outputs = (stage(*outputs),)
        assert torch.allclose(outputs[0], model(codes, numeric), atol=1e-6)
    # every weight of the model is in exactly one stage
    owned = [id(p) for stage in stages for p in stage.parameters()]
    assert len(owned) == len(set(owned)) == len(list(model.parameters()))


def test_more_stages_than_layers_is_refused() -> None:
    with pytest.raises(ValueError, match="2 transformer layers cannot make 3 pipeline stages"):
        _model(2).pipeline_stages(3)


def _processes(rank: int, world_size: int) -> Processes:
    return Processes(rank=rank, world_size=world_size, local_rank=rank, device=torch.device("cpu"))


def test_ranks_make_pipelines_whose_stages_read_the_same_rows() -> None:
    views = [Pipelined(_processes(r, 4), 2, 4, "1f1b") for r in range(4)]
    assert [(v.stage, v.data.rank, v.data.world_size) for v in views] == [
        (0, 0, 2),
        (1, 0, 2),
        (0, 1, 2),
        (1, 1, 2),
    ]
    assert [v.counts_rows for v in views] == [False, True, False, True]
    whole = Pipelined(_processes(0, 3), 0, 4, "1f1b")  # 0: one pipeline over every process
    assert (whole.stages, whole.pipelines, whole.data.world_size) == (3, 1, 1)


def test_a_world_that_makes_no_whole_pipelines_is_refused() -> None:
    with pytest.raises(StepError, match=r"train\.pipeline_stages is 2, but 3 training processes"):
        Pipelined(_processes(0, 3), 2, 4, "1f1b")


def test_a_model_that_cannot_be_cut_is_refused_naming_the_setting() -> None:
    mlp = build_mlp(SHAPE, hidden_dims=[8], embedding_dim=4, dropout=0.0)
    with pytest.raises(StepError, match=r"train\.strategy: pipeline needs a model that can be cut"):
        Pipelined(_processes(0, 2), 2, 4, "1f1b").wrap(mlp)


def test_one_process_trains_the_model_whole() -> None:
    one = Pipelined(_processes(0, 1), 0, 4, "1f1b")
    model = _model(2)
    assert not one.sharded and one.wrap(model) is model and one.counts_rows


def test_settings_refuse_fp16_and_a_1f1b_with_fewer_micro_batches_than_stages() -> None:
    with pytest.raises(SettingsError, match="fp16 needs a loss scaler over every shard or stage"):
        TrainSettings(precision="fp16", strategy="pipeline")
    with pytest.raises(SettingsError, match=r"train\.pipeline_microbatches is 2"):
        TrainSettings(strategy="pipeline", pipeline_stages=4, pipeline_microbatches=2)
    assert (
        TrainSettings(
            strategy="pipeline",
            pipeline_stages=4,
            pipeline_microbatches=2,
            pipeline_schedule="gpipe",
        ).pipeline_stages
        == 4
    )


def test_a_batch_the_micro_batches_do_not_divide_is_refused() -> None:
    with pytest.raises(SettingsError, match=r"train\.batch_size \(100\) must be a multiple"):
        TrainSettings(strategy="pipeline", batch_size=100, pipeline_microbatches=8)
    assert TrainSettings(strategy="ddp", batch_size=100, pipeline_microbatches=8).batch_size == 100


def test_a_batch_is_cut_into_equal_micro_batches() -> None:
    from pipeline_steps.steps.train.pipeline import _parts

    assert [_parts(rows, 4) for rows in (64, 95, 94, 23, 3, 1)] == [4, 1, 2, 1, 3, 1]
