"""``docker compose up`` of the production profile on a real engine: docker-compose.yaml as users
run it, with containers/offline/compose.yaml standing in for the three public images no registry
serves here. Every service healthy (two Celery workers), a demo date trained through the
authenticated REST API, the outcome read back from the authenticated MLflow server, then
``docker compose down -v``.

The project runs under a name and ports of its own, so a profile a user started is left alone.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline_steps.services.airflow_api import AirflowApi
from tests.containers.engine import ROOT

pytestmark = [pytest.mark.containers, pytest.mark.slow]

DAG = "flight_delay_training"
HISTORY = ("2013-06-01", "2013-06-02")
DAY = "2013-06-03"
WORKERS = 2
LONG_RUNNING = {
    "postgres",
    "redis",
    "s3",
    "mlflow",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker",
}
ONE_SHOT = {"volume-init", "airflow-init"}
UP_TIMEOUT_S = 900
RUN_TIMEOUT_S = 1200


def _free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def _env_file(path: Path) -> dict[str, str]:
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
        "PUBLISH_ADDRESS": "127.0.0.1",
        "AIRFLOW_PORT": _free_port(),
        "MLFLOW_PORT": _free_port(),
        "S3_PORT": _free_port(),
        "S3_CONSOLE_PORT": _free_port(),
        "AIRFLOW_WORKER_CONCURRENCY": "2",
        "AIRFLOW_WORKER_CPUS": str(min(4, os.cpu_count() or 1)),
        "AIRFLOW_WORKER_MEMORY": "6G",
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


def _wait_until_healthy(compose: Compose) -> dict[str, Any]:
    """Every long-running container healthy and every one-shot exited 0; the states at the end."""
    deadline = time.monotonic() + UP_TIMEOUT_S
    states: dict[str, Any] = {}
    while time.monotonic() < deadline:
        containers = compose.containers()
        states = {c["Name"]: c for c in containers}
        failed = [n for n, c in states.items() if c["State"] == "exited" and c["ExitCode"] != 0]
        assert not failed, f"{failed} exited: {states}\n{compose.logs()}"
        healthy = [
            c for c in containers if c["Service"] in LONG_RUNNING and c["Health"] == "healthy"
        ]
        done = [c for c in containers if c["Service"] in ONE_SHOT and c["State"] == "exited"]
        if len(healthy) == len(LONG_RUNNING) - 1 + WORKERS and len(done) == len(ONE_SHOT):
            return states
        time.sleep(5)
    raise AssertionError(f"not healthy after {UP_TIMEOUT_S} s: {states}\n{compose.logs()}")


@pytest.fixture(scope="module")
def profile(
    images: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Compose, dict[str, str]]]:
    folder = tmp_path_factory.mktemp("compose")
    values = _env_file(folder / ".env")
    compose = Compose(f"trainyard-test-{os.getpid()}", folder / ".env")
    try:
        started = time.monotonic()
        compose("up", "--detach", "--no-build", "--scale", f"airflow-worker={WORKERS}")
        _wait_until_healthy(compose)
        print(f"compose profile healthy after {time.monotonic() - started:.0f} s")
        yield compose, values
    finally:
        compose("down", "--volumes", "--remove-orphans", "--timeout", "30", check=False)


def test_compose_profile_trains_a_demo_date_through_the_rest_api(
    profile: tuple[Compose, dict[str, str]],
) -> None:
    compose, values = profile
    # the history the window needs, as the compose file's header says
    start, end = HISTORY
    compose("exec", "-T", "airflow-worker", "trainyard", "seed", "--start", start, "--end", end)

    url = f"http://127.0.0.1:{values['AIRFLOW_PORT']}"
    api = AirflowApi(url, "admin", values["AIRFLOW_ADMIN_PASSWORD"])
    with pytest.raises(Exception, match="401"):
        AirflowApi(api.url, "admin", "wrong").get("/api/v2/dags")
    api.unpause(DAG)
    run_id = f"manual__{DAY}"
    api.trigger(DAG, DAY, run_id, conf={"window_days": 3, "epochs": 2})
    states = api.wait(DAG, [run_id], RUN_TIMEOUT_S)
    failed = [t["task_id"] for t in api.task_instances(DAG, run_id) if t["state"] != "success"]
    assert states[run_id] == "success", (failed, compose.logs())

    from mlflow import MlflowClient

    mlflow_url = f"http://127.0.0.1:{values['MLFLOW_PORT']}"
    os.environ["MLFLOW_TRACKING_USERNAME"] = values["MLFLOW_TRACKING_USERNAME"]
    os.environ["MLFLOW_TRACKING_PASSWORD"] = values["MLFLOW_TRACKING_PASSWORD"]
    try:
        client = MlflowClient(tracking_uri=mlflow_url, registry_uri=mlflow_url)
        runs = client.search_runs(
            [e.experiment_id for e in client.search_experiments()],
            filter_string=f"tags.`trainyard.run_id` = '{run_id}'",
        )
        assert runs and all(r.info.status == "FINISHED" for r in runs), runs
        assert any("val_auc" in r.data.metrics for r in runs), [r.data.metrics for r in runs]
        versions = client.search_model_versions("name = 'flight_delay'")
        by_run = {v.tags.get("trainyard.run_id"): v for v in versions}
        assert run_id in by_run, [v.tags for v in versions]
        decision = by_run[run_id].tags.get("trainyard.decision")
        assert decision in ("promoted", "staged", "rejected", "undecided"), by_run[run_id].tags
    finally:
        del os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"]
