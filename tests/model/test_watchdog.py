"""A training you can watch, and one that hangs: live progress in MLflow, the task log and
Prometheus (through a real Pushgateway), and a rank whose data reader blocks caught by the
watchdog, its stacks written down, the MLflow run ended as failed, Prometheus' stall alert
firing, a transient exit, and the retry resuming from the last checkpoint (the alert resolved)."""

import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import mlflow
import pytest

from pipeline_steps.core.errors import EXIT_TRANSIENT
from tests.conftest import FIRST_DAY, wait_until
from tests.model.launch import SMALL_SET, environment, manifest_of
from tests.monitoring import Monitoring, monitoring

pytestmark = pytest.mark.slow
STALL_S = 10
SETTINGS = (
    *SMALL_SET,
    "train.epochs=1",
    "train.batch_size=32",
    "train.checkpoint_every=4",
    "train.log_every_s=0.2",
    f"train.stall_timeout_s={STALL_S}",
    "train.stall_allowance_s=60",
)
FROZEN_AFTER = 30
"""Optimizer steps the reader gives before it blocks (the epoch has more)."""


def _step(ctx, gateway: str, *launcher: str) -> subprocess.CompletedProcess[str]:
    sets = [x for o in (*SETTINGS, f"monitoring.pushgateway_url={gateway}") for x in ("--set", o)]
    argv = ["step", "train", "--run-id", ctx.run_id, "--logical-date", FIRST_DAY.isoformat()]
    return subprocess.run(
        [sys.executable, "-m", *launcher, *argv, *sets],
        env=environment(ctx),
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_frozen_reader_is_caught_its_stack_named_and_the_retry_resumes(
    prepare_run, tmp_path: Path
) -> None:
    with monitoring(tmp_path) as watched:
        _frozen_and_retried(prepare_run("frozen", *SETTINGS), watched)


def _frozen_and_retried(ctx, watched: Monitoring) -> None:  # type: ignore[no-untyped-def]
    frozen = _step(ctx, watched.pushgateway, "tests.model.frozen_reader", str(FROZEN_AFTER), "--")
    ended = time.time()
    output = frozen.stderr
    assert frozen.returncode == EXIT_TRANSIENT, output[-3000:]
    assert "trainyard step train failed (transient): stalled" in output, output[-3000:]
    # the stacks name the frame the reader froze in
    assert "_frozen_reader" in output and "in epoch_steps" in output, output[-3000:]
    stall_files = list(Path(ctx.lake.path(ctx.run_dir, "stalls")).glob("*-rank-0.txt"))
    assert len(stall_files) == 1 and "_frozen_reader" in stall_files[0].read_text()
    # live progress lines in the log while it ran
    progress = [line for line in output.splitlines() if "progress " in line and "ETA" in line]
    assert progress, output[-3000:]
    # caught within the timeout (+10 s) of the last progress line (the last steps' end)
    last = datetime.strptime(progress[-1][:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    assert STALL_S <= ended - last < STALL_S + 10, ended - last
    print(f"caught and exited {ended - last:.1f} s after the last progress line")

    mlflow.set_tracking_uri(ctx.settings.mlflow.tracking_uri)
    (run,) = mlflow.search_runs(
        experiment_names=[ctx.settings.mlflow.experiment], output_format="list"
    )
    assert run.info.status == "FAILED"
    assert run.data.tags["trainyard.stalled"].startswith("stalled: no optimizer step ended")
    client = mlflow.MlflowClient()
    points = client.get_metric_history(run.info.run_id, "live/progress")
    assert len(points) >= 2 and points[-1].value > points[0].value  # it moved while it ran
    assert {"live/loss", "live/samples_per_s", "live/eta_s"} <= run.data.metrics.keys()
    # MLflow's system metrics, sampled under the node's id
    assert "system/node-0/cpu_utilization_percentage" in run.data.metrics

    # Prometheus: the training's gauges arrived while it ran, and the stall alert fires
    stalled = wait_until("the stall alert", lambda: watched.alerts("TrainingStalled"))
    assert stalled[0]["state"] in ("pending", "firing")
    labels = stalled[0]["labels"]
    assert labels["run_id"] == ctx.run_key and labels["domain"] == ctx.settings.domain.name
    (progress_gauge,) = watched.query("trainyard_train_progress_ratio")
    assert 0 < float(progress_gauge["value"][1]) < 1

    retried = _step(ctx, watched.pushgateway, "pipeline_steps.commands.cli")
    assert retried.returncode == 0, retried.stderr[-3000:]
    manifest = manifest_of(retried.stdout)
    assert manifest["resumed_from"]["step"] == FROZEN_AFTER // 4 * 4  # the last checkpoint
    # the retry's gauges replace the stalled attempt's: the alert resolves
    wait_until("the alert to resolve", lambda: not watched.alerts("TrainingStalled"))
    (done,) = watched.query("trainyard_train_running")
    assert float(done["value"][1]) == 0
