"""The training state: what a checkpoint holds and what an exact resume restores.

``TrainingState`` is the loop's position, the early-stopping state, the epoch history, the
model, optimizer and schedule states (and the best epoch's weights), every rank's RNG states,
the processes that wrote it and the data layout's world size, and what the state is valid for
(the config hash). ``checkpoint`` writes it
as a plain dict (``to_checkpoint``) marked with ``LAYOUT``, and reads it back
(``from_checkpoint``), so a file of another layout is recognised instead of half-loaded.

``Fit`` is the same training while it runs: the live model, optimizer and schedule and how far
the loop got; ``state`` takes a ``TrainingState`` of it, ``resume`` restores one into it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from pipeline_steps.core.manifests import LoopPosition
from pipeline_steps.steps.train.distributed import ONE_PROCESS, RngState
from pipeline_steps.steps.train.precision import FP32, Precision
from pipeline_steps.steps.train.strategy import DataParallel, Strategy

LAYOUT = 2
"""The checkpoint layout this version writes and reads. Checkpoints without it (written before
the training state was typed: a flat dict with a loss scaler) are not resumed from."""

EpochRecord = dict[str, float]
"""One finished epoch: ``epoch`` and the epoch's metrics (losses, AUC, throughput, ...)."""


class LayoutError(ValueError):
    """A checkpoint of another layout than ``LAYOUT``."""


@dataclass(kw_only=True, slots=True)
class EarlyStopping:
    """The lowest validation loss so far, its epoch, the epochs since, and whether they ran out."""

    best_val_loss: float = math.inf
    best_epoch: int = -1
    bad_epochs: int = 0
    """Epochs in a row without an improvement of the best validation loss."""
    stopped_early: bool = False

    def observe(self, epoch: int, val_loss: float, patience: int) -> bool:
        """Take a finished epoch's validation loss; True when it improved on the best by more
        than 1e-6 (the caller keeps that epoch's weights). After ``patience`` epochs in a row
        without improvement (0: never), ``stopped_early`` is set."""
        if val_loss < self.best_val_loss - 1e-6:
            self.best_val_loss, self.best_epoch, self.bad_epochs = val_loss, epoch, 0
            return True
        self.bad_epochs += 1
        self.stopped_early = bool(patience) and self.bad_epochs >= patience
        return False


@dataclass(kw_only=True, slots=True)
class TrainingState:
    """Everything an exact resume needs, as rank 0 saves it after an optimizer step."""

    position: LoopPosition
    """Where the loop stands: epoch, batches of it consumed, optimizer steps taken."""
    stopping: EarlyStopping = field(default_factory=EarlyStopping)
    history: list[EpochRecord] = field(default_factory=list)
    """The finished epochs, in order."""
    model: dict[str, torch.Tensor]
    best_model: dict[str, torch.Tensor] | None = None
    """The weights of the epoch with the lowest validation loss so far."""
    epoch_loss: tuple[float, float] = (0.0, 0.0)
    """The current epoch's training loss sum and rows up to ``position``, over every rank: a
    resumed epoch's ``train_loss`` covers the whole epoch."""
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    scaler: dict[str, Any] = field(default_factory=dict)
    """The fp16 loss scaler's state (its scale and growth tracker); empty in other precisions."""
    rng: list[RngState]
    """Each rank's RNG states, by rank."""
    world_size: int
    """The processes that wrote the state (one RNG state each)."""
    layout_world_size: int
    """The world size the epochs are dealt by (``layout.Layout``): the one the training started
    with, kept when it resumes on another number of processes."""
    config_hash: str
    """The settings and training set the state was trained with."""

    def to_checkpoint(self) -> dict[str, Any]:
        """The checkpoint's content: plain dicts, lists and tensors, marked with ``LAYOUT``."""
        return {
            "layout": LAYOUT,
            "position": dataclasses.asdict(self.position),
            "stopping": dataclasses.asdict(self.stopping),
            "history": self.history,
            "model": self.model,
            "best_model": self.best_model,
            "epoch_loss": list(self.epoch_loss),
            "optimizer": self.optimizer,
            "scheduler": self.scheduler,
            "scaler": self.scaler,
            "rng": self.rng,
            "world_size": self.world_size,
            "layout_world_size": self.layout_world_size,
            "config_hash": self.config_hash,
        }

    @classmethod
    def from_checkpoint(cls, content: Any) -> TrainingState:
        """The state ``to_checkpoint`` wrote; ``LayoutError`` for any other content."""
        layout = content.get("layout") if isinstance(content, dict) else None
        if layout != LAYOUT:
            raise LayoutError(f"checkpoint layout {layout!r}, this version reads {LAYOUT}")
        return cls(
            position=LoopPosition(**content["position"]),
            stopping=EarlyStopping(**content["stopping"]),
            history=content["history"],
            model=content["model"],
            best_model=content["best_model"],
            epoch_loss=tuple(content.get("epoch_loss", (0.0, 0.0))),
            optimizer=content["optimizer"],
            scheduler=content["scheduler"],
            scaler=content.get("scaler", {}),
            rng=content["rng"],
            world_size=content["world_size"],
            layout_world_size=content.get("layout_world_size", content["world_size"]),
            config_hash=content["config_hash"],
        )


@dataclass(kw_only=True, slots=True)
class Fit:
    """The training in memory: model, optimizer and schedule, and how far the loop got."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    position: LoopPosition = field(default_factory=LoopPosition)
    stopping: EarlyStopping = field(default_factory=EarlyStopping)
    history: list[EpochRecord] = field(default_factory=list)
    """The finished epochs, in order."""
    best_weights: dict[str, torch.Tensor] | None = None
    """The weights of the epoch with the lowest validation loss so far, on the CPU (rank 0's
    under ``fsdp``: the others hold none)."""
    epoch_loss: tuple[float, float] = (0.0, 0.0)
    """The current epoch's training loss sum and rows over every rank, as of the last
    checkpoint (``TrainingState.epoch_loss``)."""
    strategy: Strategy = field(default_factory=lambda: DataParallel(ONE_PROCESS))
    """How the processes share the model: its full states are taken and loaded through it."""
    precision: Precision = field(default_factory=lambda: FP32)
    """How the steps compute (``train.precision``): its loss scaler's state is checkpointed."""

    def state(
        self, at: LoopPosition, rng: list[RngState], config_hash: str, layout_world_size: int
    ) -> TrainingState:
        """The training state at ``at`` (after an optimizer step), with every rank's RNG
        states (``rng``, by rank), the config hash it is valid for and the layout's world
        size. Every process calls it (a sharded model is gathered); rank 0's is whole."""
        return TrainingState(
            position=at,
            stopping=self.stopping,
            history=self.history,
            model=self.strategy.model_state(self.model),
            best_model=self.best_weights,
            epoch_loss=self.epoch_loss,
            optimizer=self.strategy.optimizer_state(self.model, self.optimizer),
            scheduler=self.scheduler.state_dict(),
            scaler=self.precision.state_dict(),
            rng=rng,
            world_size=len(rng),
            layout_world_size=layout_world_size,
            config_hash=config_hash,
        )

    def resume(self, state: TrainingState) -> None:
        """Load ``state``'s model, optimizer and schedule and continue from its position."""
        self.strategy.load(self.model, self.optimizer, state.model, state.optimizer)
        self.scheduler.load_state_dict(state.scheduler)
        self.precision.load_state_dict(state.scaler)
        self.position, self.stopping, self.history = state.position, state.stopping, state.history
        self.best_weights = state.best_model
        self.epoch_loss = state.epoch_loss

    def end_epoch(self, epoch: int, metrics: dict[str, float], step: int) -> EpochRecord:
        """Record the finished ``epoch`` (``step`` optimizer steps taken in all): its metrics
        join the history, and the loop moves to the next epoch's start; returns the record."""
        record: EpochRecord = {"epoch": epoch, **metrics}
        self.history.append(record)
        self.position = LoopPosition(epoch=epoch + 1, epoch_batches=0, step=step)
        self.epoch_loss = (0.0, 0.0)
        return record

    def keep_best(self) -> None:
        """Keep the model's current weights, on the CPU, as the best epoch's (every process
        calls it: a sharded model is gathered)."""
        weights = self.strategy.model_state(self.model)
        self.best_weights = {k: v.detach().cpu().clone() for k, v in weights.items()}


def weights_sha256(model: torch.nn.Module) -> str:
    """sha256 of the model's weights: every state-dict entry's name, dtype, shape and bytes, in
    order, on the CPU. Equal hashes mean bit-identical weights."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        value = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}:{value.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(value.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
