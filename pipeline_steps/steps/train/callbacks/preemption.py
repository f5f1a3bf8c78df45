"""Preemption: SIGTERM → every rank stops at the same step boundary → a checkpoint → a retry.

A preempted pod or reclaimed spot node gets SIGTERM and a grace period before SIGKILL
(Kubernetes: the pod's ``terminationGracePeriodSeconds``; torchrun forwards the signal to its
workers and kills them 30 s later). ``Preemption`` turns the signal into a flag on each rank; at
each optimizer-step boundary the loop asks ``stop()``, and the ranks agree through one small
all-reduce (on the CPU, so a GPU step is never synchronised for it), started at one boundary and
read at the next: the ranks stop together at most two steps after the first of them took the
signal. The callback then has the loop write a checkpoint at that boundary and raises
``Preempted``, a transient failure (exit 75): torchrun or Airflow starts the step again and it
resumes from that checkpoint, redoing no step.

Should no boundary come within ``train.preemption_grace_s`` (a peer gone, a step longer than the
grace), the process exits 75 at once, before SIGKILL cuts a write short, and the retry resumes
from the last periodic checkpoint.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

from pipeline_steps.core.errors import EXIT_TRANSIENT, TransientError
from pipeline_steps.core.manifests import LoopPosition
from pipeline_steps.steps.train.callbacks import Callback, Loop, StepEnd
from pipeline_steps.steps.train.distributed import Processes
from pipeline_steps.steps.train.state import EpochRecord

log = logging.getLogger(__name__)


class Preempted(TransientError):
    """The training stopped on SIGTERM after checkpointing at ``at``; a retry resumes from it."""

    def __init__(self, message: str, at: LoopPosition | None = None) -> None:
        super().__init__(message)
        self.at = at


class Preemption(Callback):
    """SIGTERM on this rank, and the ranks' agreement to stop, at optimizer-step boundaries.

    Every rank asks ``stop()`` at the same boundaries, in the same order: after each step and
    after each epoch's validation; the training's end (also a failure) restores the previous
    handler.
    """

    def __init__(self, processes: Processes, grace_s: float) -> None:
        self._processes, self._grace_s = processes, grace_s
        self.signalled_at: float | None = None
        """``time.monotonic()`` when this rank took SIGTERM."""
        self.signalled_step: int | None = None
        """The optimizer step this rank was computing when it took SIGTERM."""
        self._boundary = 0
        self._pending: tuple[Any, torch.Tensor] | None = None
        self._group: Any = None
        if processes.distributed:
            # a group of its own on the CPU: the flag never waits on a GPU stream nor
            # interleaves with the gradients' collectives
            self._group = dist.new_group(backend="gloo")
        self._watchdog: threading.Timer | None = None
        self._previous = signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.signalled_at is not None:
            return
        self.signalled_at = time.monotonic()
        self.signalled_step = self._boundary + 1
        log.warning(
            "SIGTERM: stopping at the next step boundary, checkpointing within %ss",
            self._grace_s,
        )
        self._watchdog = threading.Timer(self._grace_s, _give_up, args=(self._grace_s,))
        self._watchdog.daemon = True
        self._watchdog.start()

    def stop(self, step: int, settle: bool = False) -> bool:
        """Whether every rank stops at this boundary, after optimizer step ``step``: some rank
        took SIGTERM before the previous boundary (one process: before this one). With
        ``settle`` (every rank alike: a boundary that writes a checkpoint anyway, and so waits
        for every rank), before this one: the checkpoint due here is the stop's, written
        once."""
        self._boundary = step
        flag = self.signalled_at is not None
        if not self._processes.distributed:
            return flag
        agreed = False
        if self._pending is not None:
            work, value = self._pending
            work.wait()
            agreed = bool(value.item())
        value = torch.tensor([int(flag)], dtype=torch.int32)
        work = dist.all_reduce(value, op=dist.ReduceOp.MAX, group=self._group, async_op=True)
        self._pending = (work, value)
        if settle:
            work.wait()
            self._pending = None
            agreed = agreed or bool(value.item())
        return agreed

    def on_step_end(self, loop: Loop, step: StepEnd) -> None:
        if self.stop(step.at.step, settle=step.checkpoint_due):
            self._stop_at(loop, step.at)

    def on_epoch_end(self, loop: Loop, record: EpochRecord) -> None:
        # taken during validation: stop at the epoch's end, its checkpoint the stop's (not
        # when the training ends after this epoch anyway)
        if loop.stopped_by is None and self.stop(loop.fit.position.step):
            self._stop_at(loop, loop.fit.position)

    def on_train_end(self, loop: Loop, error: BaseException | None) -> None:
        self.close(failed=error is not None)

    def _stop_at(self, loop: Loop, at: LoopPosition) -> None:
        """Every rank: checkpoint at ``at`` and raise ``Preempted``."""
        path = loop.write_checkpoint(at)
        took = self.seconds_since_signal()
        where = f" as {path}" if path else ""
        taken = (
            f"SIGTERM during optimizer step {self.signalled_step}"
            if self.signalled_step is not None
            else "a peer took SIGTERM"
        )
        raise Preempted(
            f"{taken}: stopped after step {at.step} (epoch {at.epoch}), checkpointed{where} "
            f"{took:.2f} s after the signal; the retry resumes from it",
            at,
        )

    def seconds_since_signal(self) -> float:
        return 0.0 if self.signalled_at is None else time.monotonic() - self.signalled_at

    def close(self, failed: bool = False) -> None:
        """Wait for the last agreement under way (not when the training ``failed``: a peer may
        be gone, and its error would hide the training's own), stop the watchdog, restore the
        handler."""
        if self._pending is not None and not failed:
            self._pending[0].wait()
        self._pending = None
        if self._watchdog is not None:
            self._watchdog.cancel()
        signal.signal(signal.SIGTERM, self._previous)


def _give_up(grace_s: float) -> None:
    """No step boundary within the grace: exit transient now, the last periodic checkpoint
    stands."""
    print(
        f"trainyard step train failed (transient): SIGTERM and no step boundary within "
        f"train.preemption_grace_s={grace_s}s; the retry resumes from the last checkpoint",
        file=sys.stderr,
        flush=True,
    )
    os._exit(EXIT_TRANSIENT)
