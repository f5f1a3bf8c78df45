"""MLflow's server starting on a machine whose cores are busy: the production profile's options
against uvicorn's default worker ping.

Each run starts ``mlflow server`` as ``trainyard services up`` does (``processes.command``: the
basic-auth app, two workers, the uvicorn options), its stores in SQLite files instead of
PostgreSQL, while ``--busy`` processes spin, each in a session of its own (a scheduling group of
its own, as a container or another user's job is). ``--old`` leaves out ``--uvicorn-opts``, as the
profiles started it before. It records the seconds until ``/health`` answers 200 and how many
workers uvicorn's supervisor killed (``Child process [N] died``) meanwhile.

    .venv/bin/python benchmarks/mlflow_start.py --busy 6            # the profile's options
    .venv/bin/python benchmarks/mlflow_start.py --busy 6 --old      # uvicorn's 5 s ping

One JSON line per run is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from multiprocessing import Process
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline_steps.services import processes
from pipeline_steps.services.profile import load_profile
from tests.conftest import free_port


def spin() -> None:
    os.setsid()
    while True:
        pass


def argv(home: Path, old: bool) -> list[str]:
    """The profile's MLflow command, its stores moved to SQLite files under ``home``."""
    profile = load_profile({"TRAINYARD_PROD_HOME": str(home), "MLFLOW_PORT": str(free_port())})
    command = processes.command(profile, "mlflow")
    moved = {
        "--backend-store-uri": f"sqlite:///{home}/mlflow.db",
        "--artifacts-destination": str(home / "artifacts"),
        "--expose-prometheus": str(home / "metrics"),
    }
    for flag, value in moved.items():
        command[command.index(flag) + 1] = value
    if old:
        at = command.index("--uvicorn-opts")
        del command[at : at + 2]
    return command


def environment(home: Path) -> dict[str, str]:
    config = home / "auth.ini"
    config.write_text(
        "[mlflow]\ndefault_permission = READ\n"
        f"database_uri = sqlite:///{home}/auth.db\nadmin_username = admin\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
    )
    return {
        **os.environ,
        "MLFLOW_AUTH_CONFIG_PATH": str(config),
        "MLFLOW_AUTH_ADMIN_PASSWORD": "benchmark-Admin-passw0rd",
        "MLFLOW_FLASK_SERVER_SECRET_KEY": os.urandom(16).hex(),
    }


def start_once(busy: int, old: bool, limit_s: float) -> dict[str, object]:
    spinners = [Process(target=spin, daemon=True) for _ in range(busy)]
    for spinner in spinners:
        spinner.start()
    home = Path(tempfile.mkdtemp(prefix="mlflow-start-"))
    command = argv(home, old)
    url = f"http://127.0.0.1:{command[command.index('--port') + 1]}/health"
    log = home / "server.log"
    started = time.monotonic()
    with log.open("wb") as out:
        server = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=environment(home),
            start_new_session=True,
        )
    healthy = None
    try:
        while time.monotonic() - started < limit_s and server.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=5) as answer:
                    if answer.status == 200:
                        healthy = round(time.monotonic() - started, 1)
                        break
            except OSError:
                pass
            time.sleep(1)
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        for spinner in spinners:
            spinner.kill()
    return {
        "busy": busy,
        "cores": os.cpu_count(),
        "options": "uvicorn's default" if old else processes.MLFLOW_UVICORN_OPTS,
        "healthy_after_s": healthy,
        "limit_s": limit_s,
        "workers_killed": log.read_text(errors="replace").count(" died"),
        "log": str(log),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=6, help="spinning processes (default 6)")
    parser.add_argument("--old", action="store_true", help="without the profile's uvicorn options")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--limit", type=float, default=240.0, help="seconds to wait for /health")
    args = parser.parse_args()
    for _ in range(args.runs):
        print(json.dumps(start_once(args.busy, args.old, args.limit)), flush=True)


if __name__ == "__main__":
    main()
