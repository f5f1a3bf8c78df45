"""The strategy ``train.strategy`` names (:mod:`.strategy`: ``ddp``, ``fsdp``; :mod:`.pipeline`:
``pipeline``), with its settings."""

from __future__ import annotations

from pipeline_steps.core.settings import TrainSettings
from pipeline_steps.steps.train.distributed import Processes
from pipeline_steps.steps.train.pipeline import Pipelined
from pipeline_steps.steps.train.strategy import DataParallel, FullySharded, Strategy


def strategy(cfg: TrainSettings, processes: Processes) -> Strategy:
    """How the training's ``processes`` share it, as ``cfg.strategy`` says."""
    if cfg.strategy == "pipeline":
        return Pipelined(
            processes, cfg.pipeline_stages, cfg.pipeline_microbatches, cfg.pipeline_schedule
        )
    return FullySharded(processes) if cfg.strategy == "fsdp" else DataParallel(processes)
