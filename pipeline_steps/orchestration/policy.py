"""trainyard's Airflow cluster policy: a submitted job's priority orders all of its tasks.

A training run submitted with a priority (the trigger form's ``priority``, ``trainyard submit
--priority``) carries it in its conf, and one asking for its own processes, nodes or GPUs per node
their values: its train task takes as many slots of the GPU pool as the job's GPUs
(:func:`pipeline_steps.orchestration.job_resources.run_gpu_slots`, from the domain's settings with
the run's values), not the settings' number counted when the DAG was parsed. Airflow's scheduler
starts the waiting task of highest ``priority_weight`` first in each pool, whatever DAG it belongs
to, so giving every task of the run that weight puts the whole job ahead of lower ones waiting for
the same slots (the team's training pool, its GPU pool, its worker pool). Runs without it (the cron,
a drift event, a backfill) keep their tasks' own weights (``orchestration.train_priority`` for
training).

Airflow loads the hook through the ``airflow.policy`` entry point of the installed package, in the
scheduler, where task instances are created: it reads only the run it is given and the domains'
settings files (no database access, as the hook must). Airflow marks its mutation hook as present
only when an ``airflow_local_settings`` module defines one, and skips a hook it believes absent when
it creates a run's task instances; loading this module marks it present (:func:`_mark_present`), so
a deployment's own ``airflow_local_settings`` stays free for its own policies.
"""

from __future__ import annotations

from typing import Any

from airflow.policies import hookimpl

from pipeline_steps.orchestration.job_resources import run_gpu_slots
from pipeline_steps.orchestration.params import PRIORITY

TRAINING_SUFFIX = "_training"
"""The DAGs whose runs are jobs: each domain's ``<name>_training``."""


def job_priority(dag_id: str, conf: Any) -> int | None:
    """The priority a run of ``dag_id`` with ``conf`` was submitted with; None for a run of
    another DAG, or one without a whole positive number of it."""
    if not dag_id.endswith(TRAINING_SUFFIX) or not isinstance(conf, dict):
        return None
    value = conf.get(PRIORITY)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


TRAIN_TASKS = ("train", "train.job")
"""The task that holds a training's GPUs: one pod or process, or a multi-node training's Job."""


@hookimpl
def task_instance_mutation_hook(task_instance: Any, dag_run: Any) -> None:
    """Give each task of a submitted job its priority, and its train task as many slots of the
    GPU pool as the job's GPUs (see the module's doc)."""
    if dag_run is None:
        return
    dag_id, conf = str(dag_run.dag_id), getattr(dag_run, "conf", None)
    priority = job_priority(dag_id, conf)
    if priority is not None:
        task_instance.priority_weight = priority
    if dag_id.endswith(TRAINING_SUFFIX) and getattr(task_instance, "task_id", "") in TRAIN_TASKS:
        slots = run_gpu_slots(dag_id, conf if isinstance(conf, dict) else None)
        if slots:  # a job without GPUs keeps the task's pool and slot
            task_instance.pool_slots = slots


def _mark_present() -> None:
    """Tell Airflow a task instance mutation hook is registered (see the module's doc)."""
    import airflow.settings

    airflow.settings.task_instance_mutation_hook.is_noop = False  # type: ignore[attr-defined]


_mark_present()
