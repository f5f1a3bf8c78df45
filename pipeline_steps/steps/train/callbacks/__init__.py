"""What the training loop tells the rest of a training, and how they answer.

The ``Trainer`` runs the steps, validation and checkpoints; everything else a training does
alongside is a ``Callback`` in a module of its own here, registered on the trainer:

``early_stopping``  the lowest validation loss, its weights, and stopping after ``patience``
``trial_pruning``   a tuning trial's report to its study, and the pruner's stop
``preemption_stop`` SIGTERM → every rank stops at one step boundary with a checkpoint
``mlflow_logging``  live step metrics and the epochs' metrics, batched, in the background
``progress``        progress %, throughput and ETA, one log line per interval
``system_metrics``  MLflow's CPU, memory, disk, network (and GPU) metrics, per node
``watchdog``        no step for too long → every rank's stacks dumped, a transient exit

Every rank calls every event in the same order; a callback that talks to the other ranks (a
broadcast, an all-reduce) does so at the same events on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from pipeline_steps.core.manifests import LoopPosition
from pipeline_steps.steps.train.state import EpochRecord, Fit


@dataclass(frozen=True, slots=True)
class Plan:
    """What the training will do from its start (or resume): the optimizer steps of each
    epoch, the processes, and where it starts."""

    epoch_steps: tuple[int, ...]
    """Optimizer steps in each epoch (all of them, finished or not)."""
    start: LoopPosition
    world_size: int
    rank: int
    master: bool
    readers: int = 0
    """Processes that read rows of their own: the world size, or a pipeline training's
    pipelines (0: the world size)."""

    @property
    def total_steps(self) -> int:
        return sum(self.epoch_steps)

    @property
    def epochs(self) -> int:
        return len(self.epoch_steps)


@dataclass(frozen=True, slots=True)
class StepEnd:
    """One optimizer step, as this rank ran it."""

    at: LoopPosition
    """Where the loop stands after the step."""
    loss: torch.Tensor
    """The last micro-batch's loss (on the training device: reading it waits for the step)."""
    rows: int
    """Rows this rank learnt from in the step."""
    step_s: float
    """Wall time of the step, reading its batches included."""
    data_wait_s: float
    """Of which waiting for the batches."""
    learning_rate: float
    checkpoint_due: bool
    """A periodic checkpoint is written at this boundary, after the callbacks."""


class Loop(Protocol):
    """What a callback may ask of the loop running it."""

    @property
    def fit(self) -> Fit: ...

    @property
    def plan(self) -> Plan: ...

    @property
    def stopped_by(self) -> str | None:
        """Why the training ends after this epoch (None: it goes on)."""
        ...

    def write_checkpoint(self, at: LoopPosition) -> str | None:
        """Checkpoint the training at ``at``; every rank calls it; the path on rank 0."""
        ...

    def request_stop(self, reason: str) -> None:
        """End the training after this epoch (every rank must ask alike)."""
        ...


class Callback:
    """A part of a training that is not the loop itself. Every method is optional."""

    def on_train_start(self, loop: Loop) -> None:
        """Before the first step (of this process: also after a resume)."""

    def on_step_end(self, loop: Loop, step: StepEnd) -> None:
        """After each optimizer step; may raise to end the training."""

    def on_validation_start(self, loop: Loop) -> None:
        """The epoch's steps are done; validation starts."""

    def on_epoch_end(self, loop: Loop, record: EpochRecord) -> None:
        """The epoch is validated (``record``: its number and metrics, in the fit's history;
        the fit's position is the next epoch's start), before its checkpoint is written."""

    def on_train_end(self, loop: Loop, error: BaseException | None) -> None:
        """The epochs ended (``error`` None), or the training is failing with ``error``."""
