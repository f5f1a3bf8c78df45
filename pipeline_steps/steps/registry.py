"""The steps by name and the one command that runs a step, for every caller.

``trainyard step <name>`` (:mod:`pipeline_steps.commands.cli`), ``trainyard replay``, the DAGs
(through :mod:`pipeline_steps.orchestration`), the tests and the benchmarks all find a step's
function and build its command here, so a step runs the same way wherever it is started. No
Airflow, and light to import (DAG files parse through it): only the settings at module level.
"""

from __future__ import annotations

import importlib
import shutil
import sys
from collections.abc import Callable, Sequence
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.settings import Settings

if TYPE_CHECKING:  # DAG files parse through this module: the lake (pyarrow) stays unloaded
    from pipeline_steps.core.context import RunContext
    from pipeline_steps.core.manifests import Manifest

# Each step imports heavy libraries (GX, Feast, torch, MLflow) of its own: load only the one run.
STEP_FUNCTIONS = {
    "ingest": "pipeline_steps.steps.ingest:ingest",
    "validate": "pipeline_steps.steps.validate:validate",
    "features": "pipeline_steps.steps.features:build_features",
    "train": "pipeline_steps.steps.train:train",
    "evaluate": "pipeline_steps.steps.evaluate:evaluate",
    "promote": "pipeline_steps.steps.promote:promote",
    # not a training step: the drift monitor's check of a day (<domain>_drift_monitor)
    "monitor": "pipeline_steps.steps.monitor:monitor",
    # the monitor's release of the staged candidate and rollback of a degraded champion
    "release": "pipeline_steps.steps.release:release",
}

TRAIN_SERVICE = "trainyard-train"
"""The headless Kubernetes Service of a multi-node training Job: its pods' DNS names, and the
rendezvous endpoint (pod 0) of a fixed-size Job."""

RENDEZVOUS_STORE = "trainyard-rendezvous"
"""The Service of an elastic training Job's rendezvous store (a Deployment of its own), which
outlives any training pod."""

StepFunction: TypeAlias = "Callable[[RunContext], Manifest | None]"
"""A step: the run context → the manifest it recorded (None on a training rank other than 0,
which records and prints nothing)."""


def step_function(name: str) -> StepFunction:
    """The step's function, imported on demand."""
    if name not in STEP_FUNCTIONS:
        raise StepError(f"unknown step {name!r}; steps: {', '.join(STEP_FUNCTIONS)}")
    module, _, function = STEP_FUNCTIONS[name].partition(":")
    step: StepFunction = getattr(importlib.import_module(module), function)
    return step


def step_argv(step: str, settings: Settings, run_args: Sequence[str]) -> list[str]:
    """The command of a step, identical for every runtime; ``train`` goes through torchrun.
    ``run_args`` follow ``trainyard step <step>`` (run id, logical date, trigger, ``--set``).
    Without GPUs, torchrun starts as many processes as the step is told
    ``train.nproc_per_node``: a ``--set`` of it in ``run_args`` (the trigger form's value, a
    Jinja template the task renders) wins over the settings file's."""
    argv = ["trainyard", "step", step, *run_args]
    if step != "train":
        return argv
    k8s = settings.kubernetes
    on_gpus = settings.orchestration.runtime == "kubernetes" and k8s.train_gpus
    processes: int | str = (
        k8s.train_gpus
        if on_gpus
        else _set_value(run_args, "train.nproc_per_node") or settings.train.nproc_per_node
    )
    if settings.orchestration.runtime == "kubernetes" and k8s.elastic:
        # Every agent is a client of the store (none hosts it), so losing any pod loses no
        # rendezvous; ranks come from the rendezvous, not from the pod's index.
        launch = [
            f"--nnodes={k8s.min_nodes}:{k8s.train_nodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={RENDEZVOUS_STORE}:{k8s.rendezvous_port}",
            "--rdzv-id=$(TRAINYARD_JOB_NAME)",
            "--rdzv-conf=is_host=false",
        ]
    elif settings.orchestration.runtime == "kubernetes" and k8s.train_nodes > 1:
        # Kubernetes expands $(VAR) from the container's environment (the training Job's).
        endpoint = f"$(TRAINYARD_JOB_NAME)-0.{TRAIN_SERVICE}:{k8s.rendezvous_port}"
        launch = [
            f"--nnodes={k8s.train_nodes}",
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
        "--no-python",
        *argv,
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
