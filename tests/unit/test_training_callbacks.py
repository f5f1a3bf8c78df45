"""The training's callbacks, each alone: progress and ETA, the MLflow sender that never blocks a
step and keeps metrics while MLflow is away, early stopping, and the stall watchdog."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
import torch

from pipeline_steps.core.errors import EXIT_TRANSIENT
from pipeline_steps.core.lake import Lake
from pipeline_steps.core.manifests import LoopPosition
from pipeline_steps.core.settings import SettingsError, load_settings
from pipeline_steps.steps.train.callbacks import Plan, StepEnd
from pipeline_steps.steps.train.callbacks.early_stopping import EarlyStopping
from pipeline_steps.steps.train.callbacks.mlflow_logging import MetricSender
from pipeline_steps.steps.train.callbacks.progress import Progress
from pipeline_steps.steps.train.callbacks.watchdog import StackRecord, Watchdog
from pipeline_steps.steps.train.state import Fit


@dataclass
class FakeLoop:
    plan: Plan
    fit: Fit
    stopped_by: str | None = None
    written: list[LoopPosition] = field(default_factory=list)

    def write_checkpoint(self, at: LoopPosition) -> str | None:
        self.written.append(at)
        return None

    def request_stop(self, reason: str) -> None:
        self.stopped_by = reason


def _loop(epoch_steps: tuple[int, ...] = (100, 100)) -> FakeLoop:
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    fit = Fit(
        model=model,
        optimizer=optimizer,
        scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0),
    )
    plan = Plan(epoch_steps=epoch_steps, start=LoopPosition(), world_size=2, rank=0, master=True)
    return FakeLoop(plan=plan, fit=fit)


def _step(n: int, epoch: int = 0, step_s: float = 0.5, wait_s: float = 0.1) -> StepEnd:
    return StepEnd(
        at=LoopPosition(epoch=epoch, epoch_batches=n, step=n),
        loss=torch.tensor(0.5),
        rows=64,
        step_s=step_s,
        data_wait_s=wait_s,
        learning_rate=1e-3,
        checkpoint_due=False,
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_estimates_the_remaining_time_from_the_recent_step_rate(caplog) -> None:
    clock, loop = Clock(), _loop()
    progress = Progress(every_s=10, clock=clock)
    progress.on_train_start(loop)
    caplog.set_level(logging.INFO)
    for n in range(1, 41):  # 0.5 s a step: 20 steps an interval
        clock.now += 0.5
        progress.on_step_end(loop, _step(n))
    estimate = progress.latest
    assert estimate is not None and estimate.step == 40 and estimate.fraction == 0.2
    assert estimate.eta_s == pytest.approx(160 * 0.5)  # 160 steps left at 2 steps a second
    assert estimate.samples_per_s == pytest.approx(64 * 2 / 0.5)  # this rank's rows x 2 ranks
    assert estimate.step_s == 0.5 and estimate.data_wait_s == pytest.approx(0.1)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("progress ")]
    assert lines[-1] == (
        "progress 20.0% (step 40/200, epoch 1/2), 256 samples/s, 500.0 ms/step "
        "(100.0 waiting for data), ETA 1m20s"
    )


def test_progress_counts_the_validations_still_to_come() -> None:
    clock, loop = Clock(), _loop()
    progress = Progress(every_s=10, clock=clock)
    progress.on_train_start(loop)
    for n in range(1, 101):
        clock.now += 0.5
        progress.on_step_end(loop, _step(n))
    progress.on_validation_start(loop)
    clock.now += 30  # the epoch's validation
    progress.on_epoch_end(loop, {"epoch": 0, "val_loss": 1.0})  # its checkpoint, then epoch 1
    for n in range(101, 121):
        clock.now += 0.5
        progress.on_step_end(loop, _step(n, epoch=1))
    assert progress.latest is not None
    assert progress.latest.eta_s == pytest.approx(80 * 0.5 + 30)  # the last epoch's end


def test_progress_tells_the_plans_last_step_however_short_the_interval(caplog) -> None:
    clock, loop = Clock(), _loop()
    progress = Progress(every_s=10, clock=clock)
    progress.on_train_start(loop)
    caplog.set_level(logging.INFO)
    for n in range(1, 200):  # 0.01 s a step: the plan's 2 s never fill an interval
        clock.now += 0.01
        progress.on_step_end(loop, _step(n, epoch=n * 2 // 200))
    assert progress.latest is None
    clock.now += 0.01
    progress.on_step_end(loop, _step(200, epoch=1))
    assert progress.latest is not None and progress.latest.fraction == 1.0
    assert progress.latest.eta_s == pytest.approx(0.0)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("progress ")]
    assert lines == [lines[-1]] and lines[-1].startswith("progress 100.0% (step 200/200")


class FlakyClient:
    """An MLflow client that refuses the first ``refusals`` requests, then takes them."""

    def __init__(self, refusals: int = 0, hold: threading.Event | None = None) -> None:
        self.refusals, self.hold = refusals, hold
        self.batches: list[list[tuple[str, float, int]]] = []

    def log_batch(self, run_id: str, metrics: list, synchronous: bool) -> None:
        if self.hold is not None:
            self.hold.wait()
        if self.refusals:
            self.refusals -= 1
            raise ConnectionError("Connection refused")
        self.batches.append([(m.key, m.value, m.step) for m in metrics])


def test_metrics_wait_while_mlflow_is_away_and_are_sent_when_it_answers(caplog) -> None:
    caplog.set_level(logging.INFO)
    client = FlakyClient(refusals=3)
    sender = MetricSender("run", retry_s=0.05, client=client)
    for step in range(5):
        sender.add({"live/loss": 1.0 / (step + 1), "live/eta_s": float("nan")}, step)
    assert sender.close(timeout_s=10) == 0
    sent = [m for batch in client.batches for m in batch]
    assert sent == [("live/loss", 1.0 / (s + 1), s) for s in range(5)]  # in order, NaN left out
    messages = [r.getMessage() for r in caplog.records]
    assert any("they wait and are sent when it answers" in m for m in messages)
    assert any("MLflow answers again" in m for m in messages)


def test_a_restarted_attempt_sends_no_point_its_run_already_holds() -> None:
    """After an in-place restart the steps after the checkpoint are replayed: the points the
    first attempt logged stay the only ones at their steps."""
    client = FlakyClient()
    sender = MetricSender(
        "run", retry_s=0.05, client=client, logged={"live/loss": 7, "val_loss": 1}
    )
    for step in range(5, 10):
        sender.add({"live/loss": float(step)}, step)
    sender.add({"val_loss": 0.4, "val_auc": 0.7}, 1)
    sender.add({"val_loss": 0.3}, 2)
    assert sender.close(timeout_s=10) == 0
    sent = [m for batch in client.batches for m in batch]
    assert sent == [
        ("live/loss", 8.0, 8),
        ("live/loss", 9.0, 9),
        ("val_auc", 0.7, 1),
        ("val_loss", 0.3, 2),
    ]


def test_a_step_never_waits_for_mlflow_and_what_is_left_is_said(caplog) -> None:
    hold = threading.Event()  # MLflow hangs
    sender = MetricSender("run", retry_s=0.05, client=FlakyClient(hold=hold))
    began = time.monotonic()
    for step in range(2000):
        sender.add({"live/loss": 0.5}, step)
    assert time.monotonic() - began < 1.0
    assert sender.close(timeout_s=0.2) > 0
    assert "not sent: MLflow did not answer within" in caplog.text
    hold.set()


def test_early_stopping_keeps_the_best_weights_and_stops_after_patience() -> None:
    loop, stopping = _loop(), EarlyStopping(patience=2)
    with torch.no_grad():
        for epoch, val_loss in enumerate([1.0, 0.8, 0.9, 0.85]):
            loop.fit.model.weight.fill_(epoch)
            stopping.on_epoch_end(loop, {"epoch": epoch, "val_loss": val_loss})
            assert (loop.stopped_by is not None) == (epoch == 3)
    assert loop.fit.stopping.best_epoch == 1
    assert loop.fit.best_weights is not None and loop.fit.best_weights["weight"].eq(1).all()


def _blocked_reader(until: threading.Event) -> None:
    until.wait(10)


def test_the_watchdog_names_the_frame_a_stalled_step_waits_in(tmp_path: Path) -> None:
    exited, hooked = threading.Event(), []
    codes: list[int] = []

    def fake_exit(code: int) -> None:
        codes.append(code)
        exited.set()

    lake = Lake(str(tmp_path / "lake"))
    watchdog = Watchdog(
        timeout_s=0.3,
        allowance_s=0.6,
        record=StackRecord(lake, "run/stalls", rank=1),
        hooks=[lambda reason, stacks: hooked.append(reason)],
        exit=fake_exit,
    )
    loop = _loop()
    watchdog.on_train_start(loop)
    for n in range(1, 6):  # steps within the timeout: nothing happens
        time.sleep(0.1)
        watchdog.on_step_end(loop, _step(n))
    assert not exited.is_set()
    began = time.monotonic()
    _blocked_reader(exited)  # no step ends: the watchdog fires
    assert exited.is_set() and codes == [EXIT_TRANSIENT]
    assert 0.3 <= time.monotonic() - began < 2.0
    (written,) = (tmp_path / "lake" / "run" / "stalls").glob("*-rank-1.txt")
    text = written.read_text()
    assert text.startswith("stalled: no optimizer step ended for 0.3 s, waiting for step 6")
    assert "in _blocked_reader" in text and "train.stall_timeout_s=0.3" in text
    assert hooked and hooked[0].startswith("stalled:")
    watchdog.on_train_end(loop, None)


def test_the_first_watchdog_to_fire_stops_its_nodes_other_ranks(tmp_path: Path) -> None:
    """A stalled rank's peers wait for it in a collective and cannot stop at a boundary: the
    watchdog that fires kills them (SIGKILL) after its own records, then exits."""
    import subprocess
    import sys

    peer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    codes: list[int] = []
    watchdog = Watchdog(
        timeout_s=0.2,
        allowance_s=0.2,
        record=StackRecord(Lake(str(tmp_path / "lake")), "run/stalls", rank=1),
        exit=codes.append,
        peers=[peer.pid],
    )
    try:
        watchdog.on_train_start(_loop())
        assert peer.wait(timeout=10) == -9  # SIGKILL
        wait_until = time.monotonic() + 5
        while not codes and time.monotonic() < wait_until:
            time.sleep(0.05)
        assert codes == [EXIT_TRANSIENT]
    finally:
        peer.kill()
        watchdog.on_train_end(_loop(), None)


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("train.log_every_s=0", "train.log_every_s must be above 0"),
        ("train.stall_timeout_s=5", "train.stall_timeout_s must be 0 (no watchdog) or at least 10"),
        ("train.stall_allowance_s=60", "train.stall_allowance_s (60.0) must be at least"),
        ("train.system_metrics_s=-1", "train.system_metrics_s must not be negative"),
    ],
)
def test_bad_watching_settings_are_refused_naming_the_key(override: str, named: str) -> None:
    with pytest.raises(SettingsError, match=named.replace("(", r"\(").replace(")", r"\)")):
        load_settings(overrides=[override], environ={})


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests/gpu/test_cuda.py samples a GPU")
def test_mlflow_s_gpu_monitor_finds_nvml_s_bindings_and_no_gpu_here() -> None:
    """The bindings are installed with the project: without a GPU, MLflow's monitor is left out
    because NVML finds no driver, not because the bindings are missing (on CUDA it samples each
    GPU)."""
    from mlflow.system_metrics.metrics.gpu_monitor import GPUMonitor

    with pytest.raises(RuntimeError, match="Failed to initialize NVML"):
        GPUMonitor()


GLOO_TIMEOUT = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
    "waiting 2000ms for recv operation to complete"
)
"""What gloo raised in an all-reduce whose peer did not come within the group's timeout."""


def test_a_collective_that_timed_out_writes_the_stacks_and_other_errors_do_not(
    tmp_path: Path,
) -> None:
    lake = Lake(str(tmp_path / "lake"))
    watchdog = Watchdog(300, 1800, StackRecord(lake, "run/stalls", rank=0), exit=lambda code: None)
    loop = _loop()
    watchdog.on_train_start(loop)
    watchdog.on_train_end(loop, ValueError("train.batch_size must be at least 1"))
    assert not (tmp_path / "lake" / "run" / "stalls").exists()
    watchdog.on_train_end(loop, RuntimeError(GLOO_TIMEOUT))
    (written,) = (tmp_path / "lake" / "run" / "stalls").glob("*-rank-0.txt")
    text = written.read_text()
    assert text.startswith("a collective timed out ([/__w/pytorch")
    assert "test_a_collective_that_timed_out_writes_the_stacks" in text  # this frame


def test_every_callback_hears_the_end_and_the_training_s_error_stands(caplog) -> None:
    from types import SimpleNamespace

    from pipeline_steps.steps.train.callbacks import Callback
    from pipeline_steps.steps.train.trainer import Trainer

    heard: list[str] = []

    class Failing(Callback):
        def on_train_end(self, loop, error) -> None:  # type: ignore[no-untyped-def]
            heard.append("failing")
            raise ConnectionError("MLflow is down")

    class Closing(Callback):
        def on_train_end(self, loop, error) -> None:  # type: ignore[no-untyped-def]
            heard.append(f"closing after {type(error).__name__}")

    trainer = SimpleNamespace(callbacks=[Closing(), Failing()])
    Trainer._end(trainer, KeyboardInterrupt())  # type: ignore[arg-type]
    assert heard == ["failing", "closing after KeyboardInterrupt"]  # the last registered first
    assert "Failing failed at the end of the training" in caplog.text
    with pytest.raises(ConnectionError):  # a training that succeeded: the end's failure shows
        Trainer._end(trainer, None)  # type: ignore[arg-type]
    assert heard[-1] == "closing after NoneType"


def test_the_pushed_stall_limit_follows_the_watchdog_s() -> None:
    from pipeline_steps.core.pushgateway import Pushgateway
    from pipeline_steps.steps.train.callbacks.pushed_gauges import PushedGauges

    loop = _loop()
    pushed = PushedGauges(
        Pushgateway("http://127.0.0.1:9"), "d", "r", "", 10, 300, 1800, Progress(every_s=10)
    )

    def limit() -> float:
        return pushed.gauges()["trainyard_train_stall_timeout_seconds"].value

    assert limit() == 1800  # the first step
    pushed.on_step_end(loop, _step(1))
    assert limit() == 300
    pushed.on_step_end(loop, replace(_step(2), checkpoint_due=True))
    assert limit() == 1800  # its checkpoint
    pushed.on_step_end(loop, _step(3))
    pushed.on_validation_start(loop)
    assert limit() == 1800


def test_a_stall_a_peer_sees_is_recorded_in_rank_0s_mlflow_run(tmp_path: Path, monkeypatch) -> None:
    """When a rank other than 0 sees the stall (rank 0 frozen, a peer's watchdog first), that
    rank records it in the training's MLflow run: the tag naming the rank, its stacks, the run
    failed."""
    import mlflow

    from pipeline_steps.steps.train.callbacks.mlflow_logging import StallRecord

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # a rank's own: the settings' only
    client = mlflow.MlflowClient(uri)
    experiment = client.create_experiment("stalls", artifact_location=str(tmp_path / "artifacts"))
    run = client.create_run(experiment).info.run_id
    StallRecord(run, 1, uri).stalled("stalled: no optimizer step ended for 10 s", "Thread main")
    found = client.get_run(run)
    assert found.info.status == "FAILED"
    assert (
        found.data.tags["trainyard.stalled"] == "rank 1: stalled: no optimizer step ended for 10 s"
    )
    assert [a.path for a in client.list_artifacts(run, "stalls")] == ["stalls/rank-1.txt"]


def test_a_training_that_fails_ends_its_run_failed_so_a_restart_resumes_it(
    tmp_path: Path, monkeypatch
) -> None:
    """Left open, MLflow's exit handler would end the run FINISHED and a restarted worker would
    start a second run; ended FAILED (tagged with the error) it is the one the restart resumes."""
    import mlflow

    from pipeline_steps.steps.train.callbacks.mlflow_logging import MlflowLogging

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = mlflow.create_experiment("fails", artifact_location=str(tmp_path / "artifacts"))
    run = mlflow.start_run(experiment_id=experiment).info.run_id
    logging_ = MlflowLogging(
        run, 0, Progress(every_s=30), sender=MetricSender(run, client=FlakyClient())
    )
    logging_.on_train_end(_loop(), RuntimeError("Connection closed by peer [127.0.0.1]:29500"))
    assert mlflow.active_run() is None
    found = mlflow.MlflowClient().get_run(run)
    assert found.info.status == "FAILED"
    assert found.data.tags["trainyard.failed"] == (
        "RuntimeError: Connection closed by peer [127.0.0.1]:29500"
    )
