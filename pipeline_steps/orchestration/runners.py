"""The one runner factory: every pipeline step becomes a task the same way.

``runtime: local``      a task that runs the step's argv as a subprocess, streaming its output into
                        the task log, and returns the step's JSON manifest (its last stdout line).
``runtime: kubernetes`` a KubernetesPodOperator running the same argv in the step image; with
                        ``kubernetes.train_nodes`` > 1 the train step is an Indexed Job of that
                        many pods (KubernetesJobOperator) between the creation and removal of the
                        headless Service its torchrun rendezvous goes through (and, for an
                        elastic Job, the rendezvous store and disruption budget of
                        :mod:`pipeline_steps.orchestration.elastic`).

The train task and the tuning trials take GPU slots of an Airflow pool at their priority
(:mod:`pipeline_steps.orchestration.pools`).

Kept light: DAG parsing imports this, so nothing heavy is imported at module level. A step's
command comes from :mod:`pipeline_steps.orchestration.launch`, as for ``trainyard replay``; what
sets a step apart (its GPUs, torchrun, a Job on several nodes) from its declaration in
:mod:`pipeline_steps.core.step_registry` (``distributed``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator

from pipeline_steps.core import step_registry
from pipeline_steps.core.settings import (
    Settings,
    SettingsError,
    env_value,
    load_settings,
    settings_environment,
)
from pipeline_steps.core.step_registry import TRAIN, Step
from pipeline_steps.core.team_credentials import team_environment
from pipeline_steps.orchestration.elastic import (
    ELASTIC_POD_LABELS,
    disruption_budget,
    elastic_job_template,
    rendezvous_store,
    store_wait,
)
from pipeline_steps.orchestration.failures import step_failure
from pipeline_steps.orchestration.gauges import TrainingGauges, removed_at_end, training_gauges
from pipeline_steps.orchestration.launch import TRAIN_SERVICE, local_argv, step_argv
from pipeline_steps.orchestration.pools import gpu_task_args, step_gpus

RUN_ID = "{{ run_id }}"
LOGICAL_DATE = "{{ ds }}"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""The label by which Kueue admits a pod or Job through a team's LocalQueue."""
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
"""The label naming the WorkloadPriorityClass Kueue gives a pod or Job."""


def priority_class_template(settings: Settings) -> str:
    """The Jinja template of a run's Kueue priority class (``kubernetes.priority_classes``):
    the class of the highest floor at or below the job's priority (the training form's
    ``priority``; ``orchestration.train_priority`` where the DAG has no such field)."""
    default = settings.orchestration.train_priority
    floors = settings.kubernetes.priority_class_floors
    choice = f"'{floors[-1][1]}'"  # the class of floor 1
    for floor, name in reversed(floors[:-1]):
        choice = f"'{name}' if p >= {floor} else {choice}"
    return f"{{% set p = params.priority | default({default}) | int %}}{{{{ {choice} }}}}"


DEFAULT_RUN_ARGS = ("--run-id", RUN_ID, "--logical-date", LOGICAL_DATE)
"""The run's arguments of a step: Airflow's run id and logical date (a training run adds its
trigger and the trigger form's values, see ``orchestration.trigger``)."""


def parse_manifest(lines: list[str]) -> dict[str, Any] | None:
    """The last line that is a step manifest (a JSON object with a ``step`` key)."""
    for line in reversed(lines):
        text = line.strip()
        if text.startswith("{") and text.endswith("}"):
            try:
                payload = json.loads(text)
            except json.JSONDecodeError:
                continue
            if isinstance(payload, dict) and "step" in payload:
                return payload
    return None


class LocalStepOperator(BaseOperator):
    """Runs one step's argv as a subprocess; its manifest is the task's XCom return value."""

    template_fields = ("argv",)
    ui_color = "#e8f4ea"

    def __init__(
        self,
        *,
        step: str,
        argv: list[str],
        team: str = "",
        gauges: TrainingGauges | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.step = step
        self.argv = argv
        self.team = team
        """The domain's team: the step writes to MLflow as the team's user when the deployment
        holds its password (:mod:`pipeline_steps.core.team_credentials`)."""
        self.gauges = gauges
        """Where a training's gauges go, removed when the task ends (None: no training)."""
        self._process: subprocess.Popen[str] | None = None

    def execute(self, context: Any) -> dict[str, Any]:
        with removed_at_end(self.gauges, context):
            return self._run(context)

    def _run(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException

        argv = local_argv(self.argv)
        self.log.info("running %s", " ".join(argv))
        started = time.monotonic()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **team_environment(self.team)}
        self._process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        lines: list[str] = []
        assert self._process.stdout is not None
        for line in self._process.stdout:
            lines.append(line.rstrip("\n"))
            self.log.info("%s", lines[-1])
        code = self._process.wait()
        self.log.info(
            "step %s exited with code %d after %.2f s", self.step, code, time.monotonic() - started
        )
        if code != 0:
            reason = [ln for ln in lines if ln.startswith("trainyard ")] or lines[-5:]
            raise step_failure(self.step, code, lines, "\n".join(reason))
        manifest = parse_manifest(lines)
        if manifest is None:
            raise AirflowException(f"step {self.step} printed no manifest line")
        return manifest

    def on_kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGTERM)


def retry_args(settings: Settings) -> dict[str, Any]:
    orch = settings.orchestration
    return {
        "retries": orch.retries,
        "retry_delay": timedelta(seconds=orch.retry_delay_s),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": timedelta(seconds=orch.max_retry_delay_s),
        "execution_timeout": timedelta(seconds=orch.step_timeout_s),
    }


def pod_environment(settings: Settings) -> dict[str, str]:
    """The settings in a pod's environment: every one the DAG's settings change from the
    defaults (its config file, its environment), so the step in the pod loads what the DAG
    loaded; and where the pod finds the lake and MLflow."""
    k8s = settings.kubernetes
    lake_root = k8s.lake_mount_path if k8s.lake_pvc else settings.lake.root
    home = {k: v for k, v in os.environ.items() if k == "TRAINYARD_HOME"}
    always = {  # whether changed or not: the pod's own home would give other defaults
        "TRAINYARD_LAKE__ROOT": lake_root,
        "TRAINYARD_MLFLOW__TRACKING_URI": settings.mlflow.tracking_uri,
        "TRAINYARD_MLFLOW__ARTIFACT_ROOT": settings.mlflow.artifact_root,
        "TRAINYARD_TUNING__STORAGE": settings.tuning.storage,  # a trial reports to its study
        "TRAINYARD_TRAIN__NPROC_PER_NODE": settings.train.nproc_per_node,
        "TRAINYARD_TRAIN__COLLECTIVE_TIMEOUT_S": settings.train.collective_timeout_s,
    }
    env = {
        # files and folders are the image's, named by the settings file it holds
        **settings_environment(settings, load_settings(environ=home), paths=False),
        **{key: env_value(value) for key, value in always.items()},
        # A failed NCCL collective aborts the process instead of leaving peers waiting.
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "PYTHONUNBUFFERED": "1",
    }
    return env


def multi_node_env(settings: Settings) -> list[Any]:
    """The pod environment of a multi-node Job: the settings, this Job's name and pod index."""
    from kubernetes.client import models as k8s

    def field(path: str) -> Any:
        return k8s.V1EnvVarSource(field_ref=k8s.V1ObjectFieldSelector(field_path=path))

    return [
        *(k8s.V1EnvVar(name=k, value=v) for k, v in pod_environment(settings).items()),
        k8s.V1EnvVar(name="TRAINYARD_JOB_NAME", value_from=field("metadata.labels['job-name']")),
        k8s.V1EnvVar(
            name="JOB_COMPLETION_INDEX",
            value_from=field("metadata.annotations['batch.kubernetes.io/job-completion-index']"),
        ),
    ]


def headless_service(settings: Settings) -> dict[str, Any]:
    """The Service giving the Job's pods stable DNS names (``<job>-<index>.trainyard-train``)."""
    cfg = settings.kubernetes
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": TRAIN_SERVICE,
            "namespace": cfg.namespace,
            "labels": {"app.kubernetes.io/name": "trainyard"},
        },
        "spec": {
            "clusterIP": "None",
            "selector": {"app.kubernetes.io/name": "trainyard", "trainyard/step": TRAIN.name},
            "ports": [{"name": "rendezvous", "port": cfg.rendezvous_port}],
            # pods must resolve each other before they are ready: rendezvous comes first
            "publishNotReadyAddresses": True,
        },
    }


def termination_grace(settings: Settings) -> int:
    """The training pod's ``terminationGracePeriodSeconds``; ``SettingsError`` when it leaves
    the training no time to checkpoint after SIGTERM (``train.preemption_grace_s``)."""
    grace = settings.kubernetes.termination_grace_s
    if grace <= settings.train.preemption_grace_s:
        raise SettingsError(
            f"kubernetes.termination_grace_s ({grace}) must exceed train.preemption_grace_s "
            f"({settings.train.preemption_grace_s}): the pod is killed before the training "
            "has checkpointed after SIGTERM"
        )
    return grace


def pod_arguments(
    step: Step | str, settings: Settings, run_args: Sequence[str] = DEFAULT_RUN_ARGS
) -> dict[str, Any]:
    """What a step's pod looks like, for a single pod and for the pods of a training Job.
    Requests equal the limits for GPUs, so that a quota system (Kueue) counts what the pod
    uses; ``kubernetes.queue_name`` labels the pod for Kueue; the MLflow login comes from
    ``kubernetes.mlflow_secret`` (the team's Secret)."""
    from kubernetes.client import models as k8s

    spec = step_registry.step(step)
    train = spec.distributed  # the training's GPUs, shared memory, nodes and grace
    cfg = settings.kubernetes
    restricted = k8s.V1SecurityContext(
        allow_privilege_escalation=False,
        read_only_root_filesystem=True,
        capabilities=k8s.V1Capabilities(drop=["ALL"]),
    )
    requests = {"cpu": cfg.cpu_request, "memory": cfg.memory_request}
    limits = {"cpu": cfg.cpu_limit, "memory": cfg.memory_limit}
    if train:  # a job's own memory and GPUs per node, when its run asked for them
        limits["memory"] = job_resource(
            "memory_per_node", cfg.train_memory_limit or cfg.memory_limit
        )
    if train and cfg.train_gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = job_resource(
            "gpus_per_node", cfg.train_gpus
        )
    volumes = [k8s.V1Volume(name="tmp", empty_dir=k8s.V1EmptyDirVolumeSource())]
    mounts = [k8s.V1VolumeMount(name="tmp", mount_path="/tmp")]
    if train:  # shared memory for the data path and NCCL beyond the 64 MiB default
        volumes.append(
            k8s.V1Volume(name="shm", empty_dir=k8s.V1EmptyDirVolumeSource(medium="Memory"))
        )
        mounts.append(k8s.V1VolumeMount(name="shm", mount_path="/dev/shm"))
    if cfg.lake_pvc:
        volumes.append(
            k8s.V1Volume(
                name="lake",
                persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(
                    claim_name=cfg.lake_pvc
                ),
            )
        )
        mounts.append(k8s.V1VolumeMount(name="lake", mount_path=cfg.lake_mount_path))
    labels = {"app.kubernetes.io/name": "trainyard", "trainyard/step": spec.name}
    if cfg.queue_name:
        labels[QUEUE_LABEL] = cfg.queue_name
    if cfg.priority_classes:
        labels[PRIORITY_CLASS_LABEL] = priority_class_template(settings)
    spot = bool(cfg.spot_node_selector or cfg.spot_tolerations)
    return {
        "namespace": cfg.namespace,
        "image": cfg.image,
        "image_pull_policy": cfg.image_pull_policy,
        "service_account_name": cfg.service_account,
        "cmds": step_argv(spec, settings, run_args),
        "arguments": [],
        "env_vars": pod_environment(settings),
        "env_from": [k8s.V1EnvFromSource(secret_ref=k8s.V1SecretEnvSource(name=cfg.mlflow_secret))]
        if cfg.mlflow_secret
        else None,
        "container_resources": k8s.V1ResourceRequirements(requests=requests, limits=limits),
        "node_selector": cfg.node_selector | cfg.spot_node_selector if train else None,
        "tolerations": [k8s.V1Toleration(**t) for t in (*cfg.tolerations, *cfg.spot_tolerations)]
        if train
        else None,
        "termination_grace_period": termination_grace(settings) if train else None,
        # waiting for Kueue's admission or for spot capacity is no failure to start
        "schedule_timeout_seconds": settings.orchestration.step_timeout_s
        if cfg.queue_name or (train and spot)
        else None,
        "volumes": volumes,
        "volume_mounts": mounts,
        "security_context": k8s.V1PodSecurityContext(
            run_as_non_root=True, run_as_user=10001, fs_group=10001
        ),
        "container_security_context": restricted,
        "labels": labels,
        "get_logs": True,
    }


def job_resource(param: str, default: object) -> str:
    """A training pod's resource as a template the task renders: the run's form value
    ``param`` (a job's own), else ``default``; runs of a DAG whose form has no such field (a
    tuning trial) take ``default``."""
    value = f"params.get({param!r})"
    return f"{{{{ {value} if {value} not in (none, '') else {str(default)!r} }}}}"


def kubernetes_step(
    step: Step, settings: Settings, run_args: Sequence[str], **task_args: Any
) -> BaseOperator:
    """A KubernetesPodOperator running the step's argv in the step image; a permanent failure
    (exit code 2, or the step's failure line as termination message) is not retried."""
    from pipeline_steps.orchestration.step_pod import StepPodOperator

    pod = pod_arguments(step, settings, run_args)
    return StepPodOperator(
        step=step.name,
        gauges=training_gauges(settings, step),
        task_id=step.task_id,
        name=f"trainyard-{step.task_id}",
        xcom_sidecar_container_security_context=pod["container_security_context"],
        do_xcom_push=True,
        on_finish_action="delete_pod",
        **pod,
        **task_args,
    )


def rendezvous_resources(settings: Settings, security: Any) -> str:
    """The YAML created before a multi-node Job and deleted after it: the headless Service, and
    for an elastic Job the rendezvous store and the training pods' disruption budget."""
    import yaml

    if not settings.kubernetes.elastic:
        return yaml.safe_dump(headless_service(settings))
    return yaml.safe_dump_all(
        [
            headless_service(settings),
            *rendezvous_store(settings, security),
            disruption_budget(settings),
        ]
    )


def multi_node_training(settings: Settings, run_args: Sequence[str], **task_args: Any) -> Any:
    """``train`` on several nodes: create the headless Service (and an elastic Job's store and
    budget), run the Indexed Job (one pod per node, torchrun in each), remove them whatever the
    outcome. Returns the task group; the Job task takes ``task_args`` (retries, GPU pool)."""
    from airflow.providers.cncf.kubernetes.operators.resource import (
        KubernetesCreateResourceOperator,
        KubernetesDeleteResourceOperator,
    )
    from airflow.sdk import TaskGroup
    from kubernetes.client import models as k8s

    from pipeline_steps.orchestration.training_job import TrainingJobOperator

    cfg = settings.kubernetes
    pod = pod_arguments(TRAIN, settings, run_args) | {"env_vars": multi_node_env(settings)}
    resources = rendezvous_resources(settings, pod["container_security_context"])
    elastic: dict[str, Any] = {}
    if cfg.elastic:
        elastic = {
            "full_job_spec": elastic_job_template(settings),
            "init_containers": [store_wait(settings, pod["container_security_context"])],
            "labels": pod["labels"] | ELASTIC_POD_LABELS,
        }
    nodes = f"{cfg.min_nodes} to {cfg.train_nodes}" if cfg.elastic else str(cfg.train_nodes)
    with TaskGroup(group_id=TRAIN.task_id, tooltip=f"training on {nodes} nodes") as group:
        create = KubernetesCreateResourceOperator(
            task_id="create_rendezvous_service", yaml_conf=resources, namespace=cfg.namespace
        )
        job = TrainingJobOperator(
            task_id="job",
            gauges=training_gauges(settings, TRAIN),
            name="trainyard-train",
            random_name_suffix=True,
            completion_mode="Indexed",
            completions=cfg.train_nodes,
            parallelism=cfg.train_nodes,
            # fixed size: 0, retries are torchrun restarts and Airflow task retries; elastic:
            # the failures of lost nodes (beyond disruptions) while a minimal world remains
            backoff_limit=cfg.train_nodes - cfg.min_nodes,
            min_nodes=cfg.train_min_nodes if cfg.elastic else 0,
            wait_until_job_complete=True,
            # pods named <job>-<index> resolve through the Service as <job>-<index>.<service>
            full_pod_spec=k8s.V1Pod(spec=k8s.V1PodSpec(containers=[], subdomain=TRAIN_SERVICE)),
            do_xcom_push=False,
            on_finish_action="delete_pod",
            **(pod | elastic),
            **task_args,
        )
        delete = KubernetesDeleteResourceOperator(
            task_id="delete_rendezvous_service",
            yaml_conf=resources,
            namespace=cfg.namespace,
            trigger_rule="all_done",
        )
        create >> job >> delete
    return group


def step_task(
    step: Step | str, settings: Settings, run_args: Sequence[str] = DEFAULT_RUN_ARGS
) -> Any:
    """The task for one step (a :class:`Step` or its name) under the configured runtime, with
    retries and backoff (a task group for training on several Kubernetes nodes). ``run_args``
    follow ``trainyard step <name>`` in the argv."""
    spec = step_registry.step(step)
    task_args = retry_args(settings)
    if spec.distributed:  # the GPUs' holder: the pool's slots, at training's priority
        gpus = step_gpus(settings, settings.kubernetes.train_nodes)
        task_args |= gpu_task_args(
            settings, gpus, settings.orchestration.train_priority, training=True
        )
    if settings.orchestration.runtime == "kubernetes":
        if spec.distributed and settings.kubernetes.train_nodes > 1:
            return multi_node_training(settings, run_args, **task_args)
        return kubernetes_step(spec, settings, run_args, **task_args)
    argv = step_argv(spec, settings, run_args)
    team = settings.domain.team
    gauges = training_gauges(settings, spec)
    return LocalStepOperator(
        task_id=spec.task_id, step=spec.name, argv=argv, team=team, gauges=gauges, **task_args
    )
