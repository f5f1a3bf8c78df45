"""The task's head: how the model's outputs meet the label in the loss, the epoch's validation
and the registered model's predictions (:mod:`pipeline_steps.core.tasks`).

- binary: one logit, binary cross-entropy; validation AUC from score histograms; probability.
- multiclass: a logit per class, cross-entropy on the class index; validation accuracy;
  a probability per class.
- regression: one value, mean squared error on the label standardised with the training
  rows' mean and standard deviation (so learning rates do not depend on the label's units);
  validation RMSE in the label's units; the value in the label's units.

Validation sums are ``[loss sum, rows, *task sums]`` per rank, added over the ranks by the loop
before :meth:`Head.validation_metrics` turns them into metrics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow.compute as pc
import torch
from torch import nn

from pipeline_steps.core.errors import StepError
from pipeline_steps.evaluation.metrics import binned_auc

AUC_BINS = 1024
"""Bins of the score histograms the validation AUC is computed from (summed over ranks)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Head:
    """Loss, validation sums and predictions of one task; called as ``head(outputs, labels)``
    for the mean training loss."""

    task: str = "binary"
    classes: tuple[str, ...] = ()
    label_mean: float = 0.0
    label_std: float = 1.0

    @property
    def outputs(self) -> int:
        return len(self.classes) if self.task == "multiclass" else 1

    def __call__(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.loss(outputs, labels, reduction="mean")

    def loss(self, outputs: torch.Tensor, labels: torch.Tensor, reduction: str) -> torch.Tensor:
        if self.task == "multiclass":
            return nn.functional.cross_entropy(outputs, labels.long(), reduction=reduction)
        values = _column(outputs)
        if self.task == "regression":
            target = (labels - self.label_mean) / self.label_std
            return nn.functional.mse_loss(values, target, reduction=reduction)
        return nn.functional.binary_cross_entropy_with_logits(values, labels, reduction=reduction)

    def validation_sums(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """``[loss sum, rows, *task sums]`` of one batch (float64, on the CPU)."""
        head = [float(self.loss(outputs, labels, reduction="sum")), float(len(labels))]
        if self.task == "multiclass":
            correct = (outputs.argmax(1) == labels.long()).sum()
            return torch.tensor([*head, float(correct)], dtype=torch.float64)
        values = _column(outputs)
        if self.task == "regression":
            error = values * self.label_std + self.label_mean - labels
            return torch.tensor([*head, float((error.double() ** 2).sum())], dtype=torch.float64)
        bins = (torch.sigmoid(values) * AUC_BINS).long().clamp(0, AUC_BINS - 1).cpu()
        is_positive = labels.cpu() > 0.5
        return torch.cat(
            [
                torch.tensor(head, dtype=torch.float64),
                torch.bincount(bins[is_positive], minlength=AUC_BINS).double(),
                torch.bincount(bins[~is_positive], minlength=AUC_BINS).double(),
            ]
        )

    def sums_width(self) -> int:
        return 2 + (2 * AUC_BINS if self.task == "binary" else 1)

    def validation_metrics(self, sums: list[float]) -> dict[str, float]:
        """``val_loss`` and the task's validation metric from the summed validation sums."""
        loss, rows, *rest = sums
        metrics = {"val_loss": loss / max(rows, 1.0)}
        if self.task == "multiclass":
            metrics["val_accuracy"] = rest[0] / max(rows, 1.0)
        elif self.task == "regression":
            metrics["val_rmse"] = math.sqrt(rest[0] / max(rows, 1.0))
        else:
            metrics["val_auc"] = binned_auc(rest[:AUC_BINS], rest[AUC_BINS:])
        return metrics

    def predict(self, outputs: torch.Tensor) -> np.ndarray:
        """What the registered model returns for ``outputs``: probabilities of 1 [n],
        class probabilities [n, K], or values in the label's units [n] (float64)."""
        outputs = outputs.detach().cpu()
        if self.task == "multiclass":
            return torch.softmax(outputs.float(), dim=1).numpy().astype(np.float64)
        values = _column(outputs).float()
        if self.task == "regression":
            return (values.double() * self.label_std + self.label_mean).numpy()
        return torch.sigmoid(values).numpy().astype(np.float64)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "classes": list(self.classes),
            "label_mean": self.label_mean,
            "label_std": self.label_std,
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> Head:
        """The head recorded with a model (binary for models recorded before tasks)."""
        values = values or {}
        return cls(
            task=values.get("task", "binary"),
            classes=tuple(values.get("classes", ())),
            label_mean=float(values.get("label_mean", 0.0)),
            label_std=float(values.get("label_std", 1.0)),
        )


def _column(outputs: torch.Tensor) -> torch.Tensor:
    """One value per row, from ``[n, 1]`` (or ``[n]``, which a user's model may return)."""
    return outputs if outputs.dim() == 1 else outputs.squeeze(1)


def fit_head(task: str, classes: list[str], labels: Any, where: str) -> Head:
    """The head of ``task`` for the training rows' ``labels`` (a pyarrow array): it checks the
    labels fit the task and, for regression, records their mean and standard deviation.
    ``StepError`` names ``where`` (the training set) and the offending values."""
    import pyarrow as pa

    labels = labels.combine_chunks() if isinstance(labels, pa.ChunkedArray) else labels
    if labels.null_count:
        raise StepError(f"{where}: the label has {labels.null_count} missing value(s)")
    values = np.asarray(labels.to_numpy(zero_copy_only=False), dtype=np.float64)
    if not np.isfinite(values).all():
        raise StepError(f"{where}: the label has non-finite values")
    if task == "binary":
        bad = sorted(set(np.unique(values).tolist()) - {0.0, 1.0})
        if bad:
            raise StepError(f"{where}: a binary label must be 0 or 1; found {bad[:5]}")
        return Head(task=task)
    if task == "multiclass":
        allowed = set(map(float, range(len(classes))))
        bad = sorted(set(np.unique(values).tolist()) - allowed)
        if bad:
            raise StepError(
                f"{where}: a multiclass label is a class index 0..{len(classes) - 1} into "
                f"{classes}; found {bad[:5]}"
            )
        return Head(task=task, classes=tuple(classes))
    mean = float(pc.mean(labels).as_py())
    std = float(np.std(values)) or 1.0
    return Head(task=task, label_mean=mean, label_std=std)
