"""A running training's gauges on the Pushgateway (``monitoring.pushgateway_url``), for
Prometheus' ``TrainingStalled`` and ``TrainingSilent`` alerts (``containers/prometheus``).

Rank 0 keeps the gauges and a thread of its own pushes them every ``every_s`` seconds, so a
loop frozen in a step still reports, with its last step's time growing old: the stall alert
reads exactly that against the watchdog's limit of the moment (``train.stall_timeout_s`` after
a step, ``train.stall_allowance_s`` for the first step, validation and checkpoints). The
watchdog's verdict is pushed at once (``trainyard_train_stalled``); the end of the training
pushes ``trainyard_train_running 0``. One group per domain and run (job ``trainyard_train``), so a
retry of the run replaces the stalled attempt's gauges.
"""

from __future__ import annotations

import threading
import time

from pipeline_steps.core.pushgateway import TRAIN_JOB, Gauge, Pushgateway
from pipeline_steps.steps.train.callbacks import Callback, Loop, StepEnd
from pipeline_steps.steps.train.callbacks.progress import Progress

JOB = TRAIN_JOB


class PushedGauges(Callback):
    """Pushes rank 0's training gauges for ``domain`` and ``run`` (labelled with ``team``)."""

    def __init__(
        self,
        gateway: Pushgateway,
        domain: str,
        run: str,
        team: str,
        every_s: float,
        stall_timeout_s: float,
        stall_allowance_s: float,
        progress: Progress,
    ) -> None:
        self.gateway, self.every_s, self.progress = gateway, every_s, progress
        self.grouping = {"domain": domain, "run_id": run}
        self.labels = {"team": team} if team else {}
        # no watchdog (0): no stall limit either
        self._timeout_s = stall_timeout_s or float("inf")
        self._allowance_s = stall_allowance_s if stall_timeout_s else float("inf")
        self._limit_s = self._allowance_s
        self._running, self._stalled = 0.0, 0.0
        self._step, self._last_step_at = 0, time.time()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one push at a time, each of the state at its time
        self._thread: threading.Thread | None = None

    def gauges(self) -> dict[str, Gauge]:
        estimate = self.progress.latest
        gauges = {
            "trainyard_train_running": Gauge(self._running, "1 while the training runs"),
            "trainyard_train_stalled": Gauge(
                self._stalled, "1 when the stall watchdog stopped the training"
            ),
            "trainyard_train_step": Gauge(float(self._step), "optimizer steps done"),
            "trainyard_train_last_step_timestamp_seconds": Gauge(
                self._last_step_at, "when the last optimizer step ended (Unix time)"
            ),
            "trainyard_train_stall_timeout_seconds": Gauge(
                self._limit_s, "seconds the next step may take before the watchdog stops it"
            ),
        }
        if estimate is not None:
            gauges |= {
                "trainyard_train_progress_ratio": Gauge(estimate.fraction, "steps done of all"),
                "trainyard_train_samples_per_second": Gauge(
                    estimate.samples_per_s, "rows learnt per second over every rank"
                ),
                "trainyard_train_eta_seconds": Gauge(estimate.eta_s, "seconds left, estimated"),
            }
        return gauges

    def push(self) -> bool:
        with self._lock:
            return self.gateway.push_quietly(JOB, self.grouping, self.gauges(), self.labels)

    def on_train_start(self, loop: Loop) -> None:
        self._running, self._step, self._last_step_at = 1.0, loop.plan.start.step, time.time()
        self._limit_s = self._allowance_s
        self.push()
        self._thread = threading.Thread(target=self._pushing, name="pushgateway", daemon=True)
        self._thread.start()

    def on_step_end(self, loop: Loop, step: StepEnd) -> None:
        self._step, self._last_step_at = step.at.step, time.time()
        self._limit_s = self._allowance_s if step.checkpoint_due else self._timeout_s

    def on_validation_start(self, loop: Loop) -> None:
        self._limit_s = self._allowance_s  # until the next epoch's first step

    def on_train_end(self, loop: Loop, error: BaseException | None) -> None:
        self._stop.set()
        self._running = 0.0
        self.push()

    def stalled(self, reason: str, stacks: str) -> None:
        """The watchdog's hook: the verdict pushed at once, before the exit."""
        self._stalled = 1.0
        self._stop.set()
        self.push()

    def _pushing(self) -> None:
        while not self._stop.wait(self.every_s):
            self.push()
