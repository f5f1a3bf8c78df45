"""How several training processes share the model (``train.strategy``).

``ddp``   every process holds the whole model; DistributedDataParallel averages the gradients.
``fsdp``  PyTorch's FSDP2 ``fully_shard``: each top-level block of the model, then the model, is
          sharded over the processes (parameters, gradients and optimizer state), gathered
          block by block for forward and backward; for models that do not fit one device.
``pipeline``  the model's layers cut into stages, one per process (``pipeline.py``).

The loop speaks to each through ``Strategy``: wrap the model, learn from a batch, keep a
non-final accumulation micro-batch's gradients local, clip, and take or load the full
(unsharded) model and optimizer states, so checkpoints, best weights and the packaged model are
the same plain state dicts whatever the strategy, and a checkpoint resumes on any number of
processes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager as ContextManager
from contextlib import contextmanager, nullcontext
from typing import Any, Protocol

import torch
from torch import nn

from pipeline_steps.steps.train.data import TensorSet
from pipeline_steps.steps.train.distributed import Processes
from pipeline_steps.steps.train.heads import Head
from pipeline_steps.steps.train.precision import Precision
from pipeline_steps.steps.train.step import clip_grad_norm, learn

log = logging.getLogger(__name__)


class Strategy(Protocol):
    @property
    def sharded(self) -> bool:
        """Whether the model is split over the processes: its forward is then a collective,
        and its whole state exists only when gathered."""
        ...

    @property
    def data(self) -> Processes:
        """The processes as the data layout sees them: which share of the rows this one reads
        (a pipeline's stages read the same)."""
        ...

    @property
    def counts_rows(self) -> bool:
        """Whether this process's training loss and rows enter the sums over the ranks."""
        ...

    def wrap(self, model: nn.Module) -> nn.Module:
        """The module the loop runs forward and backward through (``model`` shared)."""
        ...

    def own(self, model: nn.Module, wrapped: nn.Module) -> nn.Module:
        """The module whose parameters this process trains and whose states go through
        ``model_state``: ``model``, or a pipeline's stage."""
        ...

    def learn(
        self,
        wrapped: nn.Module,
        head: Head,
        batch: TensorSet,
        accumulation: float,
        precision: Precision,
    ) -> torch.Tensor:
        """Forward and backward of one micro-batch (``step.learn``); its mean loss."""
        ...

    def local_gradients(self, wrapped: nn.Module) -> ContextManager[Any]:
        """Within it, backward keeps gradients on this process (a non-final micro-batch)."""
        ...

    def clip(self, parameters: list[nn.Parameter], max_norm: float) -> None:
        """Scale the gradients to a global L2 norm of at most ``max_norm``."""
        ...

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The full model state on the CPU (every process calls it)."""
        ...

    def optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> Any:
        """The full optimizer state (every process calls it)."""
        ...

    def load(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        model_state: dict[str, torch.Tensor],
        optimizer_state: Any,
    ) -> None:
        """Load full states written by ``model_state`` / ``optimizer_state``."""
        ...


class DataParallel:
    """``ddp``: DistributedDataParallel with several processes, the model itself with one."""

    sharded = False

    def __init__(self, processes: Processes) -> None:
        self._processes = processes

    @property
    def data(self) -> Processes:
        return self._processes

    @property
    def counts_rows(self) -> bool:
        return True

    def wrap(self, model: nn.Module) -> nn.Module:
        if not self._processes.distributed:
            return model
        from torch.nn.parallel import DistributedDataParallel

        ids = [self._processes.local_rank] if self._processes.use_cuda else None
        return DistributedDataParallel(model, device_ids=ids)

    def own(self, model: nn.Module, wrapped: nn.Module) -> nn.Module:
        return model

    def learn(
        self,
        wrapped: nn.Module,
        head: Head,
        batch: TensorSet,
        accumulation: float,
        precision: Precision,
    ) -> torch.Tensor:
        return learn(wrapped, head, batch, accumulation, precision)

    def local_gradients(self, wrapped: nn.Module) -> ContextManager[Any]:
        no_sync = getattr(wrapped, "no_sync", None)
        return no_sync() if no_sync is not None else nullcontext()

    def clip(self, parameters: list[nn.Parameter], max_norm: float) -> None:
        clip_grad_norm(parameters, max_norm)

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return model.state_dict()

    def optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> Any:
        return optimizer.state_dict()

    def load(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        model_state: dict[str, torch.Tensor],
        optimizer_state: Any,
    ) -> None:
        model.load_state_dict(model_state)
        optimizer.load_state_dict(optimizer_state)


class FullySharded(DataParallel):
    """``fsdp``: FSDP2 over every process; one process trains the model unsharded, as ``ddp``,
    its states taken and loaded the same way as sharded ones."""

    @property
    def sharded(self) -> bool:  # type: ignore[override]
        return self._processes.distributed

    def wrap(self, model: nn.Module) -> nn.Module:
        from torch.distributed.fsdp import fully_shard

        if not self.sharded:
            return super().wrap(model)
        blocks = _blocks(model)
        for block in blocks:
            fully_shard(block)
        fully_shard(model)
        log.info(
            "fsdp: %d blocks and the model sharded over %d processes",
            len(blocks),
            self._processes.world_size,
        )
        return model

    def local_gradients(self, wrapped: nn.Module) -> ContextManager[Any]:
        return _no_gradient_sync(wrapped) if self.sharded else super().local_gradients(wrapped)

    def clip(self, parameters: list[nn.Parameter], max_norm: float) -> None:
        if not self.sharded:
            super().clip(parameters, max_norm)
            return
        # sharded gradients: the library's clip all-reduces the norm over the shards
        torch.nn.utils.clip_grad_norm_(parameters, max_norm, foreach=True)

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        state = get_model_state_dict(model, options=_full())
        return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}

    def optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> Any:
        """Keyed by parameter name (not position), so it loads on any sharding."""
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return get_optimizer_state_dict(model, optimizer, options=_full())

    def load(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        model_state: dict[str, torch.Tensor],
        optimizer_state: Any,
    ) -> None:
        """Every process holds the full states (each reads the checkpoint) and keeps its
        shard of them."""
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(
            model,
            optimizer,
            model_state_dict=dict(model_state),
            optim_state_dict=optimizer_state,
            options=_full(),
        )


def _blocks(model: nn.Module) -> list[nn.Module]:
    """The units sharded one by one: the model's children that hold parameters, and the layers
    of a child that is a list or sequence of blocks (a Transformer's layers)."""
    blocks: list[nn.Module] = []
    for child in model.children():
        if not any(True for _ in child.parameters()):
            continue
        layers = list(child.children()) if isinstance(child, nn.ModuleList) else []
        blocks.extend(layers or [child])
    return blocks


def _full() -> Any:
    """Whole tensors on the CPU; gathered on rank 0 alone when sharded."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True)


@contextmanager
def _no_gradient_sync(model: nn.Module) -> Iterator[None]:
    model.set_requires_gradient_sync(False)  # type: ignore[operator]
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)  # type: ignore[operator]
