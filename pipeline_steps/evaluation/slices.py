"""Metrics per slice of the holdout (a value of a column: a carrier, an origin airport, a band
of departure hours), for the challenger and the champion.

Each slice records both models' value of the task's slice metric (``TaskSpec.slice_metric``:
AUC for ``binary``, accuracy for ``multiclass``, RMSE for ``regression``) and the challenger
minus the champion on it with its paired-bootstrap interval (and on log loss for ``binary``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline_steps.core.manifests import SliceResult
from pipeline_steps.core.tasks import task_spec
from pipeline_steps.evaluation.bootstrap import paired_differences

SLICE_METRICS = task_spec("binary").slice_metric_names()
"""``binary``: the metrics with intervals per slice; each task's are
``Task.slice_metric_names()``."""


def _comparable(labels: np.ndarray, rows: int, min_rows: int, task: str) -> bool:
    """Whether a slice is large enough for an interval (AUC also needs both classes)."""
    return rows >= min_rows and task_spec(task).comparable(labels)


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
    spec = task_spec(task)
    metrics = spec.slice_metric_names()
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
                    positives=int(ys.sum()) if spec.counts_positives else -1,
                    challenger=spec.slice_scores(ys, challenger[rows]),
                    champion=(
                        spec.slice_scores(ys, champion[rows]) if champion is not None else None
                    ),
                    differences=differences,
                )
            )
    return results
