"""The Airflow-facing layer: the runner factory and the drift asset the DAG files call. The only
package that imports Airflow; the steps never do.

Imports the steps' registry and the layers below it (foundation, domain, libraries); only the
DAG files and the commands import it. Its names are imported on first use, so that a light
module of it (``launch``, ``params``, ``pools``: what ``trainyard submit`` and ``jobs`` need)
loads without Airflow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline_steps.orchestration.assets import (
        drift_asset,
        drift_event_task,
        training_schedule,
    )
    from pipeline_steps.orchestration.runners import step_task

_WHERE = {
    "drift_asset": "assets",
    "drift_event_task": "assets",
    "training_schedule": "assets",
    "step_task": "runners",
}
__all__ = ["drift_asset", "drift_event_task", "step_task", "training_schedule"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
