"""The training loop: steps, validation and checkpoints, with its callbacks around them.

``Trainer.train`` runs the epochs from the fit's position (a fresh start or a resumed
checkpoint): each epoch's optimizer steps (accumulate, clip, step), the periodic checkpoints,
validation, the epoch's record and its checkpoint. Everything else (logging, pruning,
preemption, early stopping, progress, the watchdog) is a callback (``callbacks``) that observes
the events and may stop the training.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import islice

import torch

from pipeline_steps.core.manifests import LoopPosition
from pipeline_steps.core.settings import TrainSettings
from pipeline_steps.steps.train import checkpoint, distributed, step
from pipeline_steps.steps.train.callbacks import Callback, Plan, StepEnd
from pipeline_steps.steps.train.data import Preprocessor, TensorSet, TrainingTable
from pipeline_steps.steps.train.distributed import Processes
from pipeline_steps.steps.train.heads import Head
from pipeline_steps.steps.train.layout import Layout, epoch_steps
from pipeline_steps.steps.train.state import EpochRecord, Fit
from pipeline_steps.steps.train.strategy import Strategy

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class Trainer:
    """One training's loop: what it trains (``fit``) on what (``table`` through ``pre``, cut
    into steps by ``layout``), how the processes share it (``sharing``), where it checkpoints,
    and the callbacks around it."""

    cfg: TrainSettings
    procs: Processes
    fit: Fit
    wrapped: torch.nn.Module
    """The model as the steps call it (wrapped for DDP or sharded)."""
    sharing: Strategy
    head: Head
    table: TrainingTable
    pre: Preprocessor
    label: str
    layout: Layout
    checkpoints: checkpoint.Checkpoints
    micro_batches: list[int]
    """Each epoch's micro-batches per layout rank."""
    validation_forwards: int
    reseed: bool = False
    """Resumed on another number of processes: the RNG states are seeded afresh."""
    callbacks: list[Callback] = field(default_factory=list)
    stopped_by: str | None = None
    """Why a callback ended the training early (None: the epochs ran out)."""
    _carried: tuple[float, float] = (0.0, 0.0)
    """The running epoch's training loss sum and rows before a resume, over every rank."""
    _loss_sum: torch.Tensor = field(default_factory=lambda: torch.zeros(()))
    """This rank's training loss sum over the running epoch's rows since the start."""
    _seen: int = 0

    def __post_init__(self) -> None:
        self._data = self.sharing.data  # which rows this process reads: every step asks
        accumulation = self.cfg.grad_accumulation
        self.plan = Plan(
            epoch_steps=tuple(b // accumulation for b in self.micro_batches),
            start=self.fit.position,
            world_size=self.procs.world_size,
            rank=self.procs.rank,
            master=self.procs.master,
            readers=self._data.world_size,
        )
        self._parameters = list(self.fit.model.parameters())

    def train(self) -> None:
        """Run the epochs left: step, validate, checkpoint; the callbacks hear of each step
        and epoch, and of the end (or the failure)."""
        try:
            self._emit("on_train_start")
            while self.fit.position.epoch < self.cfg.epochs and self.stopped_by is None:
                self._seed_epoch()
                started = time.perf_counter()
                steps = self._run_steps()
                elapsed = time.perf_counter() - started
                self._emit("on_validation_start")
                record = self._end_epoch(steps, elapsed)
                self._emit("on_epoch_end", record)
                self.write_checkpoint(self.fit.position)
        except BaseException as error:
            self._end(error)
            raise
        self._end(None)

    def _run_steps(self) -> int:
        """The epoch's optimizer steps from the fit's position, each heard by the callbacks,
        with the periodic checkpoints; the optimizer steps taken in all at its end."""
        cfg, at = self.cfg, self.fit.position
        epoch, batches, done = at.epoch, at.epoch_batches, at.step
        self.wrapped.train()
        self._carried, self._seen = self.fit.epoch_loss, 0
        self._loss_sum = torch.zeros((), device=self.procs.device)
        steps_left = (self.micro_batches[epoch] - batches) // cfg.grad_accumulation
        stream = epoch_steps(
            self.table, self.pre, self.label, cfg, self.layout, self._data, epoch, skip=batches
        )
        for micro, waited in _timed(islice(stream, steps_left)):
            loss = self._learn(micro)
            batches += cfg.grad_accumulation
            done += 1
            at = LoopPosition(epoch=epoch, epoch_batches=batches, step=done)
            due = self._checkpoint_due(at)
            self._emit("on_step_end", self._step_end(at, loss, micro, waited, due))
            if due:
                self.write_checkpoint(at)
        return done

    def _learn(self, micro: list[TensorSet]) -> torch.Tensor:
        """One optimizer step over the accumulation's micro-batches; the last micro-batch's
        loss (the epoch's loss sum and rows grow by the step's)."""
        loss = torch.zeros(())
        for i, batch in enumerate(micro):
            batch = batch.to(self.procs.device) if self.procs.use_cuda else batch
            final = i == len(micro) - 1
            # gradients of a non-final accumulation batch stay local
            with nullcontext() if final else self.sharing.local_gradients(self.wrapped):
                divisor = self.layout.loss_divisor(len(batch), self._data.world_size)
                loss = self.sharing.learn(
                    self.wrapped, self.head, batch, divisor, self.fit.precision
                )
            if self.sharing.counts_rows:
                self._loss_sum += loss * len(batch)
                self._seen += len(batch)
        optimizer, scheduler = self.fit.optimizer, self.fit.scheduler
        step.apply_gradients(
            self._parameters,
            optimizer,
            scheduler,
            self.cfg.grad_clip,
            self.sharing.clip,
            self.fit.precision,
        )
        return loss

    def _step_end(
        self,
        at: LoopPosition,
        loss: torch.Tensor,
        micro: list[TensorSet],
        waited: tuple[float, float],
        due: bool,
    ) -> StepEnd:
        data_wait_s, began = waited
        return StepEnd(
            at=at,
            loss=loss,
            rows=sum(len(batch) for batch in micro),
            step_s=time.perf_counter() - began,
            data_wait_s=data_wait_s,
            learning_rate=float(self.fit.scheduler.get_last_lr()[0]),
            checkpoint_due=due,
        )

    def _checkpoint_due(self, at: LoopPosition) -> bool:
        """A periodic checkpoint at ``at``: every ``train.checkpoint_every`` steps, mid-epoch
        (an epoch's end has its own)."""
        every = self.cfg.checkpoint_every
        return (
            bool(every) and at.step % every == 0 and at.epoch_batches < self.micro_batches[at.epoch]
        )

    def _seed_epoch(self) -> None:
        """Dropout noise depends only on (seed, epoch, rank); mid-epoch, the checkpoint's RNG
        states carry on instead, or on another number of processes (seed, epoch, step, rank)."""
        at = self.fit.position
        if at.epoch_batches == 0 or self.reseed:
            offset = 1_000 * at.epoch + self.procs.rank + 1_000_003 * (at.step * self.reseed)
            torch.manual_seed(self.cfg.seed + offset)
            self.reseed = False

    def _end_epoch(self, steps: int, elapsed: float) -> EpochRecord:
        """Validate the epoch and record it in the fit (its metrics over every rank); the
        fit's position moves to the next epoch."""
        cfg, procs, epoch = self.cfg, self.procs, self.fit.position.epoch
        validation = step.validation_sums(
            self.fit.model,
            self.head,
            self.table,
            self.pre,
            self.label,
            cfg.batch_size,
            procs.device,
            self.fit.precision,
            self._data.rank,
            self._data.world_size,
            forwards=self.validation_forwards,
        )
        learning_rate = float(self.fit.scheduler.get_last_lr()[0])
        metrics = _epoch_metrics(
            self.head,
            self._loss_sum,
            self._seen,
            self._carried,
            validation,
            elapsed,
            learning_rate,
            procs,
        )
        return self.fit.end_epoch(epoch, metrics, steps)

    def write_checkpoint(self, at: LoopPosition) -> str | None:
        """Checkpoint the training at ``at`` (every rank calls it): mid-epoch, with the epoch's
        training loss so far over every rank, so that a resumed epoch's loss covers it all."""
        if at.epoch_batches:
            self.fit.epoch_loss = _epoch_loss(self._carried, self._loss_sum, self._seen, self.procs)
        return self.checkpoints.write(self.fit, at, self.layout.world_size)

    def request_stop(self, reason: str) -> None:
        self.stopped_by = reason

    def _emit(self, event: str, *args: object) -> None:
        for callback in self.callbacks:
            getattr(callback, event)(self, *args)

    def _end(self, error: BaseException | None) -> None:
        """Every callback hears the end, the last registered first (as a stack of context
        managers unwinds); one that fails is logged, and the training's own error, if any,
        is the one that stands."""
        failed: BaseException | None = None
        for callback in reversed(self.callbacks):
            try:
                callback.on_train_end(self, error)
            except Exception as exc:
                log.exception("%s failed at the end of the training", type(callback).__name__)
                failed = failed or exc
        if error is None and failed is not None:
            raise failed


def _timed(
    steps: Iterator[list[TensorSet]],
) -> Iterator[tuple[list[TensorSet], tuple[float, float]]]:
    """Each step's micro-batches, with the seconds spent waiting for them and when the wait
    began (the step's start)."""
    while True:
        began = time.perf_counter()
        micro = next(steps, None)
        if micro is None:
            return
        yield micro, (time.perf_counter() - began, began)


def _epoch_metrics(
    head: Head,
    loss_sum: torch.Tensor,
    seen: int,
    carried: tuple[float, float],
    validation: torch.Tensor,
    elapsed: float,
    learning_rate: float,
    procs: Processes,
) -> dict[str, float]:
    """An epoch's metrics over every rank: this rank's training loss sum and rows and its
    ``validation_sums``, added up over the ranks, as losses, the task's validation metric
    (AUC, accuracy or RMSE), throughput, the learning rate, and on a GPU its memory peak and
    utilisation. A resumed epoch's training loss takes in the loss ``carried`` by its
    checkpoint; its throughput, the rows since the resume."""
    sums = torch.cat(
        [torch.tensor([loss_sum.item(), float(seen)], dtype=torch.float64), validation]
    )
    train_loss, rows, *summed = distributed.sum_over_ranks(sums, procs).tolist()
    metrics = {
        "train_loss": (train_loss + carried[0]) / max(rows + carried[1], 1.0),
        **head.validation_metrics(summed),
        "samples_per_s": rows / max(elapsed, 1e-9),
        "learning_rate": learning_rate,
    }
    if procs.use_cuda:
        metrics |= step.gpu_metrics(procs.device)
    return metrics


def _epoch_loss(
    carried: tuple[float, float], loss_sum: torch.Tensor, seen: int, procs: Processes
) -> tuple[float, float]:
    """The epoch's training loss sum and rows so far over every rank, for a checkpoint (every
    rank calls it)."""
    sums = torch.tensor([loss_sum.item(), float(seen)], dtype=torch.float64)
    total, rows = distributed.sum_over_ranks(sums, procs).tolist()
    return carried[0] + total, carried[1] + rows
