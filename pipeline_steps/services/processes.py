"""Start, watch and stop the production profile's processes on this machine.

Each process runs in its own session with its output in ``<home>/logs/<name>.log`` and its pid
in ``<home>/run/<name>.pid``; ``down`` stops the whole process group (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from base64 import b64encode
from collections.abc import Callable, Mapping
from pathlib import Path

from pipeline_steps.core.team_credentials import password_variable, team_queue, team_user
from pipeline_steps.services import prometheus, spark_cluster
from pipeline_steps.services.profile import Profile, write_private
from pipeline_steps.services.readiness import START_LIMIT_S, Seen, Watched, wait_until_ready
from pipeline_steps.services.readiness import ServiceError as ServiceError

log = logging.getLogger(__name__)
BIN = Path(sys.executable).parent
TEAM_WORKER = "airflow-worker-"
"""How the name of a team's Celery worker starts (``airflow-worker-<team>``)."""
DEFAULT_QUEUE = "default"
"""Airflow's default queue (``[operators] default_queue``): the shared worker's."""
MLFLOW_WORKER_HEALTHCHECK_S = 120
"""How long MLflow's uvicorn supervisor waits for a worker to answer its ping before killing it
(uvicorn's default is 5 s). A worker spends its first seconds importing MLflow (5 s of CPU on
an idle core); on a machine whose cores are busy its ping goes unanswered for longer than 5 s,
so with the default every worker is killed while it starts and replaced by one that is killed
in turn, and the server never answers. A worker that hangs for good is still replaced, later."""
MLFLOW_UVICORN_OPTS = f"--timeout-worker-healthcheck {MLFLOW_WORKER_HEALTHCHECK_S}"
"""``mlflow server --uvicorn-opts``: the same in docker-compose.yaml (a test keeps them so)."""


def command(profile: Profile, name: str) -> list[str]:
    """The command line of one process."""
    if name == "s3":
        server = "pipeline_steps.services.s3_server"  # moto's, see there
        return [sys.executable, "-m", server, "-H", "127.0.0.1", "-p", profile["S3_PORT"]]
    if name == "spark-master":
        return spark_cluster.master_command(
            "127.0.0.1", profile["SPARK_MASTER_PORT"], profile["SPARK_WEBUI_PORT"]
        )
    if name.startswith("spark-worker-"):
        number = int(name.rsplit("-", 1)[1])
        return spark_cluster.worker_command(
            profile.spark_master_url,
            spark_worker_dir(profile, number),
            host="127.0.0.1",
            cores=profile["SPARK_WORKER_CORES"],
            memory=profile["SPARK_WORKER_MEMORY"],
            webui_port=int(profile["SPARK_WEBUI_PORT"]) + number,
            isolate=spark_cluster.can_isolate(),
        )
    if name == "mlflow":
        return [
            str(BIN / "mlflow"),
            "server",
            "--app-name",
            "basic-auth",
            "--host",
            "127.0.0.1",
            "--port",
            profile["MLFLOW_PORT"],
            "--workers",
            "2",
            "--uvicorn-opts",
            MLFLOW_UVICORN_OPTS,
            "--backend-store-uri",
            profile.database_url("mlflow"),
            "--artifacts-destination",
            f"s3://{profile['S3_BUCKET']}/mlflow",
            "--serve-artifacts",
            "--expose-prometheus",
            str(profile.mlflow_metrics_dir),
        ]
    if name == "pushgateway":
        listen = f"127.0.0.1:{profile['PUSHGATEWAY_PORT']}"
        return prometheus.pushgateway_argv(listen, profile.prometheus_home / "pushgateway.data")
    if name == "statsd-exporter":
        return [
            str(BIN / "trainyard"),
            "services",
            "statsd-exporter",
            "--statsd",
            f"127.0.0.1:{profile['STATSD_PORT']}",
            "--listen",
            f"127.0.0.1:{profile['STATSD_EXPORTER_PORT']}",
        ]
    if name == "prometheus":
        return prometheus.prometheus_argv(
            profile.prometheus_home / "prometheus.yml",
            profile.prometheus_home / "data",
            f"127.0.0.1:{profile['PROMETHEUS_PORT']}",
        )
    airflow = str(BIN / "airflow")
    if name.startswith(TEAM_WORKER):
        team = name.removeprefix(TEAM_WORKER)
        queue = ["--queues", team_queue(team), "--celery-hostname", f"{team}@%h"]
        return [airflow, "celery", "worker", *queue]
    return {
        "airflow-apiserver": [airflow, "api-server"],
        "airflow-scheduler": [airflow, "scheduler"],
        "airflow-dag-processor": [airflow, "dag-processor"],
        "airflow-triggerer": [airflow, "triggerer"],
        # the shared worker: the tasks of the domains without a team
        "airflow-worker": [airflow, "celery", "worker", "--queues", DEFAULT_QUEUE],
    }[name]


def environment(profile: Profile, name: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "MLFLOW_"))}
    base["PATH"] = f"{BIN}{os.pathsep}{base.get('PATH', '')}"
    if name == "s3":
        # Requests are authenticated after the first three, which create the profile's user.
        return {**base, "INITIAL_NO_AUTH_ACTION_COUNT": "3"}
    if name in ("pushgateway", "statsd-exporter", "prometheus"):
        return base
    if name == "spark-master":
        return spark_cluster.master_environment(base, str(profile.home / "logs"))
    if name.startswith("spark-worker-"):
        work_dir = spark_worker_dir(profile, int(name.rsplit("-", 1)[1]))
        return spark_cluster.worker_environment(work_dir, base)
    if name == "mlflow":
        return {
            **base,
            **profile.mlflow_env(),
            "MLFLOW_AUTH_ADMIN_USERNAME": profile["MLFLOW_ADMIN_USER"],
            "MLFLOW_AUTH_ADMIN_PASSWORD": profile["MLFLOW_ADMIN_PASSWORD"],
        }
    # each component's metrics told apart (Prometheus' `instance` label)
    env = {
        **base,
        **profile.airflow_env(),
        "OTEL_RESOURCE_ATTRIBUTES": f"service.instance.id={name}",
    }
    if name.startswith(TEAM_WORKER):
        # the team's MLflow login, as its password and as the worker's own: neither another
        # team's nor the deployment's user
        team = name.removeprefix(TEAM_WORKER)
        variable = password_variable(team)
        password = profile.values.get(variable, "")
        port = int(profile["AIRFLOW_WORKER_LOG_PORT"]) + 1 + deployment_teams(profile).index(team)
        env |= {
            variable: password,
            "MLFLOW_TRACKING_USERNAME": team_user(team),
            "MLFLOW_TRACKING_PASSWORD": password,
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(port),
        }
    return env


def deployment_teams(profile: Profile) -> list[str]:
    """The teams of the deployment's domains (``domain.team``), sorted."""
    from pipeline_steps.core.deployment import domain_settings_files

    found = domain_settings_files(environment(profile, "airflow-scheduler"), refused=[])
    return sorted({d.settings.domain.team for d in found if d.settings.domain.team})


def team_workers(profile: Profile) -> list[str]:
    """The Celery worker of each team of the deployment, ``airflow-worker-<team>``: it takes
    the team's queue alone and holds the team's MLflow password alone."""
    return [f"{TEAM_WORKER}{team}" for team in deployment_teams(profile)]


def spark_worker_dir(profile: Profile, number: int) -> str:
    """A worker's own folder: in its private ``/tmp`` where it has one, else the profile's."""
    if spark_cluster.can_isolate():
        return f"/tmp/spark-worker-{number}"
    return str(profile.home / "spark" / f"worker-{number}")


def pid_file(profile: Profile, name: str) -> Path:
    return profile.home / "run" / f"{name}.pid"


def log_file(profile: Profile, name: str) -> Path:
    return profile.home / "logs" / f"{name}.log"


def running_pid(profile: Profile, name: str) -> int | None:
    path = pid_file(profile, name)
    if not path.exists():
        return None
    pid = int(path.read_text().strip() or 0)
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        path.unlink(missing_ok=True)
        return None
    return pid


def start(profile: Profile, name: str, env_overrides: Mapping[str, str] | None = None) -> int:
    """Start one process unless it runs already; return its pid."""
    pid = running_pid(profile, name)
    if pid is not None:
        return pid
    log_path = log_file(profile, name)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    pid_file(profile, name).parent.mkdir(parents=True, exist_ok=True)
    env = {**environment(profile, name), **(env_overrides or {})}
    with log_path.open("ab") as out:
        proc = subprocess.Popen(
            command(profile, name),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=profile.home,
            start_new_session=True,
        )
    pid_file(profile, name).write_text(str(proc.pid))
    return proc.pid


def stop(profile: Profile, names: list[str], grace_s: float = 30.0) -> list[str]:
    """Stop these processes and everything they started, all at once: SIGTERM, then SIGKILL
    for what is left after ``grace_s``. Returns the names that were running."""
    pids = {name: running_pid(profile, name) for name in names}
    running = {name: pid for name, pid in pids.items() if pid is not None}
    for pid in running.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_group_alive(p) for p in running.values()):
        time.sleep(0.3)
    for name, pid in running.items():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        pid_file(profile, name).unlink(missing_ok=True)
    return [name for name in names if name in running]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # A zombie leader with no other members counts as gone.
    status = Path(f"/proc/{pgid}/stat")
    if status.exists() and status.read_text().split()[2] == "Z":
        others = (p for p in Path("/proc").iterdir() if p.name.isdigit() and p.name != str(pgid))
        return any(_pgid_of(p) == pgid for p in others)
    return True


def _pgid_of(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, IndexError, ValueError):
        return None


def watched(profile: Profile, name: str) -> Watched:
    """Process ``name`` of the profile as a wait depends on it: running while its pid lives and
    has not ended (a process ``up`` started stays a zombie until ``up`` reaps it, which it does
    not while it waits)."""

    def running() -> bool:
        pid = running_pid(profile, name)
        return pid is not None and _state(pid) not in ("Z", "X")

    return Watched(name, running, log_file(profile, name))


def _state(pid: int) -> str | None:
    """The process' state letter (``R``, ``S``, ``Z`` ...) from ``/proc``; None where there is
    no ``/proc``."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def wait_for(
    profile: Profile,
    name: str,
    check: Callable[[], Seen | bool],
    timeout_s: float = START_LIMIT_S,
    what: str = "",
    also: tuple[str, ...] = (),
) -> float:
    """Ask ``check`` until it says ready while process ``name`` (and those named in ``also``)
    run; the seconds it took.

    A :class:`ServiceError` naming the process, what was waited for, what was seen last and the
    log's last lines, at once when a process ends or after ``timeout_s``
    (:func:`~pipeline_steps.services.readiness.wait_until_ready`)."""
    processes = [watched(profile, n) for n in (name, *also)]
    return wait_until_ready(what or name, check, processes, timeout_s)


def port_open(port: str | int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", int(port))) == 0


def http_status(
    url: str,
    auth: tuple[str, str] | None = None,
    data: bytes | None = None,
    method: str | None = None,
) -> int:
    request = urllib.request.Request(url, data=data, method=method)
    if auth is not None:
        token = b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def http_ready(url: str) -> Seen:
    """Ready when ``url`` answers 200; else what it answered."""
    status = http_status(url)
    return Seen(status == 200, f"HTTP {status} from {url}")


def airflow_healthy(profile: Profile, *components: str) -> Seen:
    """Ready when Airflow's health endpoint calls each of ``components`` healthy; else what it
    says of them."""
    with urllib.request.urlopen(f"{profile.airflow_url}/api/v2/monitor/health", timeout=10) as r:
        health = json.load(r)
    states = {c: health.get(c, {}).get("status") for c in components}
    return Seen(all(s == "healthy" for s in states.values()), f"Airflow's health: {states}")


def worker_ready(profile: Profile, name: str = "airflow-worker") -> Seen:
    """Ready when the Celery worker's log says it is (``celery@host ready.``)."""
    text = log_file(profile, name).read_text(errors="replace")
    return Seen(" ready." in text, "the worker's log has no ' ready.' line yet")


def spark_workers_alive(profile: Profile, expected: int) -> Seen:
    """Ready when the Spark master counts ``expected`` workers alive (its web UI's JSON)."""
    return spark_cluster.workers_alive(int(profile["SPARK_WEBUI_PORT"]), expected)


def write_airflow_passwords(profile: Profile) -> None:
    write_private(
        profile.passwords_file,
        json.dumps({profile["AIRFLOW_ADMIN_USER"]: profile["AIRFLOW_ADMIN_PASSWORD"]}),
    )


def write_mlflow_auth_config(profile: Profile) -> None:
    """The basic-auth app's config; the admin password reaches it through the environment."""
    write_private(
        profile.mlflow_auth_config,
        "[mlflow]\n"
        "default_permission = READ\n"
        f"database_uri = {profile.database_url('mlflow_auth')}\n"
        f"admin_username = {profile['MLFLOW_ADMIN_USER']}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        # A password is checked (scrypt, a tenth of a second of CPU) once a minute per worker,
        # not on every request: a changed password takes up to a minute to reach every worker.
        "auth_cache_ttl_seconds = 60\n",
    )


def write_prometheus_config(profile: Profile) -> None:
    """Prometheus' config: the Pushgateway, Airflow's metrics (the statsd-exporter) and MLflow
    scraped, the latter as its admin (its ``/metrics`` answers no one else), whose password is
    in a file only the profile's user reads."""
    password_file = profile.prometheus_home / "mlflow-password"
    write_private(password_file, profile["MLFLOW_ADMIN_PASSWORD"])
    every = int(profile["PROMETHEUS_SCRAPE_S"])
    text = prometheus.config(
        f"127.0.0.1:{profile['PUSHGATEWAY_PORT']}",
        f"127.0.0.1:{profile['MLFLOW_PORT']}",
        airflow=f"127.0.0.1:{profile['STATSD_EXPORTER_PORT']}",
        scrape_s=every,
        evaluate_s=every,
        mlflow_auth=(profile["MLFLOW_ADMIN_USER"], str(password_file)),
    )
    write_private(profile.prometheus_home / "prometheus.yml", text)


def prometheus_ready(url: str) -> Seen:
    return http_ready(f"{url}/-/ready")
