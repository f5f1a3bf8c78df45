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
from pipeline_steps.evaluation.metrics import (
    CALIBRATION_BINS,
    LOG_LOSS_EPS,
    calibration_bins,
    class_probabilities,
    predicted_classes,
    task_report,
)

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
    if task == "regression":
        strata = [np.arange(len(labels))]
    elif task == "multiclass":
        y = np.asarray(labels, dtype=np.int64)
        strata = [np.flatnonzero(y == c) for c in np.unique(y)]
    else:
        positive = np.asarray(labels).astype(bool)
        strata = [np.flatnonzero(positive), np.flatnonzero(~positive)]
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


def _scores(p: np.ndarray) -> np.ndarray:
    # AUC depends only on the order: non-finite scores are ranked as metrics.roc_auc does.
    if np.isfinite(p).all():
        return p
    return np.unique(p, return_inverse=True)[1].astype(np.float64)


def _auc(y: np.ndarray, p: np.ndarray, rows: np.ndarray) -> np.ndarray:
    from scipy.stats import mannwhitneyu  # here: SciPy costs the steps that only import 1 s

    positives = int(y.sum())
    if positives == 0 or positives == len(y):
        return np.full(len(rows), np.nan)
    s = _scores(p)[rows]
    # Mann-Whitney U of positives against negatives over rows of the resample: AUC * n1 * n0.
    u = mannwhitneyu(s[:, :positives], s[:, positives:], axis=1).statistic
    return np.asarray(u, dtype=np.float64) / (positives * (len(y) - positives))


def _mean(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The mean of per-row ``values`` over each resample."""
    return values[rows].mean(axis=1)


def _ece(y: np.ndarray, p: np.ndarray, rows: np.ndarray) -> np.ndarray:
    bins = CALIBRATION_BINS
    resamples, n = rows.shape
    # One bin set per resample (ids offset by bins * resample); per bin |sum p - sum y| / n is
    # its share of rows times the gap between mean probability and positive rate.
    ids = (calibration_bins(p)[rows] + bins * np.arange(resamples)[:, None]).ravel()
    size = resamples * bins
    total_p = np.bincount(ids, weights=p[rows].ravel(), minlength=size).reshape(resamples, bins)
    total_y = np.bincount(ids, weights=y[rows].ravel(), minlength=size).reshape(resamples, bins)
    return np.abs(total_p - total_y).sum(axis=1) / n


def _macro_f1(y: np.ndarray, predicted: np.ndarray, rows: np.ndarray) -> np.ndarray:
    # Per resample and class: labelled, predicted and correct rows (ids offset by classes *
    # resample); F1 = 2 correct / (labelled + predicted), averaged over the classes with any.
    resamples = len(rows)
    classes = int(max(y.max(initial=0), predicted.max(initial=0))) + 1
    truth = y[rows] + classes * np.arange(resamples)[:, None]
    guess = predicted[rows] + classes * np.arange(resamples)[:, None]

    def count(ids: np.ndarray) -> np.ndarray:
        return np.bincount(ids, minlength=resamples * classes).reshape(resamples, classes)

    labelled, chosen, correct = (
        count(truth.ravel()),
        count(guess.ravel()),
        count(truth[truth == guess]),
    )
    present = labelled + chosen
    f1 = np.divide(2 * correct, present, out=np.zeros(present.shape), where=present > 0)
    return f1.sum(axis=1) / (present > 0).sum(axis=1)


def _multiclass(
    metric: str, labels: np.ndarray, probabilities: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    y = np.asarray(labels, dtype=np.int64)
    p = np.asarray(probabilities, dtype=np.float64)
    if metric == "log_loss":
        # As scikit-learn's log_loss of class_probabilities (it clips at machine precision).
        tiny = np.finfo(np.float64).eps
        q = np.clip(class_probabilities(p)[np.arange(len(y)), y], tiny, 1 - tiny)
        return _mean(-np.log(q), rows)
    if metric == "accuracy":
        return _mean((predicted_classes(p) == y).astype(np.float64), rows)
    if metric == "macro_f1":
        return _macro_f1(y, predicted_classes(p), rows)
    raise ValueError(
        f"no bootstrap for multiclass metric {metric!r}; known: "
        f"{', '.join(task_spec('multiclass').metrics)}"
    )


def _regression(
    metric: str, labels: np.ndarray, predictions: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(predictions, dtype=np.float64)
    if metric == "rmse":
        return np.sqrt(_mean((p - y) ** 2, rows))
    if metric == "mae":
        return _mean(np.abs(p - y), rows)
    if metric == "r2":
        drawn = y[rows]
        residual = ((drawn - p[rows]) ** 2).sum(axis=1)
        total = ((drawn - drawn.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
        # scikit-learn's finite R² of a constant label: 1 for a perfect fit, else 0.
        constant = np.where(residual == 0, 1.0, 0.0)
        safe = np.where(total > 0, total, 1.0)
        return np.where(total > 0, 1 - residual / safe, constant)
    raise ValueError(
        f"no bootstrap for regression metric {metric!r}; known: "
        f"{', '.join(task_spec('regression').metrics)}"
    )


def replicates(
    metric: str,
    labels: np.ndarray,
    probabilities: np.ndarray,
    rows: np.ndarray,
    task: str = "binary",
) -> np.ndarray:
    """The metric of the model on each resample (one value per row of ``rows``);
    ``probabilities`` are the model's predictions for ``task`` (class probabilities [rows, K]
    for ``multiclass``, values for ``regression``)."""
    if task == "multiclass":
        return _multiclass(metric, labels, probabilities, rows)
    if task == "regression":
        return _regression(metric, labels, probabilities, rows)
    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(probabilities, dtype=np.float64)
    if metric == "auc":
        return _auc(y, p, rows)
    clipped = np.clip(p, 0.0, 1.0)
    if metric == "log_loss":
        q = np.clip(p, LOG_LOSS_EPS, 1 - LOG_LOSS_EPS)
        return _mean(-(y * np.log(q) + (1 - y) * np.log1p(-q)), rows)
    if metric == "brier":
        return _mean((clipped - y) ** 2, rows)
    if metric == "accuracy":
        return _mean(((p >= 0.5) == (y == 1)).astype(np.float64), rows)
    if metric == "ece":
        return _ece(y, clipped, rows)
    raise ValueError(f"no bootstrap for metric {metric!r}; known: {', '.join(METRICS)}")


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
) -> dict[str, Interval]:
    """``first`` minus ``second`` per metric (by default the task's ``TaskSpec.metrics``), with
    intervals from the same resamples of the holdout for both. Metrics undefined on the holdout
    (AUC with one class, any metric of non-finite predictions) give NaN."""
    y = np.asarray(labels)
    chosen = task_spec(task).metrics if metrics is None else metrics
    diffs: dict[str, list[np.ndarray]] = {metric: [] for metric in chosen}
    for rows in resample_chunks(y, resamples, seed, task):
        for metric in chosen:
            diffs[metric].append(
                replicates(metric, y, first, rows, task) - replicates(metric, y, second, rows, task)
            )
    point_first = task_report(task, y, first)
    point_second = task_report(task, y, second)
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
