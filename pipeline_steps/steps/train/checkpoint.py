"""Checkpoints: written atomically (temp + rename), the last few kept, the newest valid loaded.

A checkpoint is named by the optimizer step it was taken after (``step-00000123.pt``) and holds
what an exact resume needs: model, optimizer, scheduler and scaler states, epoch, the batches of
that epoch already consumed, early-stopping state, every rank's RNG states and the config hash.
"""

from __future__ import annotations

import io
import logging
import re
from typing import Any

import torch

from pipeline_steps.lake import Lake

log = logging.getLogger(__name__)
_NAME = re.compile(r"step-(\d+)\.pt$")


def save(lake: Lake, folder: str, step: int, state: dict[str, Any], keep: int = 3) -> str:
    """Write ``<folder>/step-NNNNNNNN.pt`` atomically and prune all but the newest ``keep``."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    target = lake.write_bytes(buffer.getvalue(), folder, f"step-{step:08d}.pt")
    for stale in _checkpoints(lake, folder)[:-keep]:
        lake.fs.rm(stale)
    return target


def _checkpoints(lake: Lake, folder: str) -> list[str]:
    if not lake.exists(folder):
        return []
    found = [p for p in lake.fs.ls(lake.path(folder), detail=False) if _NAME.search(p)]
    return sorted(found, key=lambda p: int(_NAME.search(p).group(1)))  # type: ignore[union-attr]


def load_latest(lake: Lake, folder: str, config_hash: str) -> dict[str, Any] | None:
    """The newest checkpoint that loads and matches ``config_hash``; corrupt ones are skipped."""
    for path in reversed(_checkpoints(lake, folder)):
        try:
            with lake.fs.open(path, "rb") as fh:
                # on the CPU: a state written on GPUs loads on any rank, or on a machine
                # without one; load_state_dict moves each tensor to its parameter's device
                state: dict[str, Any] = torch.load(
                    io.BytesIO(fh.read()), map_location="cpu", weights_only=False
                )
        except Exception as exc:  # a torn or corrupt file: fall back to the previous one
            log.warning("checkpoint %s is unreadable (%s); trying an older one", path, exc)
            continue
        if state.get("config_hash") != config_hash:
            log.warning("checkpoint %s was written with other settings; ignoring it", path)
            continue
        log.info(
            "resuming from %s (epoch %d, batch %d)", path, state["epoch"], state["epoch_batches"]
        )
        return state
    return None
