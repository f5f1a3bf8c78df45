"""Tasks are plugins: what a model learns to predict, one module per task.

``domain.task`` names a built-in task (``binary``, ``multiclass``, ``regression``,
``ordinal``) or the import path ``package.module:name`` of a
:class:`~pipeline_steps.tasks.base.Task` instance in the user's own code, as ``train.model``
names a model. Each task declares its metrics with their directions, the gate's default
metrics, the trivial model's and the slices',
its report plots and baselines, and implements its head (loss, validation, predictions), its
metrics and their bootstrap replicates; no other module compares task names.

The package sits in the foundation layer beside ``core/``: the settings and the domain contract
read a task's declarations while DAG files parse, so a task module imports numpy at most at
import time, torch and scikit-learn inside the methods that compute.
"""

from __future__ import annotations

import importlib

from pipeline_steps.tasks.base import Metric, Task, TaskError

__all__ = ["BUILTIN_TASKS", "Metric", "Task", "TaskError", "higher_is_better", "resolve"]

BUILTIN_TASKS: dict[str, str] = {
    "binary": "pipeline_steps.tasks.binary:TASK",
    "multiclass": "pipeline_steps.tasks.multiclass:TASK",
    "regression": "pipeline_steps.tasks.regression:TASK",
    "ordinal": "pipeline_steps.tasks.ordinal:TASK",
}
"""Registered names → the import path of their task."""

_resolved: dict[str, Task] = {}


def resolve(reference: str) -> Task:
    """The task ``reference`` names: a built-in name or ``package.module:name``. ``TaskError``
    says what is wrong: an unknown name, a module that does not import, or an object that is
    not a :class:`Task`."""
    if reference in _resolved:
        return _resolved[reference]
    if reference in BUILTIN_TASKS:
        path = BUILTIN_TASKS[reference]
    elif ":" in reference:
        path = reference
    else:
        raise TaskError(
            f"task {reference!r} is unknown; known: {', '.join(BUILTIN_TASKS)}, or the import "
            "path package.module:name of your own task"
        )
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TaskError(
            f"task {reference!r}: module {module_name} cannot be imported ({exc}); is its "
            "folder on PYTHONPATH or its package installed?"
        ) from exc
    task = getattr(module, attribute, None)
    if not isinstance(task, Task):
        raise TaskError(
            f"task {reference!r} is a {type(task).__name__}, not an instance of "
            "pipeline_steps.tasks.base.Task"
        )
    _resolved[reference] = task
    return task


def higher_is_better(metric: str, task: str | None = None) -> bool:
    """The direction of ``metric`` (of ``task``, else of the built-in task that declares it);
    ``TaskError`` when none does."""
    tasks = [resolve(task)] if task else [resolve(name) for name in BUILTIN_TASKS]
    for candidate in tasks:
        for declared in candidate.metric_list:
            if declared.name == metric:
                return declared.higher_is_better
    raise TaskError(f"no task declares the metric {metric!r}")
