"""The pieces of one optimisation step and of an epoch's validation, as the train loop uses them.

Public, so the training benchmark measures the loop's own step, not a copy of it:

- ``make_optimizer`` and ``make_schedule``: fused AdamW, linear warmup then cosine decay;
- ``learn``: forward and backward of one (micro-)batch, gradients accumulated, in the
  training's precision (``precision.py``);
- ``apply_gradients``: clip, optimizer step, schedule step, clear the gradients;
- ``validation_sums``: one rank's validation loss and the task's sums (the head's), summed over
  ranks by the loop; ``gpu_metrics``: peak memory and utilisation of an epoch.

A step of the loop is ``learn`` once per micro-batch, then ``apply_gradients`` once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import suppress

import torch

from pipeline_steps.core.usage import note_gpu_peak
from pipeline_steps.steps.train.data import (
    Preprocessor,
    TensorSet,
    TrainingTable,
    validation_batches,
)
from pipeline_steps.steps.train.heads import Head
from pipeline_steps.steps.train.precision import FP32, Precision


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW over ``model``'s parameters, fused: one kernel updates every parameter (on the CPU
    too), instead of a few small operations per parameter tensor."""
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, fused=True)


def warmup_cosine(warmup: int, total: int) -> Callable[[int], float]:
    """Learning-rate factor per step: linear warmup to 1 over ``warmup`` steps, then a cosine
    decay to 0 at step ``total``."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    return factor


def make_schedule(
    optimizer: torch.optim.Optimizer, warmup: int, total: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """The learning-rate schedule of ``optimizer``: ``warmup_cosine(warmup, total)``, stepped
    once per optimizer step."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(warmup, total))


def learn(
    model: torch.nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    batch: TensorSet,
    accumulation: float,
    precision: Precision = FP32,
) -> torch.Tensor:
    """Forward and backward of one batch (on the model's device), the forward under
    ``precision``'s autocast; its gradients are added to the accumulated ones, scaled by
    ``1 / accumulation`` (the micro-batches of a step; on a changed number of processes, the
    layout's ``loss_divisor``) and, under ``fp16``, by the loss scale. Returns the batch's mean
    loss, detached."""
    with precision.autocast():
        logits = model(batch.codes, batch.numeric)
    loss = loss_fn(logits.float(), batch.labels)
    precision.backward(loss / accumulation if accumulation != 1 else loss)
    return loss.detach()


def apply_gradients(
    parameters: list[torch.nn.Parameter],
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    clip: float,
    clipper: Callable[[list[torch.nn.Parameter], float], None] | None = None,
    precision: Precision = FP32,
) -> None:
    """Clip the accumulated gradients of ``parameters`` to a global norm of ``clip`` (0: no
    clipping) with ``clipper`` (default ``clip_grad_norm``; a sharded model's strategy passes
    its own), take an optimizer and a schedule step, clear the gradients. Under ``fp16`` the
    gradients are unscaled before clipping, and a step they overflowed in is skipped.

    ``parameters`` is a list made once (not a module walk per step): the model's parameters,
    in the optimizer's order.
    """
    if clip:
        precision.unscale(optimizer)
        (clipper or clip_grad_norm)(parameters, clip)
    precision.step(optimizer)
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)


def clip_grad_norm(parameters: list[torch.nn.Parameter], max_norm: float) -> None:
    """Scale the gradients so that their global L2 norm is at most ``max_norm``.

    The formula and result of ``torch.nn.utils.clip_grad_norm_``, in four multi-tensor kernels
    without its per-call grouping and checks: on a GPU a small model's step is bound by kernel
    launches, and the library call cost up to a tenth of it.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if grads:
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))


def validation_sums(
    model: torch.nn.Module,
    head: Head,
    table: TrainingTable,
    pre: Preprocessor,
    label: str,
    batch_size: int,
    device: torch.device,
    precision: Precision,
    rank: int,
    world_size: int,
    forwards: int = 0,
) -> torch.Tensor:
    """This rank's share of the validation rows scored by ``model`` (put in eval mode):
    ``[loss sum, rows, *the head's task sums]`` (float64, on the CPU), to be summed over the
    ranks before dividing.

    ``forwards``: at least this many forward passes, the surplus ones over the last batch and
    not counted: a sharded model's forward is a collective, so every rank makes as many as the
    rank with the most batches (``validation_batch_count``)."""
    model.eval()
    sums = torch.zeros(head.sums_width(), dtype=torch.float64)
    made, batch = 0, None
    with torch.no_grad():
        for batch in validation_batches(
            table,
            pre,
            label,
            batch_size=validation_batch_size(batch_size),
            rank=rank,
            world_size=world_size,
        ):
            batch = batch.to(device)
            with precision.autocast():
                outputs = model(batch.codes, batch.numeric)
            if outputs is not None:  # None: a pipeline stage before the last
                sums += head.validation_sums(outputs.float(), batch.labels).cpu()
            made += 1
        while made < forwards and batch is not None:
            with precision.autocast():
                model(batch.codes, batch.numeric)
            made += 1
    return sums


def validation_batch_size(batch_size: int) -> int:
    """Rows per validation batch: the training batch, at least 4,096."""
    return max(batch_size, 4096)


def gpu_metrics(device: torch.device) -> dict[str, float]:
    """Peak GPU memory since the last call (the counter is reset; the process's usage record
    keeps the highest) and, where NVML is available, utilisation."""
    peak = torch.cuda.max_memory_allocated(device)
    note_gpu_peak(torch.cuda.current_device() if device.index is None else device.index, peak)
    metrics = {"gpu_memory_peak_gib": peak / 2**30}
    torch.cuda.reset_peak_memory_stats(device)
    with suppress(Exception):  # without NVML: memory alone
        metrics["gpu_utilization_pct"] = float(torch.cuda.utilization(device))
    return metrics
