"""The one runner factory: every pipeline step becomes a task the same way.

``runtime: local``      a task that runs the step's argv as a subprocess, streaming its output into
                        the task log, and returns the step's JSON manifest (its last stdout line).
``runtime: kubernetes`` a KubernetesPodOperator running the same argv in the step image.

Kept light: DAG parsing imports this, so nothing heavy is imported at module level. This is the
only module of the package that imports Airflow; the steps never do.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator

from pipeline_steps.settings import Settings

RUN_ID = "{{ run_id }}"
LOGICAL_DATE = "{{ ds }}"


def step_argv(step: str, settings: Settings) -> list[str]:
    """The command of a step, identical for every runtime; ``train`` goes through torchrun."""
    argv = ["trainyard", "step", step, "--run-id", RUN_ID, "--logical-date", LOGICAL_DATE]
    if step != "train":
        return argv
    return [
        "torchrun",
        "--standalone",
        "--nnodes=1",
        f"--nproc-per-node={settings.train.nproc_per_node}",
        f"--max-restarts={settings.train.max_restarts}",
        "--no-python",
        *argv,
    ]


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


def _executable(name: str) -> str:
    """Resolve a console script on PATH, else beside the running interpreter (a venv's bin/)."""
    found = shutil.which(name)
    if found:
        return found
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else name


class LocalStepOperator(BaseOperator):
    """Runs one step's argv as a subprocess; its manifest is the task's XCom return value."""

    template_fields = ("argv",)
    ui_color = "#e8f4ea"

    def __init__(self, *, step: str, argv: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step = step
        self.argv = argv
        self._process: subprocess.Popen[str] | None = None

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.exceptions import AirflowException

        argv = [_executable(self.argv[0]), *self.argv[1:]]
        if self.argv[0] == "torchrun":
            # torchrun --no-python runs the console script by name: resolve it the same way.
            index = argv.index("--no-python") + 1
            argv[index] = _executable(argv[index])
        self.log.info("running %s", " ".join(argv))
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
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
        if code != 0:
            reason = [ln for ln in lines if ln.startswith("trainyard ")] or lines[-5:]
            raise AirflowException(
                f"step {self.step} exited with code {code}: " + "\n".join(reason)
            )
        manifest = parse_manifest(lines)
        if manifest is None:
            raise AirflowException(f"step {self.step} printed no manifest line")
        return manifest

    def on_kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGTERM)


def _retry_args(settings: Settings) -> dict[str, Any]:
    orch = settings.orchestration
    return {
        "retries": orch.retries,
        "retry_delay": timedelta(seconds=orch.retry_delay_s),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": timedelta(seconds=orch.max_retry_delay_s),
        "execution_timeout": timedelta(seconds=orch.step_timeout_s),
    }


def pod_environment(settings: Settings) -> dict[str, str]:
    """Settings a pod needs to find the same lake and MLflow as the scheduler's config."""
    k8s = settings.kubernetes
    lake_root = k8s.lake_mount_path if k8s.lake_pvc else settings.lake.root
    env = {
        "TRAINYARD_LAKE__ROOT": lake_root,
        "TRAINYARD_MLFLOW__TRACKING_URI": settings.mlflow.tracking_uri,
        "TRAINYARD_MLFLOW__ARTIFACT_ROOT": settings.mlflow.artifact_root,
        "TRAINYARD_TRAIN__NPROC_PER_NODE": str(settings.train.nproc_per_node),
        "PYTHONUNBUFFERED": "1",
    }
    return env


def kubernetes_step(step: str, settings: Settings, **task_args: Any) -> BaseOperator:
    """A KubernetesPodOperator running the step's argv in the step image."""
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
    from kubernetes.client import models as k8s

    cfg = settings.kubernetes
    restricted = k8s.V1SecurityContext(
        allow_privilege_escalation=False,
        read_only_root_filesystem=True,
        capabilities=k8s.V1Capabilities(drop=["ALL"]),
    )
    limits = {"cpu": cfg.cpu_limit, "memory": cfg.memory_limit}
    if step == "train" and cfg.train_gpus:
        limits["nvidia.com/gpu"] = str(cfg.train_gpus)
    volumes, mounts = (
        [k8s.V1Volume(name="tmp", empty_dir=k8s.V1EmptyDirVolumeSource())],
        [k8s.V1VolumeMount(name="tmp", mount_path="/tmp")],
    )
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
    return KubernetesPodOperator(
        task_id=step,
        name=f"trainyard-{step}",
        namespace=cfg.namespace,
        image=cfg.image,
        image_pull_policy=cfg.image_pull_policy,
        service_account_name=cfg.service_account,
        cmds=step_argv(step, settings),
        arguments=[],
        env_vars=pod_environment(settings),
        container_resources=k8s.V1ResourceRequirements(
            requests={"cpu": cfg.cpu_request, "memory": cfg.memory_request}, limits=limits
        ),
        node_selector=dict(cfg.node_selector) if step == "train" else None,
        tolerations=[k8s.V1Toleration(**t) for t in cfg.tolerations] if step == "train" else None,
        volumes=volumes,
        volume_mounts=mounts,
        security_context=k8s.V1PodSecurityContext(
            run_as_non_root=True, run_as_user=10001, fs_group=10001
        ),
        container_security_context=restricted,
        xcom_sidecar_container_security_context=restricted,
        labels={"app.kubernetes.io/name": "trainyard", "trainyard/step": step},
        do_xcom_push=True,
        get_logs=True,
        on_finish_action="delete_pod",
        **task_args,
    )


def step_task(step: str, settings: Settings) -> BaseOperator:
    """The task for one step under the configured runtime, with retries and backoff."""
    task_args = _retry_args(settings)
    if settings.orchestration.runtime == "kubernetes":
        return kubernetes_step(step, settings, **task_args)
    return LocalStepOperator(task_id=step, step=step, argv=step_argv(step, settings), **task_args)
