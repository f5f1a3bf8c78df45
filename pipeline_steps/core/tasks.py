"""What a model learns to predict, as the foundation reads it: the task a domain declares,
resolved through :mod:`pipeline_steps.tasks` (one module per task, a built-in name or the
import path of the user's own).

Each layer asks the task object for its part: the training step its head and loss, the
evaluation its metrics, baselines and gate, serving its output columns. This module keeps the
names the rest of the package has read since tasks were strings: ``TASKS``, ``task_spec``,
``HIGHER_IS_BETTER``, ``outputs`` and ``check_task``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from pipeline_steps import tasks as plugins
from pipeline_steps.tasks import BUILTIN_TASKS, TaskError, resolve

Task = str
"""A built-in task's name or the import path of a user's task."""

TASKS: tuple[str, ...] = tuple(BUILTIN_TASKS)
"""The built-in tasks' names."""


class _Directions(Mapping[str, bool]):
    """Every built-in metric's direction (True: higher is better), read from the tasks."""

    def _table(self) -> dict[str, bool]:
        table: dict[str, bool] = {}
        for name in BUILTIN_TASKS:
            for metric in resolve(name).metric_list:
                table.setdefault(metric.name, metric.higher_is_better)
        return table

    def __getitem__(self, metric: str) -> bool:
        return self._table()[metric]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


HIGHER_IS_BETTER: Mapping[str, bool] = _Directions()
"""The direction of each metric with an interval (a metric's name means one thing in every
task that has it)."""


def task_spec(task: str) -> plugins.Task:
    """The task ``task`` names; ``ValueError`` naming the known tasks otherwise."""
    return resolve(task)


def outputs(task: str, classes: Sequence[str]) -> int:
    """Values the model gives per row."""
    return resolve(task).outputs(classes)


def check_task(task: str, classes: Sequence[str], where: str) -> None:
    """``ValueError`` naming ``where`` when the task is unknown or its classes do not fit it."""
    try:
        spec = resolve(task)
    except TaskError as exc:
        raise TaskError(f"{where}: {exc}") from None
    spec.check_classes(classes, where)
