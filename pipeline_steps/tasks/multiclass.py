"""``multiclass``: the label is a class index 0..K-1 into the domain's ``classes``.

The model gives K logits per row, trained with cross-entropy on the class index; the registered
model gives a probability per class. Metrics (scikit-learn's): log loss, accuracy, macro-F1 and
each class's recall; the gate holds a challenger to log loss and macro-F1.
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
    class_index_state,
    class_label_misfit,
    resample_mean,
    sklearn_metrics,
)

if TYPE_CHECKING:
    import torch

    from pipeline_steps.core.manifests import HoldoutMetrics, SliceScores


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


def macro_f1(labels: ArrayLike, probabilities: ArrayLike, min_class_rows: int = 0) -> float:
    """Unweighted mean of the classes' F1 scores: a rare class counts as much as a frequent one.
    The classes are the judged ones (``judged_classes``) with ``min_class_rows``, else those
    labelled or predicted (scikit-learn's ``average="macro"``); NaN when none is judged."""
    y = np.asarray(labels, dtype=np.int64)
    predicted = predicted_classes(probabilities)
    if min_class_rows <= 0:
        return float(sklearn_metrics().f1_score(y, predicted, average="macro", zero_division=0))
    judged = judged_classes(y, min_class_rows)
    if not len(judged):
        return float("nan")
    return float(
        sklearn_metrics().f1_score(y, predicted, labels=judged, average="macro", zero_division=0)
    )


def judged_classes(labels: ArrayLike, min_class_rows: int) -> np.ndarray:
    """The class indices with at least ``min_class_rows`` rows in ``labels``: those a metric
    averaged over classes can judge (two rows of a rare class decide nothing)."""
    counts = np.bincount(np.asarray(labels, dtype=np.int64))
    return np.flatnonzero(counts >= max(min_class_rows, 1))


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


def _macro_f1(
    y: np.ndarray, predicted: np.ndarray, rows: np.ndarray, judged: np.ndarray | None = None
) -> np.ndarray:
    # Per resample and class: labelled, predicted and correct rows (ids offset by classes *
    # resample); F1 = 2 correct / (labelled + predicted), averaged over the judged classes, or
    # over the classes with any.
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
    if judged is not None:
        if not len(judged):
            return np.full(resamples, np.nan)
        return f1[:, judged].mean(axis=1)
    return f1.sum(axis=1) / (present > 0).sum(axis=1)


def _multiclass(
    metric: str,
    labels: np.ndarray,
    probabilities: np.ndarray,
    rows: np.ndarray,
    min_class_rows: int = 0,
) -> np.ndarray:
    y = np.asarray(labels, dtype=np.int64)
    p = np.asarray(probabilities, dtype=np.float64)
    if metric == "log_loss":
        # As scikit-learn's log_loss of class_probabilities (it clips at machine precision).
        tiny = np.finfo(np.float64).eps
        q = np.clip(class_probabilities(p)[np.arange(len(y)), y], tiny, 1 - tiny)
        return resample_mean(-np.log(q), rows)
    if metric == "accuracy":
        return resample_mean((predicted_classes(p) == y).astype(np.float64), rows)
    if metric == "macro_f1":
        judged = judged_classes(y, min_class_rows) if min_class_rows > 0 else None
        return _macro_f1(y, predicted_classes(p), rows, judged)
    raise TaskError(
        f"no bootstrap for multiclass metric {metric!r}; known: log_loss, accuracy, macro_f1"
    )


class Multiclass(Task):
    name = "multiclass"
    description = "named classes: a logit per class, a probability per class"
    metric_list = (
        Metric("log_loss", False, "log loss"),
        Metric("accuracy", True, "accuracy"),
        Metric("macro_f1", True, "macro-F1", per_class=True),
    )
    gate_metrics = ("log_loss", "macro_f1")
    champion_columns = (
        ("log_loss", "log loss"),
        ("accuracy", "accuracy"),
        ("macro_f1", "macro-F1"),
    )
    trivial_metrics = ("log_loss",)
    slice_metric = "accuracy"
    near_perfect_metric = "accuracy"
    plots = ("confusion",)
    linear_baseline = "logistic_regression"
    trivial_description = "the training window's class shares"
    has_classes = True
    calibrated = True

    def check_classes(self, classes: Sequence[str], where: str) -> None:
        if len(classes) < 3 or len(set(classes)) != len(classes):
            raise TaskError(
                f"{where}: a multiclass task needs at least three distinct classes, "
                f"got {list(classes)} (two classes are a binary task)"
            )

    def outputs(self, classes: Sequence[str]) -> int:
        return len(classes)

    def label_misfit(self, label: LabelSample) -> str | None:
        return class_label_misfit(self.name, "a", label)

    def expected_shape(self, rows: int, classes: Sequence[str]) -> tuple[int, ...]:
        return (rows, len(classes))

    def fit_head(
        self, labels: Any, values: np.ndarray, classes: Sequence[str], where: str
    ) -> HeadState:
        return class_index_state(self.name, "a", values, classes, where)

    def loss(
        self, outputs: torch.Tensor, labels: torch.Tensor, state: HeadState, reduction: str
    ) -> torch.Tensor:
        from torch import nn

        return nn.functional.cross_entropy(outputs, labels.long(), reduction=reduction)

    def validation_sums(
        self, outputs: torch.Tensor, labels: torch.Tensor, state: HeadState
    ) -> list[Any]:
        return [float((outputs.argmax(1) == labels.long()).sum())]

    def validation_metrics(
        self, rows: float, sums: Sequence[float], state: HeadState
    ) -> dict[str, float]:
        return {"val_accuracy": sums[0] / max(rows, 1.0)}

    def predict(self, outputs: torch.Tensor, state: HeadState) -> np.ndarray:
        import torch

        outputs = outputs.detach().cpu()
        return torch.softmax(outputs.float(), dim=1).numpy().astype(np.float64)

    def report(self, labels: Any, predictions: Any, min_class_rows: int = 0) -> dict[str, float]:
        y = np.asarray(labels)
        values = {
            "log_loss": multiclass_log_loss(y, predictions),
            "accuracy": multiclass_accuracy(y, predictions),
            "macro_f1": macro_f1(y, predictions, min_class_rows),
        }
        return {name: round(value, 6) for name, value in values.items()}

    def holdout_metrics(
        self, labels: Any, predictions: Any, classes: Sequence[str], min_class_rows: int = 0
    ) -> HoldoutMetrics:
        from pipeline_steps.core.manifests import HoldoutMetrics

        report = self.report(labels, predictions, min_class_rows)
        return HoldoutMetrics(
            task=self.name,
            rows=len(np.asarray(labels)),
            log_loss=report["log_loss"],
            accuracy=report["accuracy"],
            macro_f1=report["macro_f1"],
            class_recall=class_recall(labels, predictions, classes),
        )

    def slice_scores(self, labels: np.ndarray, predictions: np.ndarray) -> SliceScores:
        from pipeline_steps.core.manifests import SliceScores

        return SliceScores(
            auc=float("nan"),
            log_loss=round(multiclass_log_loss(labels, predictions), 6),
            accuracy=round(multiclass_accuracy(labels, predictions), 6),
        )

    def replicates(
        self,
        metric: str,
        labels: np.ndarray,
        predictions: np.ndarray,
        rows: np.ndarray,
        min_class_rows: int = 0,
    ) -> np.ndarray:
        return _multiclass(metric, labels, predictions, rows, min_class_rows)

    def trivial(self, mean: float | None, prior: Any, rows: int) -> np.ndarray:
        return np.tile(prior, (rows, 1))

    def predicted_class(self, predictions: Any) -> np.ndarray:
        return predicted_classes(predictions)


TASK = Multiclass()
