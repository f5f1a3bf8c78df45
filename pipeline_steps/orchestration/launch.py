"""The one command that runs a step, for every runtime: a local subprocess, a step's pod, the
pods of a training Job (fixed-size or elastic), a tuning trial and ``trainyard replay``'s
training.

Whether a step goes through torchrun, with how many processes and which rendezvous, is decided
here from the step's declaration (``distributed``, :mod:`pipeline_steps.core.step_registry`) and
the runtime's settings; the steps themselves know nothing of their launch. No Airflow, and light
to import (DAG files parse through it, replay builds its training command here).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

from pipeline_steps.core.settings import Settings
from pipeline_steps.core.step_registry import Step, step

TRAIN_SERVICE = "trainyard-train"
"""The headless Kubernetes Service of a multi-node training Job: its pods' DNS names, and the
rendezvous endpoint (pod 0) of a fixed-size Job."""

RENDEZVOUS_STORE = "trainyard-rendezvous"
"""The Service of an elastic training Job's rendezvous store (a Deployment of its own), which
outlives any training pod."""


def step_argv(which: Step | str, settings: Settings, run_args: Sequence[str]) -> list[str]:
    """The command of step ``which`` (a :class:`Step` or its name), identical for every runtime:
    ``trainyard step <name> <run_args>``, under torchrun for a ``distributed`` step. ``run_args``
    follow the step's name (run id, logical date, trigger, ``--set``). Without GPUs, torchrun
    starts as many processes as the step is told ``train.nproc_per_node``: a ``--set`` of it in
    ``run_args`` (the trigger form's value, a Jinja template the task renders) wins over the
    settings file's. ``StepError`` for an unknown step name."""
    spec = step(which)
    argv = ["trainyard", "step", spec.name, *run_args]
    if not spec.distributed:
        return argv
    return [*torchrun_launch(settings, run_args), "--no-python", *argv]


def torchrun_launch(settings: Settings, run_args: Sequence[str] = ()) -> list[str]:
    """torchrun and its options for a distributed step under ``settings``' runtime: one GPU
    node (a process per GPU), a fixed-size Job of ``kubernetes.train_nodes`` pods rendezvousing
    at pod 0, an elastic Job whose agents are clients of the rendezvous store, or one machine
    (``train.nproc_per_node`` processes). A ``--set`` in ``run_args`` of the GPUs per node, the
    nodes or the processes (a job's own, the trigger form's template) comes first."""
    k8s = settings.kubernetes
    on_kubernetes = settings.orchestration.runtime == "kubernetes"
    processes: int | str = (
        _set_value(run_args, "kubernetes.train_gpus") or k8s.train_gpus
        if on_kubernetes and k8s.train_gpus
        else _set_value(run_args, "train.nproc_per_node") or settings.train.nproc_per_node
    )
    # a job's own number of nodes (the form's, rendered when the task runs) over the settings'
    nodes = _set_value(run_args, "kubernetes.train_nodes") or k8s.train_nodes
    if on_kubernetes and k8s.elastic:
        # Every agent is a client of the store (none hosts it), so losing any pod loses no
        # rendezvous; ranks come from the rendezvous, not from the pod's index.
        launch = [
            f"--nnodes={k8s.min_nodes}:{nodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={RENDEZVOUS_STORE}:{k8s.rendezvous_port}",
            "--rdzv-id=$(TRAINYARD_JOB_NAME)",
            "--rdzv-conf=is_host=false",
        ]
    elif on_kubernetes and k8s.train_nodes > 1:
        # Kubernetes expands $(VAR) from the container's environment (the training Job's).
        endpoint = f"$(TRAINYARD_JOB_NAME)-0.{TRAIN_SERVICE}:{k8s.rendezvous_port}"
        launch = [
            f"--nnodes={nodes}",
            "--node-rank=$(JOB_COMPLETION_INDEX)",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}",
            "--rdzv-id=$(TRAINYARD_JOB_NAME)",
        ]
    else:
        launch = ["--standalone", "--nnodes=1"]
    return [
        "torchrun",
        *launch,
        f"--nproc-per-node={processes}",
        f"--max-restarts={settings.train.max_restarts}",
    ]


def _set_value(run_args: Sequence[str], key: str) -> str | None:
    """The last ``--set key=value`` of ``run_args``, as written (``None`` without one)."""
    found = None
    for flag, value in pairwise(run_args):
        if flag == "--set" and value.startswith(f"{key}="):
            found = value.partition("=")[2]
    return found


def executable(name: str) -> str:
    """A console script beside the running interpreter (its venv's ``bin/``), else on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name) or name


def local_argv(argv: Sequence[str]) -> list[str]:
    """A step's command as this machine runs it: the program and, under ``torchrun
    --no-python``, the console script it starts, resolved by :func:`executable`."""
    local = [executable(argv[0]), *argv[1:]]
    if "--no-python" in local:
        index = local.index("--no-python") + 1
        local[index] = executable(local[index])
    return local
