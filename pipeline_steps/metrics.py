"""Binary-classification metrics, in numpy so every step computes them the same way."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def roc_auc(labels: ArrayLike, scores: ArrayLike) -> float:
    """Area under the ROC curve (Mann-Whitney U with average ranks for ties); NaN if one class."""
    y = np.asarray(labels, dtype=np.int8)
    s = np.asarray(scores, dtype=np.float64)
    positives, negatives = int(y.sum()), int(len(y) - y.sum())
    if positives == 0 or negatives == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_scores = s[order]
    # Average ranks over tied scores.
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    average = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(average, counts)
    return float((ranks[y == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def log_loss(labels: ArrayLike, probabilities: ArrayLike, eps: float = 1e-7) -> float:
    y = np.asarray(labels, dtype=np.float64)
    p = np.clip(np.asarray(probabilities, dtype=np.float64), eps, 1 - eps)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def accuracy(labels: ArrayLike, probabilities: ArrayLike, threshold: float = 0.5) -> float:
    y = np.asarray(labels, dtype=np.int8)
    return float(np.mean((np.asarray(probabilities) >= threshold).astype(np.int8) == y))


def classification_report(labels: ArrayLike, probabilities: ArrayLike) -> dict[str, float]:
    """AUC, log loss, accuracy and the positive rate, rounded for reports."""
    y = np.asarray(labels)
    return {
        "auc": round(roc_auc(y, probabilities), 6),
        "log_loss": round(log_loss(y, probabilities), 6),
        "accuracy": round(accuracy(y, probabilities), 6),
        "positive_rate": round(float(np.mean(y)), 6),
        "rows": len(y),
    }


def binned_auc(positives: ArrayLike, negatives: ArrayLike) -> float:
    """ROC AUC from score histograms of the two classes over the same ascending bins (ties in a
    bin count half); what distributed ranks can sum. NaN if one class is absent."""
    pos = np.asarray(positives, dtype=np.float64)
    neg = np.asarray(negatives, dtype=np.float64)
    if pos.sum() == 0 or neg.sum() == 0:
        return float("nan")
    below = np.concatenate([[0.0], np.cumsum(neg)[:-1]])
    return float((pos * (below + 0.5 * neg)).sum() / (pos.sum() * neg.sum()))
