"""Airflow's share of the GPUs: the pool of GPU slots and the priority of the tasks taking them.

The train task and each tuning trial take one slot of ``orchestration.gpu_pool`` per GPU they
use, so Airflow starts no more GPU work than the pool holds (without GPUs, a slot of the team's
training pool ``train-<team>`` when the team has a quota); when slots are short, the
scheduler starts the waiting task of highest priority first (training over tuning, rule
``absolute``: a task's own weight, whatever follows it). The pool itself is created where
Airflow is set up (:mod:`pipeline_steps.services.gpu_pool`).

Kept light: DAG parsing imports this (settings only).
"""

from __future__ import annotations

from typing import Any

from pipeline_steps.core.settings import Settings, SettingsError

TRIAL_TASK = "trial"
"""The tuning DAG's mapped trial task: a training that takes a slot as the train task does."""


def step_gpus(settings: Settings, nodes: int) -> int:
    """GPUs one run of the train step holds on ``nodes`` nodes: ``kubernetes.train_gpus`` per
    node in pods; as a local subprocess, ``train.nproc_per_node`` when ``train.device`` is
    ``cuda`` (one GPU per process), else none (``auto`` may find no GPU: it takes no slot)."""
    if settings.orchestration.runtime == "kubernetes":
        return settings.kubernetes.train_gpus * nodes
    return settings.train.nproc_per_node if settings.train.device == "cuda" else 0


def train_pool(settings: Settings) -> str:
    """The pool of the team's trainings, ``train-<team>``, sized by its quota's ``runs``
    (``orchestration.quotas``); empty for a domain whose team has no quota."""
    team = settings.domain.team
    return f"train-{team}" if team and team in settings.orchestration.quotas else ""


def gpu_task_args(
    settings: Settings, gpus: int, priority: int, training: bool = False
) -> dict[str, Any]:
    """The operator arguments of a task holding ``gpus`` GPUs at ``priority``: the GPU pool with
    one slot per GPU (Airflow's default pool when it holds none, or no pool is set). A
    ``training`` without GPUs (the train task, a tuning trial) takes a slot of its team's
    training pool (:func:`train_pool`) when the team has a quota. Raises ``SettingsError`` when
    the task needs more slots than the pool has: it would never start."""
    orch = settings.orchestration
    args: dict[str, Any] = {"priority_weight": priority, "weight_rule": "absolute"}
    trainings = train_pool(settings) if training else ""
    if gpus == 0 and trainings:
        return args | {"pool": trainings, "pool_slots": 1}
    if not orch.gpu_pool or gpus == 0:
        return args
    if gpus > orch.gpu_pool_slots:
        raise SettingsError(
            f"a training task holds {gpus} GPU(s) (kubernetes.train_gpus x train_nodes, or "
            f"train.nproc_per_node on local CUDA) but orchestration.gpu_pool_slots is "
            f"{orch.gpu_pool_slots}: it would wait for the pool {orch.gpu_pool!r} forever"
        )
    return args | {"pool": orch.gpu_pool, "pool_slots": gpus}
