"""``ordinal``: ordered classes (sizes, grades, ratings).

The label is a class index 0..K-1 into the domain's ``classes``, listed from lowest to highest.
The model gives K-1 logits per row, trained with CORN (Shi, Cao and Raschka 2023, "Deep neural
networks for rank-consistent ordinal regression based on conditional probabilities"): logit k
is the log-odds of ``label > k`` among the rows with ``label > k - 1``, a binary cross-entropy on
those rows only. The probability of ``label > k`` is the product of the first k + 1 conditional
probabilities, so it never rises with k whatever the weights: the class probabilities the
registered model gives ([rows, K], their differences) are never negative.

A prediction's class is the median of its class probabilities (the first class whose
cumulative probability reaches one half): the class that minimises the expected absolute class
error. Metrics: the mean absolute class error (``class_mae``, in classes) and the quadratic
weighted kappa (``qwk``: agreement beyond chance, a miss weighted by its squared distance),
which both respect the order, beside accuracy and log loss of the class probabilities. The gate
holds a challenger to ``class_mae`` and ``qwk``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pipeline_steps.tasks.base import (
    HeadState,
    LabelSample,
    Metric,
    Task,
    TaskError,
    class_index_state,
    class_label_misfit,
    sklearn_metrics,
)

if TYPE_CHECKING:
    import numpy as np
    import torch

    from pipeline_steps.core.manifests import HoldoutMetrics, SliceScores

LOG_LOSS_EPS = 1e-7


def cumulative_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """``P(label > k)`` for k = 0..K-2 ([rows, K-1]) from CORN's conditional logits."""
    import torch

    return torch.cumprod(torch.sigmoid(logits), dim=1)


def class_probabilities_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Each class's probability ([rows, K]) from CORN's K-1 conditional logits."""
    import torch

    above = cumulative_from_logits(logits)
    ones = torch.ones_like(above[:, :1])
    zeros = torch.zeros_like(above[:, :1])
    return torch.cat([ones, above], dim=1) - torch.cat([above, zeros], dim=1)


def corn_loss(logits: torch.Tensor, labels: torch.Tensor, reduction: str) -> torch.Tensor:
    """CORN's loss: for each threshold k, the binary cross-entropy of ``label > k`` on the rows
    with ``label >= k``; ``sum`` adds every term, ``mean`` divides by the rows (so a row's
    weight does not depend on how many thresholds it reaches)."""
    import torch
    from torch import nn

    y = labels.long().unsqueeze(1)
    k = torch.arange(logits.shape[1], device=logits.device).unsqueeze(0)
    reached = (y >= k).to(logits.dtype)
    target = (y > k).to(logits.dtype)
    terms = nn.functional.binary_cross_entropy_with_logits(logits, target, reduction="none")
    per_row = (terms * reached).sum(dim=1)
    if reduction == "sum":
        return per_row.sum()
    if reduction == "none":
        return per_row
    return per_row.mean()


def median_classes(probabilities: Any) -> np.ndarray:
    """Each row's median class: the first whose cumulative probability reaches one half."""
    import numpy as np

    p = np.nan_to_num(np.asarray(probabilities, dtype=np.float64), nan=0.0)
    cumulative = np.cumsum(p, axis=1) / np.maximum(p.sum(axis=1, keepdims=True), 1e-300)
    return np.minimum((cumulative < 0.5 - 1e-12).sum(axis=1), p.shape[1] - 1)


def class_mae(labels: Any, predicted: Any) -> float:
    """Mean absolute distance between the predicted and labelled class indices."""
    import numpy as np

    y = np.asarray(labels, dtype=np.int64)
    if len(y) == 0:
        return float("nan")
    return float(np.abs(np.asarray(predicted, dtype=np.int64) - y).mean())


def quadratic_weighted_kappa(labels: Any, predicted: Any, classes: int) -> float:
    """Cohen's kappa with quadratic weights over ``classes`` ordered classes: 1 for perfect
    agreement, 0 for agreement by chance; NaN when both sides are constant and equal."""
    import numpy as np

    y = np.asarray(labels, dtype=np.int64)
    p = np.asarray(predicted, dtype=np.int64)
    value = sklearn_metrics().cohen_kappa_score(
        y, p, labels=list(range(classes)), weights="quadratic"
    )
    return float(value) if np.isfinite(value) else float("nan")


def _qwk_replicates(y: np.ndarray, p: np.ndarray, rows: np.ndarray, classes: int) -> np.ndarray:
    """Quadratic weighted kappa of every resample at once: 1 - observed / expected squared
    class distance, the expected one between independent draws from both margins."""
    import numpy as np

    drawn_y = y[rows].astype(np.float64)
    drawn_p = p[rows].astype(np.float64)
    n = rows.shape[1]
    observed = ((drawn_y - drawn_p) ** 2).mean(axis=1)
    # E[(a - b)^2] for independent a ~ labels, b ~ predictions of the resample
    expected = (
        (drawn_y**2).mean(axis=1)
        + (drawn_p**2).mean(axis=1)
        - 2 * drawn_y.mean(axis=1) * drawn_p.mean(axis=1)
    )
    safe = np.where(expected > 0, expected, 1.0)
    return np.where(expected > 0, 1 - observed / safe, np.nan) if n else np.full(len(rows), np.nan)


class Ordinal(Task):
    name = "ordinal"
    description = "ordered classes: K-1 conditional logits (CORN), class probabilities"
    metric_list = (
        Metric("class_mae", False, "mean absolute class error"),
        Metric("qwk", True, "quadratic weighted kappa"),
        Metric("accuracy", True, "accuracy"),
        Metric("log_loss", False, "log loss"),
    )
    gate_metrics = ("class_mae", "qwk")
    champion_columns = (
        ("class_mae", "class MAE"),
        ("qwk", "QWK"),
        ("accuracy", "accuracy"),
        ("log_loss", "log loss"),
    )
    trivial_metrics = ("class_mae", "log_loss")
    slice_metric = "class_mae"
    near_perfect_metric = "accuracy"
    plots = ("confusion", "class_error")
    linear_baseline = "logistic_regression"
    trivial_description = "the training window's class shares"
    has_classes = True
    calibrated = True
    ordered = True

    def check_classes(self, classes: Sequence[str], where: str) -> None:
        if len(classes) < 3 or len(set(classes)) != len(classes):
            raise TaskError(
                f"{where}: an ordinal task needs at least three distinct classes, lowest "
                f"first, got {list(classes)} (two ordered classes are a binary task)"
            )

    def outputs(self, classes: Sequence[str]) -> int:
        return len(classes) - 1

    def label_misfit(self, label: LabelSample) -> str | None:
        return class_label_misfit(self.name, "an", label)

    def expected_shape(self, rows: int, classes: Sequence[str]) -> tuple[int, ...]:
        return (rows, len(classes))

    # -- training ----------------------------------------------------------------------------

    def fit_head(
        self, labels: Any, values: np.ndarray, classes: Sequence[str], where: str
    ) -> HeadState:
        return class_index_state(self.name, "an", values, classes, where)

    def loss(
        self, outputs: torch.Tensor, labels: torch.Tensor, state: HeadState, reduction: str
    ) -> torch.Tensor:
        return corn_loss(outputs, labels, reduction)

    def validation_sums(
        self, outputs: torch.Tensor, labels: torch.Tensor, state: HeadState
    ) -> list[Any]:
        # the sum of absolute class errors of the median class
        above = cumulative_from_logits(outputs.detach().float())
        predicted = (above >= 0.5).sum(dim=1)
        return [float((predicted - labels.long()).abs().sum())]

    def validation_metrics(
        self, rows: float, sums: Sequence[float], state: HeadState
    ) -> dict[str, float]:
        return {"val_class_mae": sums[0] / max(rows, 1.0)}

    def predict(self, outputs: torch.Tensor, state: HeadState) -> np.ndarray:
        import numpy as np

        logits = outputs.detach().cpu().float()
        return class_probabilities_from_logits(logits).numpy().astype(np.float64)

    # -- evaluation --------------------------------------------------------------------------

    def report(self, labels: Any, predictions: Any, min_class_rows: int = 0) -> dict[str, float]:
        import numpy as np

        y = np.asarray(labels, dtype=np.int64)
        p = np.asarray(predictions, dtype=np.float64)
        if len(y) == 0 or np.isnan(p).any():
            return dict.fromkeys(self.metrics, float("nan"))
        predicted = median_classes(p)
        clipped = np.clip(p, LOG_LOSS_EPS, 1.0)
        clipped = clipped / clipped.sum(axis=1, keepdims=True)
        values = {
            "class_mae": class_mae(y, predicted),
            "qwk": quadratic_weighted_kappa(y, predicted, p.shape[1]),
            "accuracy": float((predicted == y).mean()),
            "log_loss": float(
                sklearn_metrics().log_loss(y, clipped, labels=list(range(p.shape[1])))
            ),
        }
        return {name: round(value, 6) for name, value in values.items()}

    def holdout_metrics(
        self, labels: Any, predictions: Any, classes: Sequence[str], min_class_rows: int = 0
    ) -> HoldoutMetrics:
        import numpy as np

        from pipeline_steps.core.manifests import HoldoutMetrics

        y = np.asarray(labels, dtype=np.int64)
        report = self.report(y, predictions)
        recall: dict[str, float] = {}
        if len(y):
            predicted = median_classes(predictions)
            for index, name in enumerate(classes):
                rows = y == index
                recall[name] = (
                    round(float((predicted[rows] == index).mean()), 6) if rows.any() else np.nan
                )
        return HoldoutMetrics(
            task=self.name,
            rows=len(y),
            class_mae=report["class_mae"],
            qwk=report["qwk"],
            accuracy=report["accuracy"],
            log_loss=report["log_loss"],
            class_recall=recall,
        )

    def slice_scores(self, labels: np.ndarray, predictions: np.ndarray) -> SliceScores:
        from pipeline_steps.core.manifests import SliceScores

        report = self.report(labels, predictions)
        return SliceScores(
            auc=float("nan"), log_loss=report["log_loss"], class_mae=report["class_mae"]
        )

    def replicates(
        self,
        metric: str,
        labels: np.ndarray,
        predictions: np.ndarray,
        rows: np.ndarray,
        min_class_rows: int = 0,
    ) -> np.ndarray:
        import numpy as np

        y = np.asarray(labels, dtype=np.int64)
        p = np.asarray(predictions, dtype=np.float64)
        if np.isnan(p).any():
            return np.full(len(rows), np.nan)
        predicted = median_classes(p)
        if metric == "class_mae":
            return np.abs(predicted - y).astype(np.float64)[rows].mean(axis=1)
        if metric == "qwk":
            return _qwk_replicates(y, predicted, rows, p.shape[1])
        if metric == "accuracy":
            return (predicted == y).astype(np.float64)[rows].mean(axis=1)
        if metric == "log_loss":
            clipped = np.clip(p, LOG_LOSS_EPS, 1.0)
            clipped = clipped / clipped.sum(axis=1, keepdims=True)
            tiny = np.finfo(np.float64).eps
            q = np.clip(clipped[np.arange(len(y)), y], tiny, 1 - tiny)
            return (-np.log(q))[rows].mean(axis=1)
        raise TaskError(
            f"no bootstrap for ordinal metric {metric!r}; known: {', '.join(self.metrics)}"
        )

    def trivial(self, mean: float | None, prior: Any, rows: int) -> np.ndarray:
        import numpy as np

        return np.tile(np.asarray(prior, dtype=np.float64), (rows, 1))

    def predicted_class(self, predictions: Any) -> np.ndarray:
        """The median class (minimises the expected absolute class error)."""
        return median_classes(predictions)

    def model_output(self, predictions: np.ndarray, classes: Sequence[str], index: Any) -> Any:
        """A probability column per class (lowest first) and ``predicted_class``, the median
        class's name."""
        import numpy as np

        frame = super().model_output(predictions, classes, index)
        frame["predicted_class"] = np.asarray(classes, dtype=object)[median_classes(predictions)]
        return frame


TASK = Ordinal()
