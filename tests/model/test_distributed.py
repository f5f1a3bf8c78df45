"""DDP on CPU: two torchrun ranks (gloo) train together, match one rank with twice the batch,
and survive a rank killed with SIGKILL mid-epoch."""

from pathlib import Path

import mlflow
import pytest

from pipeline_steps.core.context import RunContext
from pipeline_steps.steps.train import train
from tests.model import launch
from tests.model.conftest import assert_same_weights, final_weights, prepare, states_of
from tests.model.launch import manifest_of

pytestmark = pytest.mark.slow
BASE = (*launch.SMALL_SET, "train.epochs=3")


@pytest.fixture
def prepared(prepare_run):
    return lambda run_id, *overrides: prepare_run(run_id, *BASE, *overrides)


def run_torchrun(ctx: RunContext, nproc: int, *overrides: str) -> str:
    return launch.run_torchrun(ctx, nproc, (*BASE, *overrides))


def history(ctx: RunContext) -> list[dict]:
    return list(states_of(ctx).values())[-1].history


@pytest.fixture(scope="module")
def two_ranks(module_home: Path) -> tuple[RunContext, str]:
    """Two ranks of 64 rows a batch, trained once for the module: the run and its stdout."""
    ctx = prepare(module_home, "two-ranks", *BASE, "train.batch_size=64")
    return ctx, run_torchrun(ctx, 2, "train.batch_size=64")


def test_two_ranks_train_and_rank_zero_alone_logs(two_ranks) -> None:
    ctx, stdout = two_ranks
    manifests = [ln for ln in stdout.splitlines() if ln.startswith("{") and '"step"' in ln]
    assert len(manifests) == 1  # rank 0 alone speaks for the step
    manifest = manifest_of(stdout)
    assert manifest["world_size"] == 2 and manifest["epochs"] == 3
    mlflow.set_tracking_uri(ctx.settings.mlflow.tracking_uri)
    runs = mlflow.search_runs(
        experiment_names=[ctx.settings.mlflow.experiment],
        filter_string=f"tags.`trainyard.run_id` = '{ctx.run_id}'",
        output_format="list",
    )
    assert len(runs) == 1 and runs[0].data.params["world_size"] == "2"
    assert mlflow.pyfunc.load_model(manifest["model_uri"]) is not None


def test_two_ranks_follow_one_rank_with_twice_the_batch(prepared, two_ranks) -> None:
    one = prepared("one-rank", "train.batch_size=128")
    two, stdout = two_ranks
    single = train(one)
    assert single is not None
    # about as many optimizer steps (a rank dealt fewer rows tops up from its own shard) ...
    assert abs(single.steps - manifest_of(stdout)["steps"]) <= 0.15 * single.steps
    # ... and the same loss curve, up to the different order of the same rows
    for a, b in zip(history(one), history(two), strict=True):
        for metric in ("train_loss", "val_loss"):
            assert abs(a[metric] - b[metric]) / a[metric] < 0.03, (metric, a, b)
    # rank 0 fits the temperature on every validation row, not on its own share of them
    assert single.calibration is not None
    assert manifest_of(stdout)["calibration"]["rows"] == single.calibration.rows > 0


def test_a_rank_killed_mid_epoch_resumes_and_ends_with_the_same_weights(prepared) -> None:
    """SIGKILL one rank mid-epoch: torchrun restarts the workers, they resume from the newest
    step checkpoint (no finished epoch recomputed) and end with the uninterrupted weights."""
    slow = (
        "train.batch_size=32",
        "train.checkpoint_every=3",
        "train.keep_checkpoints=100",
        "train.model=ft_transformer",
    )
    reference, killed = prepared("steady", *slow), prepared("killed", *slow)
    run_torchrun(reference, 2, *slow)

    at, stdout, _ = launch.run_killing_a_rank_mid_epoch(killed, 2, (*BASE, *slow))
    killed_at = at.step
    manifest = manifest_of(stdout)
    resumed = manifest["resumed_from"]
    assert resumed is not None and resumed["epoch"] == 1 and resumed["step"] >= killed_at
    assert_same_weights(final_weights(reference), final_weights(killed))
    # the run says it resumed, and where; the replayed steps logged no second point
    mlflow.set_tracking_uri(killed.settings.mlflow.tracking_uri)
    runs = mlflow.search_runs(
        experiment_names=[killed.settings.mlflow.experiment],
        filter_string=f"tags.`trainyard.run_id` = '{killed.run_id}'",
        output_format="list",
    )
    # one run: the restarted workers went on with the one the killed attempt had left FAILED
    assert len(runs) == 1, [(r.info.status, r.data.tags) for r in runs]
    (run,) = runs
    assert run.info.status == "FINISHED" and run.data.tags["trainyard.resumed"] == "true"
    assert run.data.tags["trainyard.resumed_from_step"] == str(resumed["step"])
    client = mlflow.MlflowClient()
    assert "val_loss" in run.data.metrics
    for key in (k for k in run.data.metrics if not k.startswith("system/")):
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        assert len(steps) == len(set(steps)), (key, steps)
