"""The stall watchdog: a rank that completes no optimizer step for too long is stopped, with
every thread's Python stack written down, so that the retry resumes from the last checkpoint
instead of the task hanging until its timeout.

Each rank runs its own watchdog thread. A step must end within ``train.stall_timeout_s`` of
the previous one; the first step after a start, and validation with the epoch's checkpoint,
get ``train.stall_allowance_s``. Past that, the rank writes its stacks to the log (the Airflow
task log) and to ``<run>/stalls/`` in the lake, the callbacks' ``stalled`` hooks run (the rank
that saw it ends rank 0's MLflow run as failed, with the reason and the stacks; the Pushgateway
hears of it from rank 0), and the process exits with the
transient code (75), as a preempted training does. A rank blocked outside any collective (a
hung reader, a deadlock) is caught by its own watchdog; its peers, waiting for it in the next
collective, are caught by theirs. The first rank whose watchdog fires also stops this node's
other ranks (SIGKILL, after its hooks): a rank frozen for good, which no signal handler reaches,
would otherwise hold torchrun 30 s after its SIGTERM. A collective that times out
(``train.collective_timeout_s``) writes the stacks the same way before the error ends the
training.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from pipeline_steps.core.errors import EXIT_TRANSIENT
from pipeline_steps.core.lake import Lake
from pipeline_steps.steps.train.callbacks import Callback, Loop, StepEnd
from pipeline_steps.steps.train.state import EpochRecord

log = logging.getLogger(__name__)

HOOKS_S = 10.0
"""How long the stacks' file and the ``stalled`` hooks (ending the MLflow run, the pushed
verdict) may take before the exit."""

StallHook = Callable[[str, str], None]
"""Called with the reason and the stacks, from the watchdog's thread, before the exit."""


def stacks(skip: int | None = None) -> str:
    """Every thread's Python stack, innermost call last, each headed by the thread's name
    (``skip``: a thread id to leave out)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        if ident == skip:
            continue
        stack = "".join(traceback.format_stack(frame))
        parts.append(f'Thread "{names.get(ident, ident)}" ({ident}):\n{stack}')
    return "\n".join(parts)


class StackRecord:
    """Where a rank's stacks are written: the log, and ``<folder>/<time>-rank-<rank>.txt`` in
    the lake."""

    def __init__(self, lake: Lake, folder: str, rank: int) -> None:
        self.lake, self.folder, self.rank = lake, folder, rank

    def write(self, reason: str, text: str) -> str | None:
        """Log ``reason`` and ``text``, then ``save`` them."""
        self.log(reason, text)
        return self.save(reason, text)

    def log(self, reason: str, text: str) -> None:
        print(f"rank {self.rank}: {reason}\n{text}", file=sys.stderr, flush=True)

    def save(self, reason: str, text: str) -> str | None:
        """Write them to the lake; the file's path (None when the lake refused it: the log
        still has them)."""
        when = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        try:
            return self.lake.write_bytes(
                f"{reason}\n\n{text}".encode(), self.folder, f"{when}-rank-{self.rank}.txt"
            )
        except Exception as exc:  # the stacks are in the log; the exit must not wait on this
            log.warning("could not write the stacks to %s: %s", self.folder, exc)
            return None


class Watchdog(Callback):
    """Exits this rank (transient) when no step ends within ``timeout_s`` of the last
    (``allowance_s`` for the first step and for validation with the epoch's checkpoint)."""

    def __init__(
        self,
        timeout_s: float,
        allowance_s: float,
        record: StackRecord,
        hooks: Sequence[StallHook] = (),
        exit: Callable[[int], None] = os._exit,
        clock: Callable[[], float] = time.monotonic,
        peers: Sequence[int] = (),
    ) -> None:
        self.timeout_s, self.allowance_s, self.record = timeout_s, allowance_s, record
        self.hooks = list(hooks)
        self.peers = list(peers)
        """The process ids of this node's other ranks, stopped with this one."""
        self._exit, self._clock = exit, clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._deadline = 0.0
        self._waiting_for = "the first step"
        self._limit = allowance_s
        self._last_step = 0
        self._step_s = 0.0
        self._thread: threading.Thread | None = None

    def _arm(self, limit: float, waiting_for: str) -> None:
        with self._lock:
            self._deadline = self._clock() + limit
            self._limit, self._waiting_for = limit, waiting_for

    def on_train_start(self, loop: Loop) -> None:
        self._last_step = loop.plan.start.step
        self._arm(self.allowance_s, f"the first step (step {self._last_step + 1})")
        self._thread = threading.Thread(target=self._watch, name="stall-watchdog", daemon=True)
        self._thread.start()

    def on_step_end(self, loop: Loop, step: StepEnd) -> None:
        self._last_step = step.at.step
        self._step_s = step.step_s if self._step_s == 0 else 0.9 * self._step_s + 0.1 * step.step_s
        if step.checkpoint_due:  # the loop writes a checkpoint before the next step
            self._arm(self.allowance_s, f"the checkpoint of step {step.at.step}")
        else:
            self._arm(self.timeout_s, f"step {step.at.step + 1}")

    def on_validation_start(self, loop: Loop) -> None:
        epoch = loop.fit.position.epoch
        self._arm(self.allowance_s, f"the validation and checkpoint of epoch {epoch}")

    def on_epoch_end(self, loop: Loop, record: EpochRecord) -> None:
        # the next epoch's first step opens its data: the allowance holds until it ends
        self._arm(self.allowance_s, f"the first step of epoch {int(record['epoch']) + 1}")

    def on_train_end(self, loop: Loop, error: BaseException | None) -> None:
        self._stop.set()
        if error is not None and collective_timeout(error):
            reason = f"a collective timed out ({str(error).splitlines()[0][:300]})"
            self.record.write(reason, stacks())

    def _watch(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                left = self._deadline - self._clock()
            if left <= 0:
                self._stalled()
                return
            self._stop.wait(min(left, 1.0))

    def _stalled(self) -> None:
        with self._lock:
            limit, waiting_for = self._limit, self._waiting_for
        reason = (
            f"stalled: no optimizer step ended for {limit:g} s, waiting for {waiting_for} "
            f"(train.stall_timeout_s={self.timeout_s:g}, train.stall_allowance_s="
            f"{self.allowance_s:g}"
            + (f"; steps took {self._step_s:.2f} s lately" if self._step_s else "")
            + "); every thread's stack follows"
        )
        text = stacks(skip=threading.get_ident())
        self.record.log(reason, text)
        # the lake and MLflow may be what hangs: their writes get HOOKS_S, then the exit
        hooks = threading.Thread(target=self._run_hooks, args=(reason, text), daemon=True)
        hooks.start()
        hooks.join(HOOKS_S)
        print(
            f"trainyard step train failed (transient): {reason.split(';')[0]}; the retry "
            "resumes from the last checkpoint",
            file=sys.stderr,
            flush=True,
        )
        self._stop_peers()
        self._exit(EXIT_TRANSIENT)

    def _stop_peers(self) -> None:
        """SIGKILL this node's other ranks: a rank that makes no step holds every other one in
        the next collective, so none of them can stop at a step boundary, and one frozen for
        good (stopped, or stuck in native code) ignores the SIGTERM torchrun sends, which then
        waits 30 s before its own SIGKILL. Their own watchdogs fired about now too, and had
        this one's hooks' time to write their stacks."""
        killed = []
        for pid in self.peers:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            killed.append(pid)
        if killed:
            log.warning("stopped this node's other ranks (pids %s) with this one", killed)

    def _run_hooks(self, reason: str, text: str) -> None:
        self.record.save(reason, text)
        for hook in self.hooks:
            try:
                hook(reason, text)
            except Exception as exc:
                log.warning("after the stall, %s failed: %s", hook, exc)


def collective_timeout(error: BaseException) -> bool:
    """Whether ``error`` is a collective that timed out (gloo's or NCCL's)."""
    import torch.distributed as dist

    text = str(error).lower()
    timed_out = "timed out" in text or "timeout" in text
    backend = isinstance(error, dist.DistBackendError) or any(
        word in text for word in ("gloo", "nccl", "collective")
    )
    return timed_out and backend
