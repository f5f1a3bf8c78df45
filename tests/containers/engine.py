"""A Docker engine for the container tests, and what a Kubernetes pod spec becomes on it.

:func:`docker_run` turns the arguments :func:`~pipeline_steps.orchestration.runners.pod_arguments`
renders for a KubernetesPodOperator into ``docker run`` options, one for one: the user and
``fsGroup``, the container's security context, the volumes, the environment, the CPU and memory
limits and the command. What the kubelet adds by itself is added the same way: the termination
message file and the XCom sidecar's volume.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TERMINATION_LOG = "/dev/termination-log"
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
    pod: dict[str, Any], claims: dict[str, Path], termination_log: Path, xcom: Path
) -> list[str]:
    """The ``docker run`` options and command of the pod ``pod`` (KubernetesPodOperator's
    arguments). ``claims`` maps a PersistentVolumeClaim's name to the host folder standing in
    for it; ``termination_log`` and ``xcom`` are host paths for what the kubelet and the XCom
    sidecar provide."""
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
    limits = pod["container_resources"].limits
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
