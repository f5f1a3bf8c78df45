"""What one training job holds: its processes, nodes, GPUs and memory, from the domain's
settings and the run's own form values, checked against what the domain can run and its team's
quota.

A job asks for resources through the training form (``trainyard submit --set nodes=4``, the
trigger form's *Resources*): processes per node, and on Kubernetes nodes, GPUs per node and the
memory of each training pod. They reach every step as ``--set`` (the settings loader checks
them), the training's torchrun command and pods as the run's rendered templates
(:mod:`pipeline_steps.orchestration.runners`), the training Job's size when its task runs
(:mod:`pipeline_steps.orchestration.training_job`), and the GPU pool's slots when the run's
task instances are made (:mod:`pipeline_steps.orchestration.policy`, through
:func:`run_gpu_slots`).

Light to import: no Airflow (the scheduler's policy hook and ``trainyard submit`` use it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

from pipeline_steps.core.settings import Settings, load_settings
from pipeline_steps.orchestration.params import overrides_of
from pipeline_steps.orchestration.pools import step_gpus


class ResourcesRefused(ValueError):
    """The job asks for what its domain cannot run or its team's quota can never hold."""


@dataclass(frozen=True)
class Resources:
    """What one job holds while it trains."""

    processes: int
    nodes: int
    gpus: int
    """Over every node."""
    memory: str
    """Each training pod's memory limit (Kubernetes); empty locally."""

    def words(self) -> str:
        memory = f", {self.memory} memory per node" if self.memory else ""
        return f"{self.processes} process(es) x {self.nodes} node(s), {self.gpus} GPU(s){memory}"


def resources(settings: Settings) -> Resources:
    """A run's resources under ``settings`` (the domain's with the run's form values): on
    Kubernetes its nodes, their GPUs and each pod's memory limit, a process per GPU (or
    ``train.nproc_per_node`` without); locally one node and, on CUDA, a GPU a process."""
    processes = settings.train.nproc_per_node
    if settings.orchestration.runtime == "kubernetes":
        k8s = settings.kubernetes
        nodes = k8s.train_nodes
        return Resources(
            k8s.train_gpus or processes,
            nodes,
            step_gpus(settings, nodes),
            k8s.train_memory_limit or k8s.memory_limit,
        )
    return Resources(processes, 1, step_gpus(settings, 1), "")


def with_form(settings: Settings, params: Mapping[str, Any], config: str | None) -> Settings:
    """``settings`` (a domain's, loaded from ``config`` under the deployment's) with the form's
    values in ``params`` that differ from its defaults, as the run's steps load them, still
    under the deployment's quotas; ``SettingsError`` as the loader raises it."""
    from pipeline_steps.core.deployment import under_deployment

    changed = overrides_of(dict(params), settings)
    if not changed:
        return settings
    return under_deployment(with_changes(config, changed), settings)


def with_changes(
    config: str | PathLike[str] | None, changed: Sequence[tuple[str, Any, Any]]
) -> Settings:
    """The settings of ``config`` with ``changed``'s ``(setting, value, default)`` over them,
    as the run's steps get them (``--set``); ``SettingsError`` as the loader raises it."""
    return load_settings(config, overrides=[f"{s}={json.dumps(v)}" for s, v, _ in changed])


def check_resources(domain: Settings, run: Settings) -> Resources:
    """The run's resources (``run``: the ``domain``'s settings with the run's form values),
    or ``ResourcesRefused`` naming the form field when the domain cannot run them (a job's
    nodes change only a multi-node training, GPUs only a GPU one) or its team's quota could
    never hold them."""
    asked, configured = run.kubernetes, domain.kubernetes
    if run.orchestration.runtime == "kubernetes":
        if configured.train_nodes == 1 and asked.train_nodes != 1:
            raise ResourcesRefused(
                f"nodes (kubernetes.train_nodes) {asked.train_nodes} is refused: the domain "
                "trains in one pod (kubernetes.train_nodes: 1 in its settings); set it there "
                "to the most nodes its jobs may ask for, which makes its training an Indexed Job"
            )
        if configured.train_nodes > 1 and asked.train_nodes < 2:
            raise ResourcesRefused(
                f"nodes (kubernetes.train_nodes) {asked.train_nodes} is refused: the domain "
                "trains as a Job of several pods; a job of it takes at least 2"
            )
        if configured.train_gpus > 0 and asked.train_gpus == 0:
            raise ResourcesRefused(
                "gpus_per_node (kubernetes.train_gpus) 0 is refused: the domain trains on GPU "
                "nodes, a process per GPU; a job of it takes at least 1 per node"
            )
        if configured.train_gpus == 0 and asked.train_gpus > 0:
            raise ResourcesRefused(
                f"gpus_per_node (kubernetes.train_gpus) {asked.train_gpus} is refused: the "
                "domain's training pods go to CPU nodes (kubernetes.train_gpus: 0 in its "
                "settings, with the node selector and tolerations of its nodes)"
            )
    held = resources(run)
    quota = run.orchestration.quotas.get(run.domain.team)
    if quota is None:
        return held
    team, where = run.domain.team, f"orchestration.quotas.{run.domain.team}"
    if held.gpus > quota.gpus:
        raise ResourcesRefused(
            f"the job holds {held.gpus} GPU(s) ({held.words()}), but team {team}'s quota "
            f"{where}.gpus is {quota.gpus}: it could never start"
        )
    if held.nodes > quota.nodes:
        raise ResourcesRefused(
            f"the job runs on {held.nodes} node(s), but team {team}'s quota {where}.nodes is "
            f"{quota.nodes}"
        )
    return held


# -- the GPU pool's slots of a run, for the scheduler's policy hook -------------------------------

_DOMAINS: dict[str, tuple[float, Settings, str]] = {}
"""A domain's settings by training DAG id: (its file's modification time, settings, file)."""


def run_gpu_slots(dag_id: str, conf: Mapping[str, Any] | None) -> int | None:
    """The GPU pool slots the train task of a run of ``dag_id`` with ``conf`` takes: its GPUs
    over every node under the domain's settings with the run's form values; None for a DAG of
    no known domain, or a run asking nothing of its own (the task keeps its slots)."""
    if not conf:
        return None
    found = _domain_of(dag_id)
    if found is None:
        return None
    settings, config = found
    try:
        run = with_form(settings, conf, config)
    except ValueError:  # the trigger task refuses the run, naming the field
        return None
    return step_gpus(run, run.kubernetes.train_nodes)


def _domain_of(dag_id: str) -> tuple[Settings, str] | None:
    """The settings (and their file) of the domain whose training DAG is ``dag_id``, read
    again when the file changed."""
    from pipeline_steps.core.deployment import domain_settings_files

    cached = _DOMAINS.get(dag_id)
    if cached is not None:
        stamp, settings, config = cached
        if _stamp(config) == stamp:
            return settings, config
    for domain in domain_settings_files(os.environ, refused=[]):
        config = str(domain.config) if domain.config else ""
        _DOMAINS[f"{domain.name}_training"] = (_stamp(config), domain.settings, config)
    cached = _DOMAINS.get(dag_id)
    return (cached[1], cached[2]) if cached is not None else None


def _stamp(config: str) -> float:
    try:
        return Path(config).stat().st_mtime if config else 0.0
    except OSError:
        return -1.0
