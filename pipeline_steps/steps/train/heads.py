"""The task's head: how the model's outputs meet the label in the loss, the epoch's validation
and the registered model's predictions, each the task's own (:mod:`pipeline_steps.tasks`).

Validation sums are ``[loss sum, rows, *task sums]`` per rank, added over the ranks by the loop
before :meth:`Head.validation_metrics` turns them into metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.tasks import task_spec
from pipeline_steps.tasks import Task, TaskError
from pipeline_steps.tasks.base import HeadState
from pipeline_steps.tasks.binary import AUC_BINS

__all__ = ["AUC_BINS", "Head", "fit_head"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Head:
    """Loss, validation sums and predictions of one task; called as ``head(outputs, labels)``
    for the mean training loss."""

    task: str = "binary"
    classes: tuple[str, ...] = ()
    label_mean: float = 0.0
    label_std: float = 1.0
    temperature: float = 1.0
    """What the outputs are divided by before they become probabilities (temperature scaling,
    fitted on the validation rows after training: ``calibration``); 1 for a task that is not
    ``calibrated``, a model trained with ``train.calibrate: false`` and one recorded before."""

    @property
    def spec(self) -> Task:
        return task_spec(self.task)

    @property
    def state(self) -> HeadState:
        return HeadState(classes=self.classes, label_mean=self.label_mean, label_std=self.label_std)

    @property
    def outputs(self) -> int:
        return self.spec.outputs(self.classes)

    def __call__(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.loss(outputs, labels, reduction="mean")

    def loss(self, outputs: torch.Tensor, labels: torch.Tensor, reduction: str) -> torch.Tensor:
        return self.spec.loss(outputs, labels, self.state, reduction)

    def validation_sums(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """``[loss sum, rows, *task sums]`` of one batch (float64, on the CPU)."""
        head = [float(self.loss(outputs, labels, reduction="sum")), float(len(labels))]
        parts = self.spec.validation_sums(outputs, labels, self.state)
        if all(isinstance(part, float) for part in parts):
            return torch.tensor([*head, *parts], dtype=torch.float64)
        return torch.cat([torch.tensor(head, dtype=torch.float64), *parts])

    def sums_width(self) -> int:
        return 2 + self.spec.sums_width()

    def validation_metrics(self, sums: list[float]) -> dict[str, float]:
        """``val_loss`` and the task's validation metric from the summed validation sums."""
        loss, rows, *rest = sums
        return {
            "val_loss": loss / max(rows, 1.0),
            **self.spec.validation_metrics(rows, rest, self.state),
        }

    def predict(self, outputs: torch.Tensor) -> np.ndarray:
        """What the registered model returns for ``outputs`` (``Task.predict``): probabilities
        of 1 [n], class probabilities [n, K], or values in the label's units [n] (float64),
        the outputs divided by the head's temperature first."""
        if self.temperature != 1.0:
            outputs = outputs / self.temperature
        return self.spec.predict(outputs, self.state)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "classes": list(self.classes),
            "label_mean": self.label_mean,
            "label_std": self.label_std,
            "temperature": self.temperature,
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
            temperature=float(values.get("temperature", 1.0)),
        )


def fit_head(task: str, classes: list[str], labels: Any, where: str) -> Head:
    """The head of ``task`` for the training rows' ``labels`` (a pyarrow array): it checks the
    labels fit the task and records what the task needs of them (a regression's mean and
    standard deviation). ``StepError`` names ``where`` (the training set) and the offending
    values."""
    import pyarrow as pa

    labels = labels.combine_chunks() if isinstance(labels, pa.ChunkedArray) else labels
    if labels.null_count:
        raise StepError(f"{where}: the label has {labels.null_count} missing value(s)")
    values = np.asarray(labels.to_numpy(zero_copy_only=False), dtype=np.float64)
    if not np.isfinite(values).all():
        raise StepError(f"{where}: the label has non-finite values")
    try:
        state = task_spec(task).fit_head(labels, values, classes, where)
    except TaskError as exc:
        raise StepError(str(exc)) from None
    return Head(
        task=task,
        classes=state.classes,
        label_mean=state.label_mean,
        label_std=state.label_std,
    )
