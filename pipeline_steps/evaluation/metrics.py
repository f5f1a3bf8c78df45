"""Holdout metrics of the three tasks, so every step computes them the same way
(scikit-learn's).

- ``binary``: labels 0/1, predictions the probability of 1; AUC, log loss, Brier score,
  accuracy, calibration error.
- ``multiclass``: labels class indices 0..K-1, predictions a probability per class ([rows, K]);
  log loss, accuracy, macro-F1 and each class's recall.
- ``regression``: labels and predictions real numbers in the label's units; RMSE, MAE, R².
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict
from types import ModuleType

import numpy as np
from numpy.typing import ArrayLike

from pipeline_steps.core.manifests import HoldoutMetrics, Interval
from pipeline_steps.core.tasks import HIGHER_IS_BETTER

__all__ = ["HIGHER_IS_BETTER"]  # the metrics' directions, declared with the tasks


def sklearn_metrics() -> ModuleType:
    """scikit-learn's metrics, imported where first used: a training rank computes only
    :func:`binned_auc` and would pay 0.8 s of CPU importing scikit-learn."""
    from sklearn import metrics

    return metrics


def worst(interval: Interval, metric: str) -> float:
    """The bound of a difference (first model minus second) least favourable to the first."""
    return interval.low if HIGHER_IS_BETTER[metric] else interval.high


def best(interval: Interval, metric: str) -> float:
    """The bound of a difference (first model minus second) most favourable to the first."""
    return interval.high if HIGHER_IS_BETTER[metric] else interval.low


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


LOG_LOSS_EPS = 1e-7
"""Probabilities are clipped to at least this before the log loss (binary and multiclass)."""


def class_probabilities(probabilities: ArrayLike, eps: float = LOG_LOSS_EPS) -> np.ndarray:
    """Multiclass probabilities ([rows, K]) clipped to [eps, 1] and renormalised per row, as
    the multiclass log loss reads them: one confidently wrong row adds about -log(eps)."""
    p = np.clip(np.asarray(probabilities, dtype=np.float64), eps, 1.0)
    return p / p.sum(axis=1, keepdims=True)


def multiclass_log_loss(labels: ArrayLike, probabilities: ArrayLike) -> float:
    """Mean cross-entropy of the class probabilities ([rows, K]) of the labelled class; NaN if
    any probability is NaN. Clipped and renormalised by ``class_probabilities`` first."""
    y = np.asarray(labels, dtype=np.int64)
    raw = np.asarray(probabilities, dtype=np.float64)
    if len(y) == 0 or np.isnan(raw).any():
        return float("nan")
    return float(
        sklearn_metrics().log_loss(y, class_probabilities(raw), labels=range(raw.shape[1]))
    )


def predicted_classes(probabilities: ArrayLike) -> np.ndarray:
    """Each row's most probable class index (the first on ties)."""
    return np.asarray(probabilities, dtype=np.float64).argmax(axis=1)


def multiclass_accuracy(labels: ArrayLike, probabilities: ArrayLike) -> float:
    """Share of rows whose most probable class is the label."""
    y = np.asarray(labels, dtype=np.int64)
    return float(sklearn_metrics().accuracy_score(y, predicted_classes(probabilities)))


def macro_f1(labels: ArrayLike, probabilities: ArrayLike) -> float:
    """Unweighted mean of the F1 scores of the classes labelled or predicted (scikit-learn's
    ``average="macro"``): a rare class counts as much as a frequent one."""
    y = np.asarray(labels, dtype=np.int64)
    predicted = predicted_classes(probabilities)
    return float(sklearn_metrics().f1_score(y, predicted, average="macro", zero_division=0))


def class_recall(
    labels: ArrayLike, probabilities: ArrayLike, classes: Sequence[str]
) -> dict[str, float]:
    """Each class's recall (share of its rows predicted as it), by class name in index order;
    NaN for a class without rows."""
    y = np.asarray(labels, dtype=np.int64)
    recall = sklearn_metrics().recall_score(
        y,
        predicted_classes(probabilities),
        labels=range(len(classes)),
        average=None,
        zero_division=np.nan,
    )
    return {name: round(float(r), 6) for name, r in zip(classes, recall, strict=True)}


def regression_errors(labels: ArrayLike, predictions: ArrayLike) -> dict[str, float]:
    """RMSE, MAE and R² of the predictions; NaN when any prediction is not finite. R² of a
    constant label is scikit-learn's finite value (1 for a perfect fit, else 0)."""
    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(predictions, dtype=np.float64)
    if len(y) == 0 or not np.isfinite(p).all():
        return dict.fromkeys(("rmse", "mae", "r2"), float("nan"))
    return {
        "rmse": float(sklearn_metrics().root_mean_squared_error(y, p)),
        "mae": float(sklearn_metrics().mean_absolute_error(y, p)),
        "r2": float(sklearn_metrics().r2_score(y, p)) if len(y) > 1 else float("nan"),
    }


def task_report(task: str, labels: ArrayLike, predictions: ArrayLike) -> dict[str, float]:
    """The task's metrics with intervals (``TaskSpec.metrics``), rounded for reports:
    ``classification_report`` for ``binary``."""
    if task == "binary":
        return classification_report(labels, predictions)
    y = np.asarray(labels)
    if task == "multiclass":
        values = {
            "log_loss": multiclass_log_loss(y, predictions),
            "accuracy": multiclass_accuracy(y, predictions),
            "macro_f1": macro_f1(y, predictions),
        }
    elif task == "regression":
        values = regression_errors(y, predictions)
    else:
        raise ValueError(f"no metrics for task {task!r}")
    return {name: round(value, 6) for name, value in values.items()}


def holdout_metrics(
    labels: ArrayLike,
    probabilities: ArrayLike,
    task: str = "binary",
    classes: Sequence[str] = (),
) -> HoldoutMetrics:
    """One model's metrics on the holdout as the manifests record them: for ``binary``
    ``classification_report`` of its probabilities; for ``multiclass`` those of its class
    probabilities ([rows, K], ``classes`` their names) and each class's recall; for
    ``regression`` those of its predicted values and the holdout's mean label."""
    if task == "multiclass":
        report = task_report(task, labels, probabilities)
        return HoldoutMetrics(
            task=task,
            rows=len(np.asarray(labels)),
            log_loss=report["log_loss"],
            accuracy=report["accuracy"],
            macro_f1=report["macro_f1"],
            class_recall=class_recall(labels, probabilities, classes),
        )
    if task == "regression":
        y = np.asarray(labels, dtype=np.float64)
        report = task_report(task, y, probabilities)
        return HoldoutMetrics(
            task=task,
            rows=len(y),
            rmse=report["rmse"],
            mae=report["mae"],
            r2=report["r2"],
            label_mean=round(float(y.mean()), 6) if len(y) else float("nan"),
        )
    report = classification_report(labels, probabilities)
    return HoldoutMetrics(
        auc=report["auc"],
        log_loss=report["log_loss"],
        brier=report["brier"],
        accuracy=report["accuracy"],
        ece=report["ece"],
        positive_rate=report["positive_rate"],
        rows=int(report["rows"]),
    )


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
