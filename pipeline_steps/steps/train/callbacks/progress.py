"""Progress: how far the training is, how fast it goes, and when it will end.

Every ``train.log_every_s`` seconds, and at the plan's last step, the progress is estimated
from the optimizer steps done of the plan's total and the recent step rate (smoothed over the
last intervals), plus, once an epoch ended, the mean time between an epoch's last step and the
next one's first (validation, the epoch's checkpoint, opening the next epoch's data) for each
epoch end still to come. Rank 0 logs it as one line (the Airflow task log shows it as the
training runs); ``latest`` is what the MLflow callback sends and the Pushgateway's gauges say.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from pipeline_steps.steps.train.callbacks import Callback, Loop, StepEnd

log = logging.getLogger(__name__)

SMOOTHING = 0.2
"""Weight of the latest interval's step rate in the estimate (the rest: the earlier ones)."""


@dataclass(frozen=True, slots=True)
class Estimate:
    """The progress after optimizer step ``step`` of ``total_steps``."""

    step: int
    total_steps: int
    epoch: int
    epochs: int
    samples_per_s: float
    """Rows per second over every rank (this rank's times the world size) in the interval."""
    step_s: float
    """Mean wall time of a step in the interval."""
    data_wait_s: float
    """Of which, waiting for the batches."""
    eta_s: float
    """Seconds until the last epoch is validated, at the recent rate."""

    @property
    def fraction(self) -> float:
        return self.step / max(self.total_steps, 1)

    def line(self) -> str:
        return (
            f"progress {100 * self.fraction:.1f}% (step {self.step}/{self.total_steps}, "
            f"epoch {self.epoch + 1}/{self.epochs}), {self.samples_per_s:,.0f} samples/s, "
            f"{1000 * self.step_s:.1f} ms/step ({1000 * self.data_wait_s:.1f} waiting for data), "
            f"ETA {_duration(self.eta_s)}"
        )


class Progress(Callback):
    """Estimates the progress every ``every_s`` seconds of steps; rank 0 logs it."""

    def __init__(self, every_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s, self._clock = every_s, clock
        self.latest: Estimate | None = None
        self._rate = 0.0  # steps per second, smoothed
        self._boundaries: list[float] = []  # seconds from an epoch's last step to the next's first
        self._boundary_began: float | None = None
        self._reset(clock())

    def _reset(self, now: float) -> None:
        self._since, self._steps, self._rows, self._step_s, self._wait_s = now, 0, 0, 0.0, 0.0
        self._paused = 0.0  # epoch-boundary time within the interval, left out of its rate

    def on_train_start(self, loop: Loop) -> None:
        self._reset(self._clock())

    def on_step_end(self, loop: Loop, step: StepEnd) -> None:
        plan = loop.plan
        if plan.master and plan.start.step and step.at.step == plan.start.step + 1:
            log.info(
                "resumed: optimizer step %d done on %d processes", step.at.step, plan.world_size
            )
        now = self._clock()
        if self._boundary_began is not None:  # the first step after an epoch's end
            boundary = max(0.0, now - step.step_s - self._boundary_began)
            self._boundaries.append(boundary)
            self._paused += boundary
            self._boundary_began = None
        self._steps += 1
        self._rows += step.rows
        self._step_s += step.step_s
        self._wait_s += step.data_wait_s
        interval = now - self._since - self._paused
        if interval < self.every_s and step.at.step < plan.total_steps:
            return  # the plan's last step is always told: where a watcher sees 100%
        rate = self._steps / max(interval, 1e-9)
        self._rate = rate if self._rate == 0 else SMOOTHING * rate + (1 - SMOOTHING) * self._rate
        left = plan.total_steps - step.at.step
        boundaries_left = plan.epochs - step.at.epoch
        boundary_s = sum(self._boundaries) / len(self._boundaries) if self._boundaries else 0.0
        self.latest = Estimate(
            step=step.at.step,
            total_steps=plan.total_steps,
            epoch=step.at.epoch,
            epochs=plan.epochs,
            samples_per_s=self._rows * (plan.readers or plan.world_size) / max(interval, 1e-9),
            step_s=self._step_s / self._steps,
            data_wait_s=self._wait_s / self._steps,
            eta_s=left / self._rate + boundaries_left * boundary_s,
        )
        if plan.master:
            log.info("%s", self.latest.line())
        self._reset(now)

    def on_validation_start(self, loop: Loop) -> None:
        self._boundary_began = self._clock()


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
