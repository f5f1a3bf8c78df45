"""A Spark standalone cluster on this machine: a master and its workers as separate processes.

``trainyard services up --spark`` starts them beside the production profile (the steps then run
with ``engine.name: spark`` against the master, the lake and ``engine.spark_dir`` on the
profile's S3 store). Each worker has its own working and local directories, and — where the
machine allows a process a mount namespace of its own (root on Linux) — its own empty ``/tmp``:
the driver's scratch folders and anything else it keeps under ``/tmp`` do not exist for the
worker or its executors, as on a cluster of separate machines.

The master and workers are the classes the pyspark wheel ships, run through its ``spark-class``.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

from pipeline_steps.services.readiness import Seen

log = logging.getLogger(__name__)

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
PRIVATE_TMP = 'mount --make-rprivate / && mount -t tmpfs -o mode=1777 tmpfs /tmp && exec "$@"'
STARTERS_OWN = ("PROMETHEUS_MULTIPROC_DIR", "PROMETHEUS_MULTIPROCESS_DIR")
"""Variables naming a folder of the process that set them, which the cluster's processes must not
inherit: Feast sets both on import to a temporary folder it removes when it exits, so executors
started with them would find a folder that is gone (or, behind a worker's private ``/tmp``,
never there) and fail to import Feast."""


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _under_tmp(path: Path) -> bool:
    return Path("/tmp") in path.resolve().parents


def master_url(host: str, port: str | int) -> str:
    return f"spark://{host}:{port}"


@functools.cache
def can_isolate() -> bool:
    """Whether a worker can be given a mount namespace (an empty ``/tmp``) of its own: root on
    Linux, where ``unshare`` is present and the kernel lets it mount (not in every container),
    and neither Spark nor the Python environment its executors run lies under ``/tmp``, which
    the empty one would hide (a checkout cloned there)."""
    if sys.platform != "linux" or os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    spark, python = spark_home(), Path(sys.prefix)
    if _under_tmp(spark) or _under_tmp(python):
        log.warning(
            "the Spark workers share this machine's /tmp: Spark (%s) or Python (%s) lies under "
            "it, and a worker's own empty /tmp would hide it",
            spark,
            python,
        )
        return False
    probe = ["unshare", "--mount", "--fork", "sh", "-c", "mount -t tmpfs tmpfs /tmp"]
    return subprocess.run(probe, capture_output=True, timeout=30, check=False).returncode == 0


def workers_alive(webui_port: int, expected: int, host: str = "127.0.0.1") -> Seen:
    """Ready when the master at ``webui_port`` counts ``expected`` workers alive, from its web
    UI's JSON (``/json/``); what it says otherwise. Raises ``OSError`` while the master does not
    answer (:func:`~pipeline_steps.services.readiness.wait_until_ready` counts it not ready)."""
    with urllib.request.urlopen(f"http://{host}:{webui_port}/json/", timeout=10) as answer:
        state = json.load(answer)
    alive = int(state.get("aliveworkers", 0))
    said = f"master {state.get('status', '?')}, {alive} of {expected} workers alive"
    return Seen(alive >= expected, said)


def master_command(host: str, port: str | int, webui_port: str | int) -> list[str]:
    return [
        str(spark_home() / "bin" / "spark-class"),
        MASTER_CLASS,
        "--host",
        host,
        "--port",
        str(port),
        "--webui-port",
        str(webui_port),
    ]


def worker_command(
    master: str,
    work_dir: str,
    *,
    host: str,
    cores: str | int,
    memory: str,
    webui_port: str | int,
    isolate: bool,
) -> list[str]:
    """A worker of ``master`` with ``work_dir`` (under the worker's private ``/tmp`` when
    ``isolate``)."""
    argv = [
        str(spark_home() / "bin" / "spark-class"),
        WORKER_CLASS,
        "--host",
        host,
        "--cores",
        str(cores),
        "--memory",
        memory,
        "--work-dir",
        work_dir,
        "--webui-port",
        str(webui_port),
        master,
    ]
    if not isolate:
        return argv
    return ["unshare", "--mount", "--fork", "sh", "-c", PRIVATE_TMP, "spark-worker", *argv]


def worker_environment(work_dir: str, base: dict[str, str]) -> dict[str, str]:
    """The worker's environment: Spark's home the wheel's, its executors' local directories
    under its own working directory, Python's and Java's temporary files in its ``/tmp``."""
    env = _inherited(base)
    return {
        **env,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_DIRS": f"{work_dir}/local",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": work_dir,
        "TMPDIR": "/tmp",
    }


def master_environment(base: dict[str, str], log_dir: str) -> dict[str, str]:
    env = _inherited(base)
    return {
        **env,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": log_dir,
    }


def _inherited(base: dict[str, str]) -> dict[str, str]:
    """What a cluster process keeps of the environment it is started from: not Spark's own
    settings (the wheel's are set) nor what belongs to the starting process alone."""
    return {
        k: v
        for k, v in base.items()
        if not k.startswith(("PYSPARK_", "SPARK_")) and k not in STARTERS_OWN
    }
