"""Metrics per slice of the holdout (a value of a column: a carrier, an origin airport, a band
of departure hours), for the challenger and the champion.

Each slice records both models' value of the task's slice metric (``TaskSpec.slice_metric``:
AUC for ``binary``, accuracy for ``multiclass``, RMSE for ``regression``) and the challenger
minus the champion on it with its paired-bootstrap interval (and on log loss for ``binary``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline_steps.core.manifests import SliceResult, SliceScores
from pipeline_steps.core.tasks import task_spec
from pipeline_steps.evaluation.bootstrap import paired_differences
from pipeline_steps.evaluation.metrics import (
    log_loss,
    multiclass_accuracy,
    multiclass_log_loss,
    regression_errors,
    roc_auc,
)

SLICE_METRICS = ("auc", "log_loss")
"""``binary``: the metrics with intervals per slice; the other tasks' is their slice metric."""


def _scores(labels: np.ndarray, predictions: np.ndarray, task: str) -> SliceScores:
    """One model's metrics on a slice's rows: its task's slice metric (and log loss)."""
    if task == "multiclass":
        return SliceScores(
            auc=float("nan"),
            log_loss=round(multiclass_log_loss(labels, predictions), 6),
            accuracy=round(multiclass_accuracy(labels, predictions), 6),
        )
    if task == "regression":
        rmse = regression_errors(labels, predictions)["rmse"]
        return SliceScores(auc=float("nan"), log_loss=float("nan"), rmse=round(rmse, 6))
    return SliceScores(
        auc=round(roc_auc(labels, predictions), 6),
        log_loss=round(log_loss(labels, predictions), 6),
    )


def _comparable(labels: np.ndarray, rows: int, min_rows: int, task: str) -> bool:
    """Whether a slice is large enough for an interval (AUC also needs both classes)."""
    if rows < min_rows:
        return False
    return task != "binary" or 0 < int(labels.sum()) < len(labels)


def slice_results(
    slices: pd.DataFrame,
    labels: np.ndarray,
    challenger: np.ndarray,
    champion: np.ndarray | None,
    *,
    min_rows: int,
    resamples: int,
    confidence: float,
    seed: int,
    task: str = "binary",
) -> list[SliceResult]:
    """One result per value of each column of ``slices`` (rows aligned with ``labels`` and the
    predictions; missing values form the slice ``<missing>``), largest slices first within a
    column. Each model's scores hold the task's slice metric on the slice's rows (the gate
    scales a regression slice's margin by the champion's RMSE there). Slices of at least
    ``min_rows`` rows (``binary``: with both classes) get paired-bootstrap intervals of
    challenger minus champion on the task's slice metric (and log loss for ``binary``).
    ``positives`` is -1 for tasks other than ``binary``."""
    results: list[SliceResult] = []
    y = np.asarray(labels)
    metrics = SLICE_METRICS if task == "binary" else (task_spec(task).slice_metric,)
    for column in slices.columns:
        values = slices[column].astype("string").fillna("<missing>").to_numpy()
        names, counts = np.unique(values, return_counts=True)
        for value in names[np.argsort(-counts, kind="stable")]:
            rows = values == value
            ys = y[rows]
            differences = {}
            if champion is not None and _comparable(ys, int(rows.sum()), min_rows, task):
                differences = paired_differences(
                    ys,
                    challenger[rows],
                    champion[rows],
                    resamples=resamples,
                    confidence=confidence,
                    seed=seed,
                    metrics=metrics,
                    task=task,
                )
            results.append(
                SliceResult(
                    column=str(column),
                    value=str(value),
                    rows=int(rows.sum()),
                    positives=int(ys.sum()) if task == "binary" else -1,
                    challenger=_scores(ys, challenger[rows], task),
                    champion=_scores(ys, champion[rows], task) if champion is not None else None,
                    differences=differences,
                )
            )
    return results
