"""What a model learns to predict: the three tasks a domain may declare.

- ``binary``: the label is 0/1; the model gives one logit per row, the registered model the
  probability of 1; metrics AUC, log loss, Brier score, accuracy, calibration error.
- ``multiclass``: the label is a class index 0..K-1 into the domain's ``classes``; the model
  gives K logits per row, the registered model a probability per class; metrics log loss,
  accuracy, macro-F1 and each class's recall.
- ``regression``: the label is a real number; the model gives one value per row (trained on the
  standardised label, returned in the label's units); metrics RMSE, MAE and R².

Each layer reads the task here and does its own part: the training step its head and loss, the
evaluation its metrics, baselines and gate, serving its output. This module only names them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Task = Literal["binary", "multiclass", "regression"]
TASKS: tuple[Task, ...] = ("binary", "multiclass", "regression")


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskSpec:
    """What the pipeline needs to know about a task, independent of any library."""

    task: Task
    metrics: tuple[str, ...]
    """Holdout metrics with paired-bootstrap intervals, in report order."""
    gate_metrics: tuple[str, ...]
    """The gate's primary metrics when ``gate.primary_metrics`` is left empty."""
    trivial_metrics: tuple[str, ...]
    """Metrics on which the challenger must beat the trivial model (with confidence)."""
    slice_metric: str
    """The metric compared per slice."""


SPECS: dict[str, TaskSpec] = {
    "binary": TaskSpec(
        task="binary",
        metrics=("auc", "log_loss", "brier", "accuracy", "ece"),
        gate_metrics=("auc", "log_loss"),
        trivial_metrics=("auc", "log_loss"),
        slice_metric="auc",
    ),
    "multiclass": TaskSpec(
        task="multiclass",
        metrics=("log_loss", "accuracy", "macro_f1"),
        gate_metrics=("log_loss", "macro_f1"),
        trivial_metrics=("log_loss",),
        slice_metric="accuracy",
    ),
    "regression": TaskSpec(
        task="regression",
        metrics=("rmse", "mae", "r2"),
        gate_metrics=("rmse", "mae"),
        trivial_metrics=("rmse",),
        slice_metric="rmse",
    ),
}

HIGHER_IS_BETTER: dict[str, bool] = {
    "auc": True,
    "accuracy": True,
    "macro_f1": True,
    "r2": True,
    "log_loss": False,
    "brier": False,
    "ece": False,
    "rmse": False,
    "mae": False,
}
"""The direction of each metric with an interval."""


def task_spec(task: str) -> TaskSpec:
    """The spec of ``task``; ``ValueError`` naming the known tasks otherwise."""
    if task not in SPECS:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
    return SPECS[task]


def outputs(task: str, classes: Sequence[str]) -> int:
    """Values the model gives per row: one, or one logit per class for ``multiclass``."""
    return len(classes) if task == "multiclass" else 1


def check_task(task: str, classes: Sequence[str], where: str) -> None:
    """``ValueError`` naming ``where`` when the task is unknown or its classes do not fit it
    (``multiclass`` needs at least three distinct class names; the others none)."""
    if task not in SPECS:
        raise ValueError(f"{where}: task {task!r} is unknown; known: {', '.join(TASKS)}")
    if task == "multiclass":
        if len(classes) < 3 or len(set(classes)) != len(classes):
            raise ValueError(
                f"{where}: a multiclass task needs at least three distinct classes, "
                f"got {list(classes)} (two classes are a binary task)"
            )
    elif classes:
        raise ValueError(f"{where}: classes are only for a multiclass task, not {task}")
