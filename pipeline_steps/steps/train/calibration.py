"""Temperature scaling: the trained classifier's confidence fitted on the validation rows.

A network trained to a low loss tends to be over-confident: its probabilities are pushed
towards 0 and 1 further than its accuracy warrants, which the holdout's log loss and
calibration error punish, and a plain logistic regression then beats it on them although it
ranks the rows worse. Dividing the logits by one temperature T > 0 (Guo et al. 2017) rescales
the confidence (a sigmoid's ranking and a softmax's most probable class stay). T is fitted after
training, on the rows the trainer held out for early stopping, by minimising the head's loss
of ``outputs / T`` (for the calibrated tasks the negative log-likelihood of the probabilities
the model gives); never on the holdout, which judges the model.

Rank 0 scores every validation row with the final model alone (under ``fsdp`` the gathered
plain model), so the fit does not depend on how many processes trained.
"""

from __future__ import annotations

import math

import torch

from pipeline_steps.core.manifests import Calibration
from pipeline_steps.steps.train.data import Preprocessor, TrainingTable, validation_batches
from pipeline_steps.steps.train.heads import Head
from pipeline_steps.steps.train.step import validation_batch_size

LOWEST, HIGHEST = 0.05, 20.0
"""The temperatures searched: far past any a trained network needs, and a bound keeps a
degenerate validation set (one class, all rows right) from driving T to 0 or infinity."""
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def validation_outputs(
    model: torch.nn.Module,
    table: TrainingTable,
    pre: Preprocessor,
    label: str,
    batch_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every validation row's outputs and label (float32, on the CPU), scored by ``model`` in
    eval mode on its own device without autocast, as the registered model predicts."""
    device = next(model.parameters()).device
    model.eval()
    outputs, labels = [], []
    with torch.no_grad():
        for batch in validation_batches(
            table, pre, label, batch_size=validation_batch_size(batch_size)
        ):
            batch = batch.to(device)
            scored = model(batch.codes, batch.numeric).float()
            if scored.dim() == 1:  # a model that returns [n] for one output
                scored = scored.unsqueeze(1)
            outputs.append(scored.cpu())
            labels.append(batch.labels.cpu())
    if not outputs:
        return torch.zeros((0, 1)), torch.zeros(0)
    return torch.cat(outputs), torch.cat(labels)


def mean_loss(head: Head, outputs: torch.Tensor, labels: torch.Tensor, temperature: float) -> float:
    """The head's mean loss of ``outputs / temperature`` (float64: the search compares values
    that differ in their fifth digit)."""
    scaled = outputs.double() / temperature
    return float(head.loss(scaled, labels.double(), reduction="sum")) / max(len(labels), 1)


def fit_temperature(
    head: Head, outputs: torch.Tensor, labels: torch.Tensor, tolerance: float = 1e-4
) -> Calibration:
    """The temperature in [``LOWEST``, ``HIGHEST``] that minimises the validation rows' mean
    loss: a golden-section search over log T (the loss is convex in 1/T, so it has one
    minimum there), to ``tolerance`` in log T. T = 1 is kept when the search finds nothing
    lower (no rows, or a model already calibrated), so calibrating never raises the loss."""
    rows = len(labels)
    before = mean_loss(head, outputs, labels, 1.0) if rows else float("nan")
    if rows == 0:
        return Calibration(
            temperature=1.0, val_log_loss_before=before, val_log_loss_after=before, rows=0
        )

    def loss(log_t: float) -> float:
        return mean_loss(head, outputs, labels, math.exp(log_t))

    low, high = math.log(LOWEST), math.log(HIGHEST)
    a, b = high - _GOLDEN * (high - low), low + _GOLDEN * (high - low)
    loss_a, loss_b = loss(a), loss(b)
    while high - low > tolerance:
        if loss_a <= loss_b:
            high, b, loss_b = b, a, loss_a
            a = high - _GOLDEN * (high - low)
            loss_a = loss(a)
        else:
            low, a, loss_a = a, b, loss_b
            b = low + _GOLDEN * (high - low)
            loss_b = loss(b)
    log_t, after = (a, loss_a) if loss_a <= loss_b else (b, loss_b)
    temperature = math.exp(log_t)
    if not after < before:
        temperature, after = 1.0, before
    return Calibration(
        temperature=temperature,
        val_log_loss_before=round(before, 6),
        val_log_loss_after=round(after, 6),
        rows=rows,
    )


def calibrate(
    model: torch.nn.Module,
    head: Head,
    table: TrainingTable,
    pre: Preprocessor,
    label: str,
    batch_size: int,
) -> Calibration:
    """The temperature of ``model`` (rank 0's final model) fitted on every validation row."""
    outputs, labels = validation_outputs(model, table, pre, label, batch_size)
    return fit_temperature(head, outputs, labels)
