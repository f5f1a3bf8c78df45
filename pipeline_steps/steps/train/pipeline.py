"""``train.strategy: pipeline``: the model's layers cut into consecutive stages, one per process.

The processes make pipelines of ``train.pipeline_stages`` (0: one pipeline over every process):
rank ``r`` is stage ``r % S`` of pipeline ``r // S``. A model that can be cut says how
(``pipeline_stages(count)``, as :class:`~pipeline_steps.steps.train.models.FTTransformer`
does); each process keeps its stage and drops the others' weights. Every stage of a pipeline
reads the same rows, its pipeline's share: to the data layout the pipelines are the processes,
so a checkpoint resumes on any number of pipelines or stages. Each batch is cut into
``train.pipeline_microbatches`` micro-batches that flow through the stages under
``torch.distributed.pipelining``'s ``1f1b`` or ``gpipe`` schedule; the last stage computes the
loss, each stage's gradients are averaged over the pipelines, and the gradient norm is clipped
over the whole model.

The states go through the model's own parameter names: a stage's weights and optimizer state
are gathered on rank 0 as the unsplit model's (the checkpoint, the best epoch, the packaged
model), and every stage loads its share of them.

``torch.distributed.pipelining`` sizes its buffers by the first micro-batch it sees, so a batch
is cut into micro-batches of equal size (as many as ``train.pipeline_microbatches`` that divide
it), and a stage and schedule are made for each batch size that comes (the training batch, the
validation batches, the last one shorter), and kept.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager as ContextManager
from contextlib import contextmanager
from itertools import chain
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from pipeline_steps.core.errors import StepError
from pipeline_steps.steps.train.data import TensorSet
from pipeline_steps.steps.train.distributed import Processes
from pipeline_steps.steps.train.heads import Head
from pipeline_steps.steps.train.precision import Precision
from pipeline_steps.steps.train.strategy import DataParallel

log = logging.getLogger(__name__)


class Pipelined(DataParallel):
    """``pipeline``: stages over the processes, the pipelines sharing the rows; one process
    trains the model whole, as ``ddp``."""

    def __init__(self, processes: Processes, stages: int, microbatches: int, schedule: str) -> None:
        super().__init__(processes)
        world = processes.world_size
        self.stages = stages or world
        if world % self.stages:
            raise StepError(
                f"train.pipeline_stages is {self.stages}, but {world} training processes "
                "cannot make whole pipelines of it; start a multiple of it "
                "(train.nproc_per_node x nodes) or set it to 0 (one pipeline over every process)"
            )
        self.pipelines = world // self.stages
        self.stage = processes.rank % self.stages
        self.microbatches = microbatches
        self.schedule = schedule
        self._pipeline_group: Any = None
        self._replica_group: Any = None
        self._local = False
        self._loss = _SummedLoss()

    @property
    def sharded(self) -> bool:  # type: ignore[override]
        return self.stages > 1

    @property
    def data(self) -> Processes:
        """The data layout's view: this process's pipeline among the pipelines."""
        procs = self._processes
        return Processes(
            rank=procs.rank // self.stages,
            world_size=self.pipelines,
            local_rank=procs.local_rank,
            device=procs.device,
        )

    @property
    def counts_rows(self) -> bool:
        """The last stage, which computes the loss, counts its pipeline's rows."""
        return self.stage == self.stages - 1

    def wrap(self, model: nn.Module) -> nn.Module:
        if not self.sharded:
            return super().wrap(model)
        cut = getattr(model, "pipeline_stages", None)
        if cut is None:
            raise StepError(
                f"train.strategy: pipeline needs a model that can be cut into stages (one with "
                f"pipeline_stages(count), as ft_transformer has); {type(model).__name__} cannot"
            )
        try:
            stages: list[nn.Module] = cut(self.stages)
        except ValueError as exc:
            raise StepError(f"train.pipeline_stages: {exc}") from exc
        self._make_groups()
        names = _names(model)
        own = stages[self.stage]
        full = {local: names[id(t)] for local, t in _tensors(own)}
        for index, other in enumerate(stages):
            if index != self.stage:
                other.to("meta")  # this process holds only its stage's weights
        log.info(
            "pipeline: stage %d of %d (%d parameter tensors), %d pipeline(s), %s schedule, "
            "%d micro-batches per step",
            self.stage,
            self.stages,
            sum(1 for _ in own.parameters()),
            self.pipelines,
            self.schedule,
            self.microbatches,
        )
        return Stage(own, full, self)

    def own(self, model: nn.Module, wrapped: nn.Module) -> nn.Module:
        return wrapped if self.sharded else model

    def local_gradients(self, wrapped: nn.Module) -> ContextManager[Any]:
        return self._no_sync() if self.sharded else super().local_gradients(wrapped)

    def learn(
        self,
        wrapped: nn.Module,
        head: Head,
        batch: TensorSet,
        accumulation: float,
        precision: Precision,
    ) -> torch.Tensor:
        """One batch through the pipeline, forward and backward, its micro-batches' losses
        summed and divided by ``accumulation`` x rows (the mean, as ``step.learn``); the
        batch's mean loss on every stage of the pipeline."""
        if not self.sharded:
            return super().learn(wrapped, head, batch, accumulation, precision)
        assert isinstance(wrapped, Stage)
        scale = 1.0 / (accumulation * len(batch))
        self._loss.head, self._loss.scale = head, scale
        losses: list[torch.Tensor] = []
        schedule = self._schedule(wrapped, len(batch), training=True)
        with precision.autocast():
            schedule.step(*self._inputs(batch), **self._target(batch, losses))
        mean = torch.zeros((), device=self._processes.device)
        if self.counts_rows:
            mean = torch.stack([part.detach() for part in losses]).sum() / scale / len(batch)
        self._from_last_stage(mean)
        if not self._local and self.pipelines > 1:
            self._average_over_pipelines(wrapped)
        return mean

    def forward(self, wrapped: Stage, codes: torch.Tensor, numeric: torch.Tensor) -> Any:
        """The model's outputs for a batch (no gradients) on the last stage; None on the
        others."""
        schedule = self._schedule(wrapped, len(codes), training=False)
        outputs = schedule.eval(*((codes, numeric) if self.stage == 0 else ()))
        return outputs if self.counts_rows else None

    def clip(self, parameters: list[nn.Parameter], max_norm: float) -> None:
        """The global norm over every stage of the pipeline (the pipelines' gradients are the
        same once averaged)."""
        if not self.sharded:
            super().clip(parameters, max_norm)
            return
        grads = [p.grad for p in parameters if p.grad is not None]
        squares = torch.zeros((), dtype=torch.float32, device=self._processes.device)
        if grads:
            squares = torch.stack(torch._foreach_norm(grads)).square().sum()
        dist.all_reduce(squares, group=self._pipeline_group)
        total = squares.sqrt()
        if grads:
            torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))

    def model_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The unsplit model's state, gathered on rank 0 (the others get none)."""
        if not self.sharded:
            return super().model_state(model)
        assert isinstance(model, Stage)
        local = {model.full[k]: v.detach().cpu() for k, v in model.stage.state_dict().items()}
        merged: dict[str, torch.Tensor] = {}
        for part in self._gathered(local):
            merged.update(part)
        return merged

    def optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> Any:
        """``{"state": {name: ...}, "param_groups": [...]}`` keyed by the unsplit model's
        parameter names, gathered on rank 0 (the others get None)."""
        if not self.sharded:
            return super().optimizer_state(model, optimizer)
        assert isinstance(model, Stage)
        names = model.parameter_names()
        own = optimizer.state_dict()
        local = {
            "state": {names[i]: value for i, value in own["state"].items()},
            "param_groups": [
                {**group, "params": [names[i] for i in group["params"]]}
                for group in own["param_groups"]
            ],
        }
        parts = self._gathered(local)
        if not parts:
            return None
        groups = [dict(g) for g in parts[0]["param_groups"]]
        for index, group in enumerate(groups):
            group["params"] = [n for part in parts for n in part["param_groups"][index]["params"]]
        state = {name: value for part in parts for name, value in part["state"].items()}
        return {"state": state, "param_groups": groups}

    def load(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        model_state: dict[str, torch.Tensor],
        optimizer_state: Any,
    ) -> None:
        """Each stage keeps its share of the unsplit model's states."""
        if not self.sharded:
            super().load(model, optimizer, model_state, optimizer_state)
            return
        assert isinstance(model, Stage)
        model.stage.load_state_dict({k: model_state[v] for k, v in model.full.items()})
        names = model.parameter_names()
        position = {name: i for i, name in enumerate(names)}
        groups = [
            {**group, "params": [position[n] for n in group["params"] if n in position]}
            for group in optimizer_state["param_groups"]
        ]
        state = {position[n]: v for n, v in optimizer_state["state"].items() if n in position}
        optimizer.load_state_dict({"state": state, "param_groups": groups})

    # -- the pipeline's pieces ---------------------------------------------------------------

    def _make_groups(self) -> None:
        """The process groups of the pipelines (consecutive ranks) and of each stage's
        replicas (one rank of each pipeline); every process makes every group, in order."""
        if self.pipelines == 1:
            return
        world, size = self._processes.world_size, self.stages
        pipeline = self._processes.rank // size
        for p in range(self.pipelines):
            group = dist.new_group(list(range(p * size, (p + 1) * size)))
            if p == pipeline:
                self._pipeline_group = group
        for s in range(size):
            group = dist.new_group(list(range(s, world, size)))
            if s == self.stage:
                self._replica_group = group

    def _schedule(self, wrapped: Stage, rows: int, *, training: bool) -> Any:
        """The stage and schedule for batches of ``rows`` (a training one, with the loss, or
        forward only), made the first time such a batch comes."""
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        key = (rows, training)
        made = wrapped.schedules.get(key)
        if made is not None:
            return made
        parts = _parts(rows, self.microbatches)
        stage = PipelineStage(
            wrapped.stage,
            self.stage,
            self.stages,
            self._processes.device,
            group=self._pipeline_group,
        )
        kind = Schedule1F1B if training and self.schedule == "1f1b" else ScheduleGPipe
        if kind is Schedule1F1B and parts < self.stages:
            kind = ScheduleGPipe  # a batch with fewer rows than stages
        made = kind(stage, parts, loss_fn=self._loss if training else None, scale_grads=False)
        wrapped.schedules[key] = made
        return made

    def _inputs(self, batch: TensorSet) -> tuple[torch.Tensor, ...]:
        return (batch.codes, batch.numeric) if self.stage == 0 else ()

    def _target(self, batch: TensorSet, losses: list[torch.Tensor]) -> dict[str, Any]:
        return {"target": batch.labels, "losses": losses} if self.counts_rows else {}

    def _from_last_stage(self, value: torch.Tensor) -> None:
        """``value`` of the pipeline's last stage on each of its stages, in place."""
        last = self.stages - 1
        if self._pipeline_group is None:
            dist.broadcast(value, src=last)
            return
        source = dist.get_global_rank(self._pipeline_group, last)
        dist.broadcast(value, src=source, group=self._pipeline_group)

    def _average_over_pipelines(self, wrapped: Stage) -> None:
        grads = [p.grad for p in wrapped.parameters() if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self._replica_group)
        flat /= self.pipelines
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()

    def _gathered(self, value: Any) -> list[Any]:
        """The first pipeline's stages' ``value``, in stage order, on rank 0 (empty on the
        others)."""
        procs = self._processes
        parts: list[Any] | None = [None] * procs.world_size if procs.master else None
        dist.gather_object(value, parts, dst=0)
        return [] if parts is None else parts[: self.stages]

    @contextmanager
    def _no_sync(self) -> Iterator[None]:
        self._local = True
        try:
            yield
        finally:
            self._local = False


class _SummedLoss:
    """The last stage's loss of a micro-batch: the head's loss summed over its rows, times the
    step's ``scale`` (1 / (accumulation x the batch's rows)), so that the micro-batches'
    gradients add up to those of the batch's mean loss."""

    head: Head | None = None
    scale: float = 1.0

    def __call__(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        assert self.head is not None
        return self.head.loss(outputs.float(), labels, reduction="sum") * self.scale


class Stage(nn.Module):
    """This process's stage of the model as the loop trains it: its parameters, its states by
    the unsplit model's names (``full``: the stage's state-dict name → the model's), and a
    forward that runs the pipeline (the outputs on the last stage, None on the others)."""

    def __init__(self, stage: nn.Module, full: dict[str, str], pipeline: Pipelined) -> None:
        super().__init__()
        self.stage = stage
        self.full = full
        self.schedules: dict[tuple[int, bool], Any] = {}
        self._pipeline = [pipeline]  # not a submodule

    def parameter_names(self) -> list[str]:
        """The unsplit model's name of each parameter, in the optimizer's order."""
        return [self.full[name] for name, _ in self.stage.named_parameters()]

    def forward(self, codes: torch.Tensor, numeric: torch.Tensor) -> Any:
        return self._pipeline[0].forward(self, codes, numeric)


def _parts(rows: int, most: int) -> int:
    """Micro-batches for a batch of ``rows``: the most, up to ``most``, of equal size (a
    pipeline's buffers are sized by the first micro-batch)."""
    return max(n for n in range(1, min(most, rows) + 1) if rows % n == 0)


def _tensors(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Every state-dict tensor of ``module`` by name, the objects themselves."""
    yield from module.state_dict(keep_vars=True).items()


def _names(model: nn.Module) -> dict[int, str]:
    """The model's name of each of its parameters and buffers, by object."""
    named = chain(model.named_parameters(remove_duplicate=False), model.named_buffers())
    return {id(tensor): name for name, tensor in named}
