"""``train.precision`` on the CPU: bfloat16 autocast trains as float32 does, within tolerance;
float16 goes through a loss scaler whose state a checkpoint carries, so a resumed run ends with
the uninterrupted run's weights; the run records the precision it trained in."""

import mlflow
import pytest

from pipeline_steps.steps.train import train
from tests.model.conftest import assert_same_weights, final_weights, states_of

pytestmark = pytest.mark.slow
SMALL = ("train.epochs=2", "train.batch_size=128", "features.row_group_rows=256")


@pytest.fixture
def prepared(prepare_run):
    return lambda run_id, *overrides: prepare_run(run_id, *SMALL, *overrides)


def test_bf16_trains_as_fp32_does_and_each_run_records_its_precision(prepared) -> None:
    full = train(prepared("fp32"))
    half = train(prepared("bf16", "train.precision=bf16"))
    assert full is not None and half is not None
    assert (full.precision, half.precision) == ("fp32", "bf16")  # auto is fp32 on the CPU
    assert full.weights_sha256 != half.weights_sha256
    assert half.best_val_loss == pytest.approx(full.best_val_loss, rel=0.05)
    run = mlflow.get_run(half.mlflow_run_id)
    assert run.data.params["train.precision"] == "bf16"


def test_fp16_resumes_mid_epoch_with_its_loss_scale_and_ends_as_if_uninterrupted(
    prepared,
) -> None:
    extra = ("train.precision=fp16", "train.checkpoint_every=4", "train.keep_checkpoints=50")
    reference, interrupted = prepared("reference", *extra), prepared("interrupted", *extra)
    manifest = train(reference)
    assert manifest is not None and manifest.precision == "fp16"
    train(interrupted)
    states = states_of(interrupted)
    # the scaler's state is in every checkpoint: its scale (2**16 to start) and growth tracker
    assert all(s.scaler["scale"] > 0 for s in states.values())
    mid = next(p for p, s in states.items() if s.position.epoch == 1 and s.position.epoch_batches)
    for path in states:
        if path > mid:
            path.unlink()
    interrupted.lake.remove(interrupted.run_dir, "train.json")
    resumed = train(interrupted)
    assert resumed is not None and resumed.resumed_from == states[mid].position
    assert_same_weights(final_weights(reference), final_weights(interrupted))
