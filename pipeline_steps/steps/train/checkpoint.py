"""Checkpoints: written atomically (temp + rename), the last few kept, the newest valid loaded.

A checkpoint is named by the optimizer step it was taken after (``step-00000123.pt``) and holds
one ``TrainingState`` (``state.py``): model, optimizer and schedule states, the position in the
epoch, early-stopping state with the best epoch's weights, every rank's RNG states and the
config hash. Checkpoints of an earlier layout are ignored: training starts fresh.

``Checkpoints`` are one run's: their folder, how many are kept, the config hash they are valid
for and the training processes; the loop finds the newest (``latest``), resumes its ``Fit``
from it (``restore``, on any number of processes) and writes it (every rank's RNG states
gathered, rank 0 writing) with one call each.
"""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass

import torch

from pipeline_steps.core.lake import Lake
from pipeline_steps.core.manifests import LoopPosition
from pipeline_steps.steps.train import distributed
from pipeline_steps.steps.train.distributed import Processes
from pipeline_steps.steps.train.state import Fit, LayoutError, TrainingState

log = logging.getLogger(__name__)
_NAME = re.compile(r"step-(\d+)\.pt$")


def save(lake: Lake, folder: str, state: TrainingState, keep: int = 3) -> str:
    """Write ``state`` as ``<folder>/step-NNNNNNNN.pt`` (its optimizer step) atomically and
    prune all but the newest ``keep``; return the path written."""
    buffer = io.BytesIO()
    torch.save(state.to_checkpoint(), buffer)
    target = lake.write_bytes(buffer.getvalue(), folder, f"step-{state.position.step:08d}.pt")
    for stale in paths(lake, folder)[:-keep]:
        lake.fs.rm(stale)
    return target


def paths(lake: Lake, folder: str) -> list[str]:
    """The checkpoints in ``folder``, oldest step first."""
    if not lake.exists(folder):
        return []
    found = [p for p in lake.fs.ls(lake.path(folder), detail=False) if _NAME.search(p)]
    return sorted(found, key=lambda p: int(_NAME.search(p).group(1)))  # type: ignore[union-attr]


def read(lake: Lake, path: str) -> TrainingState:
    """The training state in the checkpoint at ``path``; raises ``LayoutError`` for a
    checkpoint of another layout and whatever ``torch.load`` raises for a torn file."""
    with lake.fs.open(path, "rb") as fh:
        # on the CPU: a state written on GPUs loads on any rank, or on a machine without one;
        # load_state_dict moves each tensor to its parameter's device
        content = torch.load(io.BytesIO(fh.read()), map_location="cpu", weights_only=False)
    return TrainingState.from_checkpoint(content)


def load_latest(lake: Lake, folder: str, config_hash: str) -> TrainingState | None:
    """The newest checkpoint that loads and matches ``config_hash``; None when there is none.

    A corrupt checkpoint falls back to the previous one; checkpoints of an earlier layout or
    other settings are skipped with a message, so training starts fresh rather than failing.
    """
    found = paths(lake, folder)
    for path in reversed(found):
        try:
            state = read(lake, path)
        except LayoutError as exc:
            log.warning("checkpoint %s is of another layout (%s); ignoring it", path, exc)
            continue
        except Exception as exc:  # a torn or corrupt file: fall back to the previous one
            log.warning("checkpoint %s is unreadable (%s); trying an older one", path, exc)
            continue
        if state.config_hash != config_hash:
            log.warning("checkpoint %s was written with other settings; ignoring it", path)
            continue
        at = state.position
        log.info("resuming from %s (epoch %d, batch %d)", path, at.epoch, at.epoch_batches)
        return state
    if found:
        log.warning("no checkpoint in %s can be resumed from; training starts fresh", folder)
    return None


@dataclass(frozen=True, slots=True)
class Checkpoints:
    """One run's checkpoints: where, how many kept, the config hash they are valid for, and the
    training processes that save them."""

    lake: Lake
    folder: str
    config_hash: str
    keep: int
    processes: Processes

    def latest(self) -> TrainingState | None:
        """The newest checkpoint of these settings that loads (``load_latest``); None when
        there is none."""
        return load_latest(self.lake, self.folder, self.config_hash)

    def restore(self, fit: Fit, state: TrainingState) -> LoopPosition:
        """Resume ``fit`` from ``state``, and this rank's RNG states when ``state`` was written
        by as many processes as train now; returns its position. On another number of
        processes the RNG states are not this rank's: the loop seeds them afresh."""
        fit.resume(state)
        if state.world_size == self.processes.world_size:
            distributed.set_rng_state(state.rng[self.processes.rank])
        else:
            log.info(
                "resuming on %d processes a checkpoint of %d: the epochs keep their rows and "
                "global batch (layout of %d), dropout draws start afresh",
                self.processes.world_size,
                state.world_size,
                state.layout_world_size,
            )
        return fit.position

    def write(self, fit: Fit, at: LoopPosition, layout_world_size: int) -> str | None:
        """Checkpoint ``fit`` at ``at`` (``save``); returns the path on rank 0. Every rank calls
        it: each rank's RNG states are gathered, for an exact resume, and a sharded model's
        states; rank 0 writes."""
        rng = distributed.gather(distributed.get_rng_state(), self.processes)
        state = fit.state(at, rng, self.config_hash, layout_world_size)
        if not self.processes.master:
            return None
        return save(self.lake, self.folder, state, keep=self.keep)
