"""The training's metrics in MLflow while it runs, sent by rank 0 in the background.

Every ``train.log_every_s`` seconds (with the progress estimate) the latest step's figures go
to the run as ``live/loss``, ``live/learning_rate``, ``live/samples_per_s``, ``live/step_time_s``,
``live/data_wait_s``, ``live/progress`` (0 to 1) and ``live/eta_s``, at the optimizer step; the
loss every ``train.log_every`` steps as ``train_loss_step``; each epoch's metrics at the epoch.
A sender thread batches them into ``log_batch`` requests: a step never waits for MLflow. While
MLflow cannot be reached the metrics wait and are sent when it answers again; at the end of the
training the sender is given ``FLUSH_S`` seconds to send what is left.

MLflow is imported inside the functions: the other ranks never load it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping
from typing import Any

from pipeline_steps.steps.train import mlflow_run
from pipeline_steps.steps.train.callbacks import Callback, Loop, StepEnd
from pipeline_steps.steps.train.callbacks.preemption import Preempted
from pipeline_steps.steps.train.callbacks.progress import Progress
from pipeline_steps.steps.train.state import EpochRecord

log = logging.getLogger(__name__)

FLUSH_S = 60.0
"""How long the end of a training waits for the metrics still to send."""
PREEMPTED_FLUSH_S = 5.0
"""The same for a preempted training, which has its grace before SIGKILL to spend."""
BATCH = 1000
"""MLflow's limit of metrics in one ``log_batch`` request."""


class MetricSender:
    """A thread that sends ``(key, value, step)`` metrics of one run to MLflow in batches, in
    the order they came; a failed request is tried again ``retry_s`` later with the same
    metrics."""

    def __init__(
        self,
        run_id: str,
        retry_s: float = 5.0,
        client: Any = None,
        logged: Mapping[str, int] | None = None,
    ) -> None:
        self.run_id, self.retry_s = run_id, retry_s
        self.logged = dict(logged or {})
        """The last step of each metric the run already holds (an earlier attempt's): a point
        at or before it is not sent again."""
        self._client = client
        self._pending: list[tuple[str, float, int, int]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = False
        self._failing = False
        self.sent = 0
        self._thread = threading.Thread(target=self._run, name="mlflow-metrics", daemon=True)
        self._thread.start()

    def add(self, metrics: dict[str, float], step: int) -> None:
        """Queue the finite ``metrics`` at ``step``; returns at once."""
        now = int(time.time() * 1000)
        found = [
            (k, float(v), now, step)
            for k, v in metrics.items()
            if math.isfinite(v) and step > self.logged.get(k, -1)
        ]
        with self._lock:
            self._pending.extend(found)
        self._wake.set()

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._pending)

    def close(self, timeout_s: float = FLUSH_S) -> int:
        """Send what waits, for at most ``timeout_s``; returns how many metrics were left."""
        self._closing = True
        self._wake.set()
        self._thread.join(timeout_s)
        left = self.waiting
        if left:
            log.warning(
                "%d metric value(s) of MLflow run %s not sent: MLflow did not answer within %.0f s",
                left,
                self.run_id,
                timeout_s,
            )
        return left

    def _run(self) -> None:
        while True:
            self._wake.wait(self.retry_s)
            self._wake.clear()
            while self.waiting and self._send_one():
                pass
            if self._closing and not self.waiting:
                return

    def _send_one(self) -> bool:
        """Send the oldest batch; True when MLflow took it."""
        with self._lock:
            batch = self._pending[:BATCH]
        if not batch:
            return True
        try:
            self._log(batch)
        except Exception as exc:  # any failure: the metrics wait for the next try
            if not self._failing:
                log.warning(
                    "MLflow did not take the training's metrics (%s); they wait and are sent "
                    "when it answers",
                    str(exc).splitlines()[0][:200],
                )
            self._failing = True
            return False
        with self._lock:
            del self._pending[: len(batch)]
        if self._failing:
            log.info("MLflow answers again: sending the metrics that waited")
        self._failing = False
        self.sent += len(batch)
        return True

    def _log(self, batch: list[tuple[str, float, int, int]]) -> None:
        from mlflow.entities import Metric

        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient()
        metrics = [Metric(key, value, when, step) for key, value, when, step in batch]
        self._client.log_batch(self.run_id, metrics=metrics, synchronous=True)


class MlflowLogging(Callback):
    """Rank 0's metrics of the training's MLflow run (``run_id``): live step figures with each
    progress estimate, the loss every ``loss_every`` steps, the epochs' metrics."""

    def __init__(
        self,
        run_id: str,
        loss_every: int,
        progress: Progress,
        sender: MetricSender | None = None,
        logged: Mapping[str, int] | None = None,
    ) -> None:
        self.run_id, self.loss_every, self.progress = run_id, loss_every, progress
        self.sender = sender or MetricSender(run_id, logged=logged)
        self._sent_estimate: object = None

    def on_step_end(self, loop: Loop, step: StepEnd) -> None:
        n = step.at.step
        if self.loss_every and n % self.loss_every == 0:
            self.sender.add({"train_loss_step": float(step.loss.detach())}, n)
        estimate = self.progress.latest
        if estimate is None or estimate is self._sent_estimate:
            return
        self._sent_estimate = estimate
        live = {
            "live/loss": float(step.loss.detach()),
            "live/learning_rate": step.learning_rate,
            "live/samples_per_s": estimate.samples_per_s,
            "live/step_time_s": estimate.step_s,
            "live/data_wait_s": estimate.data_wait_s,
            "live/progress": estimate.fraction,
            "live/eta_s": estimate.eta_s,
        }
        self.sender.add(live, n)

    def on_epoch_end(self, loop: Loop, record: EpochRecord) -> None:
        epoch = int(record["epoch"])
        self.sender.add({k: v for k, v in record.items() if k != "epoch"}, epoch)
        log.info("epoch %d: %s", epoch, {k: round(v, 4) for k, v in record.items() if k != "epoch"})

    def on_train_end(self, loop: Loop, error: BaseException | None) -> None:
        if isinstance(error, Preempted):  # within the grace before SIGKILL
            self.sender.close(PREEMPTED_FLUSH_S)
            if error.at is not None:
                mlflow_run.preempted(error.at)
            return
        if error is not None:  # a peer lost, a failed step: torchrun gives the rank little time
            self.sender.close(PREEMPTED_FLUSH_S)
            mlflow_run.failed(error)
            return
        self.sender.close()

    def stalled(self, reason: str, stacks: str) -> None:
        """The watchdog's hook: see :func:`record_stall`."""
        record_stall(self.run_id, 0, reason, stacks)


def record_stall(
    run_id: str, rank: int, reason: str, stacks: str, tracking_uri: str | None = None
) -> None:
    """A stall as the rank that saw it records it in the training's MLflow run: its stacks as
    the artifact ``stalls/rank-<rank>.txt``, the reason as the tag ``trainyard.stalled``
    (naming the rank unless it is 0), the run ended as failed (the retry starts a new attempt
    of the same run). Whichever rank's watchdog fires first records it: a frozen rank 0 is
    often stopped by torchrun when a waiting peer's watchdog exits before its own."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)  # None: this process's (rank 0 set it)
    said = reason if rank == 0 else f"rank {rank}: {reason}"
    client.log_text(run_id, f"{said}\n\n{stacks}", f"stalls/rank-{rank}.txt")
    client.set_tag(run_id, "trainyard.stalled", said[:5000])
    client.set_terminated(run_id, status="FAILED")


class StallRecord(Callback):
    """A rank other than 0: records a stall its watchdog saw in rank 0's MLflow run, in the
    store at ``tracking_uri`` (:func:`record_stall`); it logs nothing else."""

    def __init__(self, run_id: str, rank: int, tracking_uri: str) -> None:
        self.run_id, self.rank, self.tracking_uri = run_id, rank, tracking_uri

    def stalled(self, reason: str, stacks: str) -> None:
        record_stall(self.run_id, self.rank, reason, stacks, self.tracking_uri)
