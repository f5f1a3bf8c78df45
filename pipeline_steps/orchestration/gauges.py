"""A training task's gauges on the Pushgateway, removed when the task ends however it ends, so
that a stall or silence alert on them clears even when no retry follows (a retry pushes a new
group). Every runner of the train step (the local subprocess, the pod, the multi-node Job) runs
its work inside :func:`removed_at_end`.

Kept light: DAG parsing imports this (settings only).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pipeline_steps.core.settings import Settings
from pipeline_steps.core.step_registry import Step


@dataclass(frozen=True)
class TrainingGauges:
    """The Pushgateway group of a training task's run (``monitoring.pushgateway_url``, the
    domain)."""

    url: str
    domain: str

    def forget(self, context: Any) -> None:
        from pipeline_steps.core.pushgateway import forget_training

        run_id = context.get("run_id") or getattr(context.get("dag_run"), "run_id", None)
        if run_id:
            forget_training(self.url, self.domain, str(run_id))


def training_gauges(settings: Settings, step: Step) -> TrainingGauges | None:
    """The gauges a task of ``step`` leaves on the Pushgateway: a training's, when the
    settings name a Pushgateway."""
    url = settings.monitoring.pushgateway_url
    return TrainingGauges(url, settings.domain.name) if url and step.distributed else None


@contextmanager
def removed_at_end(gauges: TrainingGauges | None, context: Any) -> Iterator[None]:
    """Run the block, then remove the run's group of ``gauges`` (none: nothing to remove),
    whether the block returned or raised."""
    try:
        yield
    finally:
        if gauges is not None:
            gauges.forget(context)
