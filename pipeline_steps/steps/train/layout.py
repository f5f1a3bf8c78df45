"""The data layout of a training: which rows make each optimizer step, whatever ranks compute it.

A training's epochs are cut by its ``Layout``: the world size it started with, the batch per
process and the accumulation. Optimizer step ``s`` of an epoch is, for each layout rank ``r``,
the micro-batches ``[s·A, (s+1)·A)`` of that rank's stream (``data.epoch_batches``): a global
batch of ``G = N·B·A`` rows.

``step_batches`` yields this process's share of each step:

- on the layout's own world size, rank ``r`` computes layout rank ``r``'s ``A`` micro-batches,
  exactly as the stream gives them;
- on ``M ≠ N`` processes (a checkpoint resumed on fewer or more workers), the ``G`` rows of the
  step, taken in layout-rank order, are cut into ``M`` consecutive shares (sizes differing by at
  most one row); process ``m`` replays the streams of the layout ranks its share falls in and
  splits its share into the same number of micro-batches as every other process.

Every step consumes the same rows on any world size, none dropped or repeated, and
``loss_divisor`` weighs each micro-batch so that the all-reduced gradient is the mean over the
step's ``G`` rows: the optimisation is the same up to floating-point summation order. Dropout
noise differs (a process's generator is per rank) and each replaying process reads and converts
the row groups of up to ``⌈N/M⌉ + 1`` layout ranks instead of one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.settings import TrainSettings
from pipeline_steps.steps.train.data import Preprocessor, TensorSet, TrainingTable, epoch_batches
from pipeline_steps.steps.train.distributed import Processes


@dataclass(frozen=True, slots=True)
class Layout:
    """How the epochs are cut: ``world_size`` layout ranks, ``batch_size`` rows per micro-batch,
    ``accumulation`` micro-batches per optimizer step."""

    world_size: int
    batch_size: int
    accumulation: int

    @property
    def global_batch(self) -> int:
        """Rows per optimizer step, over every rank."""
        return self.world_size * self.batch_size * self.accumulation

    @property
    def step_rows(self) -> int:
        """Rows per optimizer step of one layout rank."""
        return self.batch_size * self.accumulation

    def share(self, rank: int, world_size: int) -> tuple[int, int]:
        """Process ``rank``'s rows ``[start, stop)`` of a step's global batch on ``world_size``
        processes."""
        g = self.global_batch
        return rank * g // world_size, (rank + 1) * g // world_size

    def micro_batches(self, world_size: int) -> int:
        """Micro-batches per step of every process on ``world_size`` processes: none holds more
        than ``batch_size`` rows, and all processes run the same number (DDP's collectives)."""
        if world_size == self.world_size:
            return self.accumulation
        return math.ceil(math.ceil(self.global_batch / world_size) / self.batch_size)

    def check(self, world_size: int) -> None:
        """``StepError`` when ``world_size`` processes cannot share a step's rows."""
        if self.global_batch // world_size < self.micro_batches(world_size):
            raise StepError(
                f"{world_size} training processes cannot share a global batch of "
                f"{self.global_batch} rows (train.batch_size x grad_accumulation x "
                f"{self.world_size} processes the training started with)"
            )

    def loss_divisor(self, rows: int, world_size: int) -> float:
        """What a micro-batch's mean loss of ``rows`` rows is divided by before backward, so the
        gradient averaged over ``world_size`` processes is the mean over the global batch."""
        return self.global_batch / (world_size * rows)


def epoch_steps(
    table: TrainingTable,
    pre: Preprocessor,
    label: str,
    cfg: TrainSettings,
    layout: Layout,
    processes: Processes,
    epoch: int,
    skip: int = 0,
) -> Iterator[list[TensorSet]]:
    """This process's micro-batches of each optimizer step of ``epoch``, from layout batch
    ``skip`` on: the streams (``epoch_batches``) of the layout ranks it computes, cut by
    ``step_batches``."""
    streams = {
        r: epoch_batches(
            table,
            pre,
            label,
            batch_size=cfg.batch_size,
            epoch=epoch,
            rank=r,
            world_size=layout.world_size,
            shuffle_buffer=cfg.shuffle_buffer,
            skip=skip,
            min_steps=cfg.min_steps_per_epoch,
            prefetch_buffers=cfg.prefetch,
            workers=cfg.data_workers,
            pin_memory=processes.use_cuda,
        )
        for r in needed(layout, processes.rank, processes.world_size)
    }
    return step_batches(streams, layout, processes.rank, processes.world_size)


def step_batches(
    streams: dict[int, Iterator[TensorSet]], layout: Layout, rank: int, world_size: int
) -> Iterator[list[TensorSet]]:
    """This process's micro-batches of each optimizer step, from ``streams``: layout rank →
    its micro-batch stream (from the same step on), for the layout ranks ``needed``."""
    per_step = layout.accumulation
    if world_size == layout.world_size:
        stream = streams[rank]
        while True:
            micro = [b for _, b in zip(range(per_step), stream, strict=False)]
            if len(micro) < per_step:
                return
            yield micro
    start, stop = layout.share(rank, world_size)
    parts = layout.micro_batches(world_size)
    while True:
        pieces: list[TensorSet] = []
        for r in needed(layout, rank, world_size):
            own = [b for _, b in zip(range(per_step), streams[r], strict=False)]
            if len(own) < per_step:
                return
            rows = TensorSet.concat(own)
            offset = r * layout.step_rows  # where layout rank r's rows sit in the step
            lo, hi = max(start - offset, 0), min(stop - offset, layout.step_rows)
            pieces.append(rows.slice(lo, hi))
        share = TensorSet.concat(pieces)
        yield [share.slice(a, b) for a, b in _splits(len(share), parts)]


def needed(layout: Layout, rank: int, world_size: int) -> list[int]:
    """The layout ranks whose rows fall in process ``rank``'s share of a step."""
    if world_size == layout.world_size:
        return [rank]
    start, stop = layout.share(rank, world_size)
    first = start // layout.step_rows
    last = (stop - 1) // layout.step_rows
    return list(range(first, last + 1))


def _splits(rows: int, parts: int) -> list[tuple[int, int]]:
    """``rows`` cut into ``parts`` consecutive ranges whose sizes differ by at most one."""
    bounds = [i * rows // parts for i in range(parts + 1)]
    return list(pairwise(bounds))
