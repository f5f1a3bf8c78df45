"""The training processes: who this process is under torchrun, the process group, the few
collectives the loop needs, and the RNG states a checkpoint carries per rank.

Without torchrun's environment there is one process and every collective is the identity, so
the loop reads the same with one rank or many.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NotRequired, TypedDict, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from pipeline_steps.core.errors import StepError

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True, slots=True)
class Processes:
    """This process's place among the training processes and the device it trains on."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def master(self) -> bool:
        """Rank 0: the one process that logs, checkpoints and packages."""
        return self.rank == 0

    @property
    def use_cuda(self) -> bool:
        return self.device.type == "cuda"


ONE_PROCESS = Processes(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
"""A training of one process on the CPU."""


def detect(device: str) -> Processes:
    """Rank, world size and local rank from torchrun's ``RANK`` / ``WORLD_SIZE`` /
    ``LOCAL_RANK`` (one process without them), and the device for the ``train.device`` setting:
    ``auto`` takes this process's GPU when CUDA is available. Raises ``StepError`` for ``cuda``
    when no CUDA device is visible."""
    if device == "cuda" and not torch.cuda.is_available():
        raise StepError("train.device is 'cuda' but no CUDA device is visible")
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    processes = Processes(
        rank=int(os.environ.get("RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        local_rank=local_rank,
        device=torch.device(f"cuda:{local_rank}" if use_cuda else "cpu"),
    )
    if use_cuda:
        torch.cuda.set_device(processes.device)
    return processes


def join_process_group(processes: Processes, timeout_s: int) -> None:
    """Join the job's process group (nccl on GPUs, gloo on CPUs) through torchrun's store,
    under a prefix per attempt.

    After torchrun restarts the workers, the store still holds the previous attempt's keys
    (the old workers' addresses); a fresh prefix keeps the new group from connecting to them.
    """
    timeout = timedelta(seconds=timeout_s)
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        processes.world_size,
        is_master=processes.master and not agent_store,
        timeout=timeout,
    )
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group(
        "nccl" if processes.use_cuda else "gloo",
        store=dist.PrefixStore(f"trainyard/attempt-{attempt}", store),
        rank=processes.rank,
        world_size=processes.world_size,
        timeout=timeout,
    )


def leave_process_group() -> None:
    """Wait for every rank, then leave the group."""
    dist.barrier()
    dist.destroy_process_group()


def broadcast(value: T | None, processes: Processes) -> T:
    """Rank 0's ``value`` on every rank (the others pass None); picklable values only."""
    box: list[Any] = [value]
    if processes.distributed:
        dist.broadcast_object_list(box, src=0)
    result: T = box[0]
    return result


def gather(value: T, processes: Processes) -> list[T]:
    """Every rank's ``value``, in rank order, on every rank; picklable values only."""
    values: list[Any] = [value] * processes.world_size
    if processes.distributed:
        dist.all_gather_object(values, value)
    return values


def sum_over_ranks(sums: torch.Tensor, processes: Processes) -> torch.Tensor:
    """``sums`` added up over the ranks (``sums`` itself with one rank)."""
    if not processes.distributed:
        return sums
    # nccl reduces GPU tensors only; gloo takes them where they are
    sums = sums.to(processes.device)
    dist.all_reduce(sums)
    return sums


class RngState(TypedDict):
    """One process's random generators: torch's CPU one, NumPy's global one, Python's, and the
    process's own GPU's where CUDA is in use."""

    torch: torch.Tensor
    numpy: Any
    """``np.random.get_state()``: the legacy tuple form."""
    python: tuple[Any, ...]
    cuda: NotRequired[torch.Tensor]


def get_rng_state() -> RngState:
    state = RngState(
        torch=torch.get_rng_state(), numpy=np.random.get_state(), python=random.getstate()
    )
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        # this process's own GPU only: reading every device's state would open a CUDA
        # context on each GPU of the node from every rank
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: RngState) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
