"""Holdout metrics as every step computes them: each task's are its own
(:mod:`pipeline_steps.tasks`); this module reads them through the task and keeps what is common
(the bounds of an interval by the metric's direction, MLflow's names). The binary and multiclass
metric functions are re-exported under the names the package has used."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict

from numpy.typing import ArrayLike

from pipeline_steps.core.manifests import HoldoutMetrics, Interval
from pipeline_steps.core.tasks import HIGHER_IS_BETTER, task_spec
from pipeline_steps.tasks.base import sklearn_metrics
from pipeline_steps.tasks.binary import (
    CALIBRATION_BINS,
    accuracy,
    binned_auc,
    brier,
    calibration_bins,
    classification_report,
    expected_calibration_error,
    log_loss,
    roc_auc,
)
from pipeline_steps.tasks.multiclass import (
    LOG_LOSS_EPS,
    class_probabilities,
    class_recall,
    macro_f1,
    multiclass_accuracy,
    multiclass_log_loss,
    predicted_classes,
)
from pipeline_steps.tasks.regression import regression_errors

__all__ = [  # the tasks' metrics under the names the package has used
    "CALIBRATION_BINS",
    "HIGHER_IS_BETTER",
    "LOG_LOSS_EPS",
    "accuracy",
    "binned_auc",
    "brier",
    "calibration_bins",
    "class_probabilities",
    "class_recall",
    "classification_report",
    "expected_calibration_error",
    "log_loss",
    "macro_f1",
    "multiclass_accuracy",
    "multiclass_log_loss",
    "predicted_classes",
    "regression_errors",
    "roc_auc",
    "sklearn_metrics",
]


def worst(interval: Interval, metric: str) -> float:
    """The bound of a difference (first model minus second) least favourable to the first."""
    return interval.low if HIGHER_IS_BETTER[metric] else interval.high


def best(interval: Interval, metric: str) -> float:
    """The bound of a difference (first model minus second) most favourable to the first."""
    return interval.high if HIGHER_IS_BETTER[metric] else interval.low


def task_report(
    task: str, labels: ArrayLike, predictions: ArrayLike, min_class_rows: int = 0
) -> dict[str, float]:
    """The task's metrics with intervals (``Task.metrics``), rounded for reports; a metric
    averaged over classes over those with at least ``min_class_rows`` rows (``Task.report``)."""
    return task_spec(task).report(labels, predictions, min_class_rows)


def holdout_metrics(
    labels: ArrayLike,
    probabilities: ArrayLike,
    task: str = "binary",
    classes: Sequence[str] = (),
    min_class_rows: int = 0,
) -> HoldoutMetrics:
    """One model's metrics on the holdout as the manifests record them (``Task.holdout_metrics``:
    for ``binary`` ``classification_report`` of its probabilities, for a task with classes each
    class's recall beside its metrics, for ``regression`` the holdout's mean label); a metric
    averaged over classes over those with at least ``min_class_rows`` rows."""
    return task_spec(task).holdout_metrics(labels, probabilities, classes, min_class_rows)


def unjudged_classes(
    labels: ArrayLike, classes: Sequence[str], min_class_rows: int
) -> dict[str, int]:
    """The classes with fewer than ``min_class_rows`` holdout rows, each with its rows."""
    import numpy as np

    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=len(classes))
    return {str(c): int(n) for c, n in zip(classes, counts, strict=False) if n < min_class_rows}


def mlflow_metrics(prefix: str, metrics: HoldoutMetrics) -> dict[str, float]:
    """The metrics as MLflow metrics under ``prefix``, each class's recall as
    ``<prefix>recall_<class>``."""
    values = {
        f"{prefix}{k}": float(v)
        for k, v in asdict(metrics).items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
    for name, recall in metrics.class_recall.items():
        values[f"{prefix}recall_{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}"] = recall
    return values
