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


def test_a_rank_frozen_for_good_is_recorded_and_stopped_without_torchrun_s_wait(
    prepare_run,
) -> None:
    """Two ranks, rank 0 stopped for good (SIGSTOP: no handler, no watchdog of its own runs):
    rank 1, waiting for it in the gradient all-reduce, is caught by its watchdog, records the
    stall in the training's MLflow run (rank 0's, whose id it has) and stops its node's other
    ranks, so torchrun ends at once instead of waiting 30 s on its SIGTERM to the stopped one."""
    import signal

    import psutil

    from tests.model import launch

    # plain steps between the checkpoints, so that rank 0 is stopped among them
    settings = (*SETTINGS, "train.checkpoint_every=20")
    ctx = prepare_run("stopped", *settings)
    launcher = subprocess.Popen(
        launch.torchrun(ctx, 2, settings, paced=True),
        env=environment(ctx),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    at = launch.wait_for_checkpoint(ctx, lambda p: p.step >= 20, lambda: launcher.poll() is None)
    assert at is not None, launcher.communicate(timeout=600)[1][-3000:]
    time.sleep(0.5)  # a few plain steps after it
    (rank_0,) = [
        child
        for child in psutil.Process(launcher.pid).children(recursive=True)
        if child.environ().get("RANK") == "0"
    ]
    rank_0.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    _, output = launcher.communicate(timeout=600)
    took = time.monotonic() - stopped
    assert launcher.returncode != 0, output[-3000:]
    assert "trainyard step train failed (transient): stalled" in output, output[-3000:]
    assert "stopped this node's other ranks" in output, output[-3000:]
    # rank 1's watchdog at its limit of the moment (the step's, or the allowance after a
    # checkpoint), then everything ends: not torchrun's 30 s more
    import re

    limit = float(re.findall(r"no optimizer step ended for ([\d.]+) s", output)[0])
    assert limit in (STALL_S, 60), output[-3000:]
    assert limit - 1 <= took < limit + 20, (took, limit, output[-3000:])
    print(f"torchrun ended {took:.1f} s after rank 0 was stopped (the limit: {limit:g} s)")

    mlflow.set_tracking_uri(ctx.settings.mlflow.tracking_uri)
    (run,) = mlflow.search_runs(
        experiment_names=[ctx.settings.mlflow.experiment], output_format="list"
    )
    assert run.info.status == "FAILED"
    assert run.data.tags["trainyard.stalled"].startswith("rank 1: stalled: no optimizer step")
    stalls = [a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id, "stalls")]
    assert stalls == ["stalls/rank-1.txt"], stalls
