"""``regression``: the label is a real number.

The model gives one value per row, trained with mean squared error on the label standardised
with the training rows' mean and standard deviation (so learning rates do not depend on the
label's units); the registered model gives the value in the label's units. Metrics: RMSE, MAE
(the gate's, with margins as fractions of the champion's) and R².
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


def _regression(
    metric: str, labels: np.ndarray, predictions: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(predictions, dtype=np.float64)
    if metric == "rmse":
        return np.sqrt(resample_mean((p - y) ** 2, rows))
    if metric == "mae":
        return resample_mean(np.abs(p - y), rows)
    if metric == "r2":
        drawn = y[rows]
        residual = ((drawn - p[rows]) ** 2).sum(axis=1)
        total = ((drawn - drawn.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
        # scikit-learn's finite R² of a constant label: 1 for a perfect fit, else 0.
        constant = np.where(residual == 0, 1.0, 0.0)
        safe = np.where(total > 0, total, 1.0)
        return np.where(total > 0, 1 - residual / safe, constant)
    raise TaskError(f"no bootstrap for regression metric {metric!r}; known: rmse, mae, r2")


class Regression(Task):
    name = "regression"
    description = "real-valued label: one value, in the label's units"
    metric_list = (
        Metric("rmse", False, "RMSE", relative=True),
        Metric("mae", False, "MAE", relative=True),
        Metric("r2", True, "R²"),
    )
    gate_metrics = ("rmse", "mae")
    champion_columns = (
        ("rmse", "RMSE"),
        ("mae", "MAE"),
        ("r2", "R2"),
        ("label_mean", "mean label"),
    )
    trivial_metrics = ("rmse",)
    slice_metric = "rmse"
    near_perfect_metric = "r2"
    plots = ("residuals", "predicted_vs_actual")
    linear_baseline = "ridge"
    trivial_description = "the training window's mean label"
    stratified = False
    real_valued = True

    def label_misfit(self, label: LabelSample) -> str | None:
        if not label.numeric:
            return f"a regression label is a number, {label.seen}"
        if label.distinct < 3:
            return f"a regression label varies, {label.seen}"
        return None

    def fit_head(
        self, labels: Any, values: np.ndarray, classes: Sequence[str], where: str
    ) -> HeadState:
        import pyarrow.compute as pc

        mean = float(pc.mean(labels).as_py())
        return HeadState(label_mean=mean, label_std=float(np.std(values)) or 1.0)

    def loss(
        self, outputs: torch.Tensor, labels: torch.Tensor, state: HeadState, reduction: str
    ) -> torch.Tensor:
        from torch import nn

        target = (labels - state.label_mean) / state.label_std
        return nn.functional.mse_loss(one_column(outputs), target, reduction=reduction)

    def validation_sums(
        self, outputs: torch.Tensor, labels: torch.Tensor, state: HeadState
    ) -> list[Any]:
        error = one_column(outputs) * state.label_std + state.label_mean - labels
        return [float((error.double() ** 2).sum())]

    def validation_metrics(
        self, rows: float, sums: Sequence[float], state: HeadState
    ) -> dict[str, float]:
        import math

        return {"val_rmse": math.sqrt(sums[0] / max(rows, 1.0))}

    def predict(self, outputs: torch.Tensor, state: HeadState) -> np.ndarray:
        values = one_column(outputs.detach().cpu()).float()
        return (values.double() * state.label_std + state.label_mean).numpy()

    def report(self, labels: Any, predictions: Any, min_class_rows: int = 0) -> dict[str, float]:
        values = regression_errors(np.asarray(labels), predictions)
        return {name: round(value, 6) for name, value in values.items()}

    def holdout_metrics(
        self, labels: Any, predictions: Any, classes: Sequence[str], min_class_rows: int = 0
    ) -> HoldoutMetrics:
        from pipeline_steps.core.manifests import HoldoutMetrics

        y = np.asarray(labels, dtype=np.float64)
        report = self.report(y, predictions)
        return HoldoutMetrics(
            task=self.name,
            rows=len(y),
            rmse=report["rmse"],
            mae=report["mae"],
            r2=report["r2"],
            label_mean=round(float(y.mean()), 6) if len(y) else float("nan"),
        )

    def slice_scores(self, labels: np.ndarray, predictions: np.ndarray) -> SliceScores:
        from pipeline_steps.core.manifests import SliceScores

        rmse = regression_errors(labels, predictions)["rmse"]
        return SliceScores(auc=float("nan"), log_loss=float("nan"), rmse=round(rmse, 6))

    def replicates(
        self,
        metric: str,
        labels: np.ndarray,
        predictions: np.ndarray,
        rows: np.ndarray,
        min_class_rows: int = 0,
    ) -> np.ndarray:
        return _regression(metric, labels, predictions, rows)

    def trivial(self, mean: float | None, prior: Any, rows: int) -> np.ndarray:
        return np.full(rows, 0.0 if mean is None else mean)


TASK = Regression()
