"""Paired bootstrap of metric differences between two models on one holdout.

For ``binary`` each resample draws the holdout's positives and negatives with replacement,
separately, so every resample keeps the holdout's class balance (AUC is undefined without both
classes); ``multiclass`` draws each class's rows separately the same way, so a rare class keeps
its count (and its weight in macro-F1); ``regression`` draws rows. Both models are scored on the
same drawn rows, so what the models share cancels out of their difference. This is the default
of pROC's ``roc.test`` and DeLong's alternative for paired AUCs. The point estimate is the
difference of the metrics computed by :mod:`pipeline_steps.evaluation.metrics` (scikit-learn) on
the whole holdout; the resamples give its interval, each metric computed for a chunk of
resamples at once (all 1,000 on a holdout of up to 1,048 rows; memory stays flat above).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from pipeline_steps.core.manifests import Interval
from pipeline_steps.core.tasks import task_spec
from pipeline_steps.evaluation.metrics import task_report

METRICS = task_spec("binary").metrics
"""Binary metrics with intervals, as named in ``HoldoutMetrics``; each task's are its
``TaskSpec.metrics``."""


RESAMPLE_BUDGET = 1 << 20
"""Drawn row indices held at once (resamples times holdout rows; 8 MiB of them, and the
metrics' working arrays of the same shape): a large holdout's resamples are drawn and scored in
chunks of ``RESAMPLE_BUDGET // rows``, so memory stays flat however many rows the holdout has.
A day of the shipped domains (up to 1,048 rows with the default 1,000 resamples) is drawn in one
chunk."""


def resample_chunks(
    labels: np.ndarray,
    resamples: int,
    seed: int,
    task: str = "binary",
    budget: int | None = None,
) -> Iterator[np.ndarray]:
    """Row indices of ``resamples`` resamples, in chunks of shape (resamples in the chunk,
    rows) holding at most ``budget`` indices (default ``RESAMPLE_BUDGET``; at least one
    resample each). ``binary``: stratified, in each row first the drawn positives, then the
    drawn negatives; ``multiclass``: stratified, each class's drawn rows in class order;
    ``regression``: rows drawn from all rows. Seeded: the same labels, count, seed and budget
    give the same draws."""
    rng = np.random.default_rng(seed)
    spec = task_spec(task)
    if not spec.stratified:
        strata = [np.arange(len(labels))]
    elif spec.counts_positives:
        positive = np.asarray(labels).astype(bool)
        strata = [np.flatnonzero(positive), np.flatnonzero(~positive)]
    else:
        y = np.asarray(labels, dtype=np.int64)
        strata = [np.flatnonzero(y == c) for c in np.unique(y)]
    per_chunk = max(1, (budget or RESAMPLE_BUDGET) // max(len(labels), 1))
    for start in range(0, resamples, per_chunk):
        count = min(per_chunk, resamples - start)
        drawn = [
            rows[rng.integers(0, len(rows), size=(count, len(rows)))]
            for rows in strata
            if len(rows)
        ]
        yield np.hstack(drawn) if drawn else np.empty((count, 0), dtype=np.int64)


def resample_rows(
    labels: np.ndarray, resamples: int, seed: int, task: str = "binary"
) -> np.ndarray:
    """Every resample's row indices at once, shape (resamples, rows), as
    :func:`resample_chunks` draws them."""
    return np.vstack(list(resample_chunks(labels, resamples, seed, task)))


def replicates(
    metric: str,
    labels: np.ndarray,
    probabilities: np.ndarray,
    rows: np.ndarray,
    task: str = "binary",
    min_class_rows: int = 0,
) -> np.ndarray:
    """The metric of the model on each resample (one value per row of ``rows``);
    ``probabilities`` are the model's predictions for ``task`` (``Task.replicates``)."""
    return task_spec(task).replicates(metric, labels, probabilities, rows, min_class_rows)


def paired_differences(
    labels: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
    *,
    resamples: int,
    confidence: float,
    seed: int,
    metrics: tuple[str, ...] | None = None,
    task: str = "binary",
    min_class_rows: int = 0,
) -> dict[str, Interval]:
    """``first`` minus ``second`` per metric (by default the task's ``TaskSpec.metrics``), with
    intervals from the same resamples of the holdout for both. Metrics undefined on the holdout
    (AUC with one class, any metric of non-finite predictions) give NaN. A metric averaged over
    classes judges those with at least ``min_class_rows`` rows of the whole holdout."""
    y = np.asarray(labels)
    chosen = task_spec(task).metrics if metrics is None else metrics
    diffs: dict[str, list[np.ndarray]] = {metric: [] for metric in chosen}
    for rows in resample_chunks(y, resamples, seed, task):
        for metric in chosen:
            diffs[metric].append(
                replicates(metric, y, first, rows, task, min_class_rows)
                - replicates(metric, y, second, rows, task, min_class_rows)
            )
    point_first = task_report(task, y, first, min_class_rows)
    point_second = task_report(task, y, second, min_class_rows)
    out: dict[str, Interval] = {}
    for metric in chosen:
        diff = np.concatenate(diffs[metric])
        estimate = point_first[metric] - point_second[metric]
        if np.isnan(diff).any() or np.isnan(estimate):
            out[metric] = Interval(estimate=float("nan"), low=float("nan"), high=float("nan"))
            continue
        low, high = np.quantile(diff, [1 - confidence, confidence])
        out[metric] = Interval(
            estimate=round(float(estimate), 6), low=round(float(low), 6), high=round(float(high), 6)
        )
    return out
