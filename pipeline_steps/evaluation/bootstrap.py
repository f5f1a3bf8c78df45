"""Paired, stratified bootstrap of metric differences between two models on one holdout.

Each resample draws the holdout's positives and negatives with replacement, separately, so every
resample keeps the holdout's class balance (AUC is undefined without both classes); both models
are scored on the same drawn rows, so what the models share cancels out of their difference.
This is the default of pROC's ``roc.test`` and DeLong's alternative for paired AUCs. The point
estimate is the difference of the metrics computed by :mod:`pipeline_steps.evaluation.metrics`
(scikit-learn) on the whole holdout; the resamples give its interval.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import mannwhitneyu

from pipeline_steps.core.manifests import Interval
from pipeline_steps.evaluation.metrics import (
    CALIBRATION_BINS,
    calibration_bins,
    classification_report,
)

METRICS = ("auc", "log_loss", "brier", "accuracy", "ece")
"""Metrics with intervals, as named in ``HoldoutMetrics``."""
LOG_LOSS_EPS = 1e-7  # as pipeline_steps.evaluation.metrics.log_loss clips


def resample_rows(labels: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Row indices of ``resamples`` stratified resamples, shape (resamples, rows): in each row
    first the drawn positives, then the drawn negatives. Seeded: the same labels, count and seed
    give the same draws."""
    y = np.asarray(labels).astype(bool)
    positives, negatives = np.flatnonzero(y), np.flatnonzero(~y)
    rng = np.random.default_rng(seed)
    drawn = []
    for rows in (positives, negatives):
        if len(rows):
            drawn.append(rows[rng.integers(0, len(rows), size=(resamples, len(rows)))])
    return np.hstack(drawn) if drawn else np.empty((resamples, 0), dtype=np.int64)


def _scores(p: np.ndarray) -> np.ndarray:
    # AUC depends only on the order: non-finite scores are ranked as metrics.roc_auc does.
    if np.isfinite(p).all():
        return p
    return np.unique(p, return_inverse=True)[1].astype(np.float64)


def _auc(y: np.ndarray, p: np.ndarray, rows: np.ndarray) -> np.ndarray:
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


def replicates(
    metric: str, labels: np.ndarray, probabilities: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """The metric of the model on each resample (one value per row of ``rows``)."""
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
    metrics: tuple[str, ...] = METRICS,
) -> dict[str, Interval]:
    """``first`` minus ``second`` per metric, with intervals from the same stratified resamples
    of the holdout for both. Metrics undefined on the holdout (AUC with one class) give NaN."""
    y = np.asarray(labels)
    rows = resample_rows(y, resamples, seed)
    point_first = classification_report(y, first)
    point_second = classification_report(y, second)
    out: dict[str, Interval] = {}
    for metric in metrics:
        diff = replicates(metric, y, first, rows) - replicates(metric, y, second, rows)
        estimate = point_first[metric] - point_second[metric]
        if np.isnan(diff).any() or np.isnan(estimate):
            out[metric] = Interval(estimate=float("nan"), low=float("nan"), high=float("nan"))
            continue
        low, high = np.quantile(diff, [1 - confidence, confidence])
        out[metric] = Interval(
            estimate=round(float(estimate), 6), low=round(float(low), 6), high=round(float(high), 6)
        )
    return out
