"""A Docker engine for the container tests, and what a Kubernetes pod spec becomes on it.

:func:`docker_run` turns the arguments :func:`~pipeline_steps.orchestration.runners.pod_arguments`
renders for a KubernetesPodOperator into ``docker run`` options, one for one: the user and
``fsGroup``, the container's security context, the volumes, the environment, the CPU and memory
limits and the command. What the kubelet adds by itself is added the same way: the termination
message file and the XCom sidecar's volume.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pipeline_steps.services.profile import PROCESSES, SERVICES
from tests.conftest import free_port
from tests.dags.templates import rendered

ROOT = Path(__file__).resolve().parents[2]
TERMINATION_LOG = "/dev/termination-log"
TEAM_WORKERS = ("airflow-worker-revenue",)
"""The workers of the compose file's teams (the shipped hotel example's, revenue)."""
LONG_RUNNING = (*SERVICES, *PROCESSES, *TEAM_WORKERS)
"""The profile's services that run until stopped, each with a health check: the ones
``trainyard services up`` starts and the ones it uses (a test holds the two files together),
and the teams' workers."""
ONE_SHOT = ("volume-init", "airflow-init")
"""The profile's services that run once on each ``up`` and exit."""
XCOM_DIR = "/airflow/xcom"


def require_engine() -> None:
    """Skip without a Docker engine, except under CI=true, where the tier must run."""
    problem = None
    if shutil.which("docker") is None:
        problem = "no docker command (scripts/container-engine.sh installs the engine)"
    else:
        info = subprocess.run(["docker", "info"], capture_output=True, text=True)
        if info.returncode != 0:
            problem = f"the Docker engine does not answer: {info.stderr.strip()[-300:]}"
    if problem is None:
        compose = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if compose.returncode != 0:
            problem = "no `docker compose` (scripts/container-engine.sh installs Compose v2)"
    if problem is None and os.geteuid() != 0:
        problem = "the container tests run as root (the base image's debootstrap, volume owners)"
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the container tests must run in CI: {problem}")
        pytest.skip(problem)


def build_images() -> None:
    """Every image of the profile, from this checkout (layers that did not change are kept)."""
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "offline-images.sh")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


def _memory(quantity: str) -> str:
    """A Kubernetes memory quantity (``8Gi``, ``512Mi``, ``2G``) as ``docker run --memory``."""
    match = re.fullmatch(r"(\d+)([KMG]i?)?", quantity)
    assert match, f"unhandled memory quantity {quantity!r}"
    number, unit = match.groups()
    factor = {None: 1, "K": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    return str(int(number) * factor[unit])


def docker_run(
    pod: dict[str, Any],
    claims: dict[str, Path],
    termination_log: Path,
    xcom: Path,
    secret_values: Mapping[str, Mapping[str, str]] | None = None,
) -> list[str]:
    """The ``docker run`` options and command of the pod ``pod`` (KubernetesPodOperator's
    arguments). ``claims`` maps a PersistentVolumeClaim's name to the host folder standing in
    for it, ``secret_values`` a Secret's name to its keys and values (for ``envFrom``);
    ``termination_log`` and ``xcom`` are host paths for what the kubelet and the XCom sidecar
    provide."""
    security, container = pod["security_context"], pod["container_security_context"]
    assert security.run_as_non_root and security.run_as_user != 0
    options = ["--user", str(security.run_as_user)]
    if security.fs_group is not None:  # the volumes are the group's, and so are the user's
        options += ["--group-add", str(security.fs_group)]
    if container.read_only_root_filesystem:
        options.append("--read-only")
    if container.allow_privilege_escalation is False:
        options += ["--security-opt", "no-new-privileges"]
    for capability in container.capabilities.drop or []:
        options += ["--cap-drop", capability]
    mounts = {m.name: m.mount_path for m in pod["volume_mounts"]}
    for volume in pod["volumes"]:
        target = mounts[volume.name]
        if volume.empty_dir is not None:  # node-local and world-writable, in memory or not
            options += ["--mount", f"type=tmpfs,destination={target},tmpfs-mode=1777"]
        elif volume.persistent_volume_claim is not None:
            source = claims[volume.persistent_volume_claim.claim_name]
            options += ["--mount", f"type=bind,source={source},destination={target}"]
        else:
            raise AssertionError(f"unhandled volume {volume}")
    options += ["--mount", f"type=bind,source={termination_log},destination={TERMINATION_LOG}"]
    options += ["--mount", f"type=bind,source={xcom},destination={XCOM_DIR}"]
    for name, value in pod["env_vars"].items():
        options += ["--env", f"{name}={value}"]
    for source in pod.get("env_from") or []:  # a Secret the test stands in for, or a KeyError
        for name, value in (secret_values or {})[source.secret_ref.name].items():
            options += ["--env", f"{name}={value}"]
    # a training pod's memory is the run's own when it asks (a template the task renders):
    # a run asking nothing takes the settings'
    limits = {k: rendered(v) for k, v in pod["container_resources"].limits.items()}
    options += ["--cpus", limits["cpu"], "--memory", _memory(limits["memory"])]
    command: Sequence[str] = pod["cmds"] + pod["arguments"]
    return [*options, "--entrypoint", command[0], pod["image"], *command[1:]]


def claim_folder(path: Path, fs_group: int) -> Path:
    """A host folder as a PersistentVolumeClaim mounted with ``fsGroup``: the group's, group
    writable, new files inheriting the group."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, 0, fs_group)
    path.chmod(0o2775)
    return path


def env_file(path: Path) -> dict[str, str]:
    """A filled-in .env.example: fresh secrets, free ports, limits this machine can give."""
    values = {
        "TRAINYARD_DB_PASSWORD": secrets.token_urlsafe(24),
        "REDIS_PASSWORD": secrets.token_urlsafe(24),
        "S3_ACCESS_KEY_ID": "trainyard",
        "S3_SECRET_ACCESS_KEY": secrets.token_urlsafe(24),
        "AIRFLOW_ADMIN_PASSWORD": secrets.token_urlsafe(24),
        "AIRFLOW_JWT_SECRET": secrets.token_urlsafe(32),
        "AIRFLOW_API_SECRET_KEY": secrets.token_urlsafe(32),
        "AIRFLOW_FERNET_KEY": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
        "MLFLOW_ADMIN_PASSWORD": secrets.token_urlsafe(24),
        "MLFLOW_TRACKING_USERNAME": "trainyard",
        "MLFLOW_TRACKING_PASSWORD": secrets.token_urlsafe(24),
        "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_urlsafe(32),
        "MLFLOW_TEAM_REVENUE_PASSWORD": secrets.token_urlsafe(24),
        "PUBLISH_ADDRESS": "127.0.0.1",
        "AIRFLOW_PORT": str(free_port()),
        "MLFLOW_PORT": str(free_port()),
        "S3_PORT": str(free_port()),
        "S3_CONSOLE_PORT": str(free_port()),
        "PROMETHEUS_PORT": str(free_port()),
        "AIRFLOW_WORKER_CONCURRENCY": "2",
        "AIRFLOW_WORKER_CPUS": str(min(4, os.cpu_count() or 1)),
        "AIRFLOW_WORKER_MEMORY": "6G",
        "MLFLOW_WORKERS": "2",
    }
    expected = {
        line.split("=", 1)[0]
        for line in (ROOT / ".env.example").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    }
    assert set(values) == expected, "the test's .env and .env.example name different keys"
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    path.chmod(0o600)
    return values


class Compose:
    def __init__(self, project: str, env_file: Path) -> None:
        self.base = [
            "docker",
            "compose",
            "--project-name",
            project,
            "--project-directory",
            str(ROOT),
            "--env-file",
            str(env_file),
            "-f",
            str(ROOT / "docker-compose.yaml"),
            "-f",
            str(ROOT / "containers" / "offline" / "compose.yaml"),
        ]

    def __call__(self, *args: str, timeout: float = 600, check: bool = True) -> str:
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=timeout)
        if check:
            assert done.returncode == 0, f"compose {' '.join(args)}:\n{done.stderr[-4000:]}"
        return done.stdout

    def containers(self) -> list[dict[str, Any]]:
        out = self("ps", "--all", "--format", "json")
        text = out.strip()
        if text.startswith("["):
            return list(json.loads(text))
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def logs(self) -> str:
        return self("logs", "--no-color", "--tail", "60", check=False)

    def wait_until_healthy(self, workers: int, timeout_s: float) -> dict[str, float]:
        """Wait until every long-running container is healthy (``workers`` Celery workers) and
        every one-shot one exited 0; the seconds each container took to get there, from now."""
        started = time.monotonic()
        ready: dict[str, float] = {}
        containers: list[dict[str, Any]] = []
        while time.monotonic() < started + timeout_s:
            containers = self.containers()
            failed = [c["Name"] for c in containers if c["State"] == "exited" and c["ExitCode"]]
            assert not failed, f"{failed} exited:\n{self.logs()}"
            for c in containers:
                healthy = c["Service"] in LONG_RUNNING and c["Health"] == "healthy"
                if c["Name"] not in ready and (
                    healthy or (c["Service"] in ONE_SHOT and c["State"] == "exited")
                ):
                    ready[c["Name"]] = time.monotonic() - started
            if len(ready) == len(LONG_RUNNING) - 1 + workers + len(ONE_SHOT):
                return ready
            time.sleep(2)
        waiting = [c for c in containers if c["Name"] not in ready]
        states = {c["Name"]: (c["State"], c["Health"]) for c in waiting}
        raise AssertionError(
            f"waited {timeout_s:.0f} s for every service healthy ({workers} workers) and the "
            f"one-shot ones exited 0; ready: {sorted(ready)}; last seen of the others: {states}"
            f"\n{self.logs()}"
        )


def remove_stale_projects(prefix: str = "trainyard-test-") -> None:
    """Take down the compose projects (``<prefix><pid>``) that an interrupted test run left
    behind, volumes included; a project whose process still runs is left alone."""
    listed = subprocess.run(
        ["docker", "compose", "ls", "--all", "--format", "json"], capture_output=True, text=True
    )
    for project in json.loads(listed.stdout or "[]"):
        pid = project["Name"].removeprefix(prefix)
        if pid != project["Name"] and pid.isdigit() and not Path(f"/proc/{pid}").exists():
            subprocess.run(
                ["docker", "compose", "--project-name", project["Name"], "down", "--volumes"],
                capture_output=True,
                timeout=300,
            )
