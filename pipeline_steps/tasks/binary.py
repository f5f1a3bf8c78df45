"""``binary``: the label is 0/1.

The model gives one logit per row, trained with binary cross-entropy; the registered model gives
the probability of 1. Metrics (scikit-learn's): AUC, log loss, Brier score, accuracy and the
expected calibration error; the epoch's validation AUC comes from score histograms the ranks
sum. The gate holds a challenger to AUC and log loss, and with no champion to ``gate.min_auc``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from pipeline_steps.tasks.base import (
    HeadState,
    LabelSample,
    Metric,
    Task,
    TaskError,
    one_column,
    resample_mean,
    sklearn_metrics,
)

if TYPE_CHECKING:
    import torch

    from pipeline_steps.core.manifests import HoldoutMetrics, SliceScores

AUC_BINS = 1024
"""Bins of the score histograms the validation AUC is computed from (summed over ranks)."""

LOG_LOSS_EPS = 1e-7
"""Probabilities are clipped to [eps, 1 - eps] before the log loss."""


def roc_auc(labels: ArrayLike, scores: ArrayLike) -> float:
    """Area under the ROC curve, tied scores counting half; NaN when only one class is present.

    scikit-learn rejects non-finite scores. AUC depends only on the order of the scores, so a
    model that produced ±inf or NaN is scored on their ranks in numpy's sort order (NaN above
    +inf, all NaNs tied) rather than failing the step.
    """
    y = np.asarray(labels, dtype=np.int8)
    s = np.asarray(scores, dtype=np.float64)
    positives = int(y.sum())
    if positives == 0 or positives == len(y):
        return float("nan")
    if not np.isfinite(s).all():
        s = np.unique(s, return_inverse=True)[1].astype(np.float64)
    return float(sklearn_metrics().roc_auc_score(y, s))


def log_loss(labels: ArrayLike, probabilities: ArrayLike, eps: float = 1e-7) -> float:
    """Mean binary cross-entropy; NaN if any probability is NaN.

    Probabilities are clipped to [eps, 1 - eps] first (scikit-learn clips only at machine
    epsilon), so one confidently wrong row adds at most -log(eps) to the sum.
    """
    y = np.asarray(labels, dtype=np.int8)
    p = np.clip(np.asarray(probabilities, dtype=np.float64), eps, 1 - eps)
    if np.isnan(p).any():
        return float("nan")
    return float(sklearn_metrics().log_loss(y, p, labels=[0, 1]))


def accuracy(labels: ArrayLike, probabilities: ArrayLike, threshold: float = 0.5) -> float:
    """Share of rows whose probability ≥ ``threshold`` agrees with the label (NaN counts as 0)."""
    y = np.asarray(labels, dtype=np.int8)
    predicted = (np.asarray(probabilities, dtype=np.float64) >= threshold).astype(np.int8)
    return float(sklearn_metrics().accuracy_score(y, predicted))


def brier(labels: ArrayLike, probabilities: ArrayLike) -> float:
    """Mean squared error of the probabilities (Brier score); NaN if any probability is NaN."""
    y = np.asarray(labels, dtype=np.int8)
    p = np.asarray(probabilities, dtype=np.float64)
    if np.isnan(p).any():
        return float("nan")
    return float(sklearn_metrics().brier_score_loss(y, np.clip(p, 0.0, 1.0), pos_label=1))


CALIBRATION_BINS = 10
"""Equal-width probability bins of the calibration error and the calibration curve."""


def calibration_bins(probabilities: ArrayLike, bins: int = CALIBRATION_BINS) -> np.ndarray:
    """Each probability's bin among ``bins`` equal-width bins of [0, 1], as
    ``calibration_curve`` assigns them (an edge belongs to the bin below it)."""
    p = np.nan_to_num(np.asarray(probabilities, dtype=np.float64), nan=0.0)
    edges = np.linspace(0.0, 1.0, bins + 1)[1:-1]
    return np.searchsorted(edges, np.clip(p, 0.0, 1.0)).astype(np.int64)


def expected_calibration_error(
    labels: ArrayLike, probabilities: ArrayLike, bins: int = CALIBRATION_BINS
) -> float:
    """Expected calibration error: over equal-width probability bins, the gap between the mean
    probability and the observed positive rate, weighted by the bin's share of rows (the
    calibration curve of ``sklearn.calibration.calibration_curve``, with its bin sizes)."""
    from sklearn.calibration import calibration_curve

    y = np.asarray(labels, dtype=np.int8)
    p = np.clip(np.asarray(probabilities, dtype=np.float64), 0.0, 1.0)
    if len(y) == 0 or np.isnan(p).any():
        return float("nan")
    observed, predicted = calibration_curve(y, p, n_bins=bins, strategy="uniform")
    counts = np.bincount(calibration_bins(p, bins), minlength=bins)
    weights = counts[counts > 0] / len(y)
    return float(np.sum(weights * np.abs(observed - predicted)))


def classification_report(labels: ArrayLike, probabilities: ArrayLike) -> dict[str, float]:
    """AUC, log loss, Brier score, accuracy, calibration error and the positive rate, rounded
    for reports."""
    y = np.asarray(labels)
    return {
        "auc": round(roc_auc(y, probabilities), 6),
        "log_loss": round(log_loss(y, probabilities), 6),
        "brier": round(brier(y, probabilities), 6),
        "accuracy": round(accuracy(y, probabilities), 6),
        "ece": round(expected_calibration_error(y, probabilities), 6),
        "positive_rate": round(float(np.mean(y)), 6),
        "rows": len(y),
    }


def binned_auc(positives: ArrayLike, negatives: ArrayLike) -> float:
    """ROC AUC from score histograms of the two classes over the same ascending bins (ties in a
    bin count half); what distributed ranks can sum. NaN if one class is absent.

    Each bin is one score per class, weighted by its count.
    """
    pos = np.asarray(positives, dtype=np.float64)
    neg = np.asarray(negatives, dtype=np.float64)
    if pos.sum() == 0 or neg.sum() == 0:
        return float("nan")
    # Mann-Whitney over the bins: a positive beats the negatives of every lower bin and ties
    # with those of its own
    below = np.cumsum(neg) - neg
    return float((pos @ below + 0.5 * (pos @ neg)) / (pos.sum() * neg.sum()))


def _auc_scores(p: np.ndarray) -> np.ndarray:
    # AUC depends only on the order: non-finite scores are ranked as metrics.roc_auc does.
    if np.isfinite(p).all():
        return p
    return np.unique(p, return_inverse=True)[1].astype(np.float64)


def _auc(y: np.ndarray, p: np.ndarray, rows: np.ndarray) -> np.ndarray:
    from scipy.stats import mannwhitneyu  # here: SciPy costs the steps that only import 1 s

    positives = int(y.sum())
    if positives == 0 or positives == len(y):
        return np.full(len(rows), np.nan)
    s = _auc_scores(p)[rows]
    # Mann-Whitney U of positives against negatives over rows of the resample: AUC * n1 * n0.
    u = mannwhitneyu(s[:, :positives], s[:, positives:], axis=1).statistic
    return np.asarray(u, dtype=np.float64) / (positives * (len(y) - positives))


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


class Binary(Task):
    name = "binary"
    description = "0/1 label: one logit, the probability of 1"
    metric_list = (
        Metric("auc", True, "AUC"),
        Metric("log_loss", False, "log loss"),
        Metric("brier", False, "Brier score"),
        Metric("accuracy", True, "accuracy"),
        Metric("ece", False, "calibration error"),
    )
    gate_metrics = ("auc", "log_loss")
    trivial_metrics = ("auc", "log_loss")
    slice_metric = "auc"
    near_perfect_metric = "auc"
    slice_metrics = ("auc", "log_loss")
    summary = ("auc", "log_loss", "brier")
    champion_columns = (
        ("auc", "AUC"),
        ("log_loss", "log loss"),
        ("accuracy", "accuracy"),
        ("positive_rate", "positive rate"),
    )
    plots = ("roc", "precision_recall", "calibration")
    linear_baseline = "logistic_regression"
    trivial_description = "the training window's rate"
    counts_positives = True
    calibrated = True

    def baseline_fits(self, distinct: int) -> bool:
        return distinct == 2

    def label_misfit(self, label: LabelSample) -> str | None:
        if label.distinct == 2:
            return None
        hint = "; use --task multiclass" if 2 < label.distinct <= label.max_classes else ""
        return f"a binary label has two values, {label.seen}{hint}"

    def serving_columns(self, predictions: np.ndarray, classes: Sequence[str]) -> dict[str, Any]:
        """``probability``: the probability of 1."""
        return {"probability": predictions}

    def fit_head(
        self, labels: Any, values: np.ndarray, classes: Sequence[str], where: str
    ) -> HeadState:
        bad = sorted(set(np.unique(values).tolist()) - {0.0, 1.0})
        if bad:
            raise TaskError(f"{where}: a binary label must be 0 or 1; found {bad[:5]}")
        return HeadState()

    def loss(
        self, outputs: torch.Tensor, labels: torch.Tensor, state: HeadState, reduction: str
    ) -> torch.Tensor:
        from torch import nn

        return nn.functional.binary_cross_entropy_with_logits(
            one_column(outputs), labels, reduction=reduction
        )

    def validation_sums(
        self, outputs: torch.Tensor, labels: torch.Tensor, state: HeadState
    ) -> list[Any]:
        import torch

        bins = (torch.sigmoid(one_column(outputs)) * AUC_BINS).long().clamp(0, AUC_BINS - 1).cpu()
        is_positive = labels.cpu() > 0.5
        return [
            torch.bincount(bins[is_positive], minlength=AUC_BINS).double(),
            torch.bincount(bins[~is_positive], minlength=AUC_BINS).double(),
        ]

    def sums_width(self) -> int:
        return 2 * AUC_BINS

    def validation_metrics(
        self, rows: float, sums: Sequence[float], state: HeadState
    ) -> dict[str, float]:
        return {"val_auc": binned_auc(sums[:AUC_BINS], sums[AUC_BINS:])}

    def predict(self, outputs: torch.Tensor, state: HeadState) -> np.ndarray:
        import torch

        values = one_column(outputs.detach().cpu()).float()
        return torch.sigmoid(values).numpy().astype(np.float64)

    def report(self, labels: Any, predictions: Any, min_class_rows: int = 0) -> dict[str, float]:
        return classification_report(labels, predictions)

    def holdout_metrics(
        self, labels: Any, predictions: Any, classes: Sequence[str], min_class_rows: int = 0
    ) -> HoldoutMetrics:
        from pipeline_steps.core.manifests import HoldoutMetrics

        report = classification_report(labels, predictions)
        return HoldoutMetrics(
            auc=report["auc"],
            log_loss=report["log_loss"],
            brier=report["brier"],
            accuracy=report["accuracy"],
            ece=report["ece"],
            positive_rate=report["positive_rate"],
            rows=int(report["rows"]),
        )

    def slice_scores(self, labels: np.ndarray, predictions: np.ndarray) -> SliceScores:
        from pipeline_steps.core.manifests import SliceScores

        return SliceScores(
            auc=round(roc_auc(labels, predictions), 6),
            log_loss=round(log_loss(labels, predictions), 6),
        )

    def comparable(self, labels: np.ndarray) -> bool:
        return 0 < int(labels.sum()) < len(labels)

    def replicates(
        self,
        metric: str,
        labels: np.ndarray,
        predictions: np.ndarray,
        rows: np.ndarray,
        min_class_rows: int = 0,
    ) -> np.ndarray:
        y = np.asarray(labels, dtype=np.float64)
        p = np.asarray(predictions, dtype=np.float64)
        if metric == "auc":
            return _auc(y, p, rows)
        clipped = np.clip(p, 0.0, 1.0)
        if metric == "log_loss":
            q = np.clip(p, LOG_LOSS_EPS, 1 - LOG_LOSS_EPS)
            return resample_mean(-(y * np.log(q) + (1 - y) * np.log1p(-q)), rows)
        if metric == "brier":
            return resample_mean((clipped - y) ** 2, rows)
        if metric == "accuracy":
            return resample_mean(((p >= 0.5) == (y == 1)).astype(np.float64), rows)
        if metric == "ece":
            return _ece(y, clipped, rows)
        raise TaskError(f"no bootstrap for metric {metric!r}; known: {', '.join(self.metrics)}")

    def trivial(self, mean: float | None, prior: Any, rows: int) -> np.ndarray:
        return np.full(rows, 0.5 if mean is None else mean)

    def undefined(self, metrics: HoldoutMetrics, judged: Sequence[str]) -> str | None:
        if metrics.auc != metrics.auc:  # NaN: one class only
            return "challenger AUC is undefined on this holdout (one class only)"
        return None


TASK = Binary()
