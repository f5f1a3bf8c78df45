"""containers/airflow_init.py, the compose profile's one-shot setup: each step can run again and
keeps ``.env`` the source of every password."""

from __future__ import annotations

import base64
import importlib.util
import json
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def airflow_init() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "airflow_init", ROOT / "containers" / "airflow_init.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_passwords_file_is_private_and_replaced(airflow_init: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "auth" / "passwords.json"
    airflow_init.write_passwords_file(path, {"admin": "first-password"})
    airflow_init.write_passwords_file(path, {"admin": "rotated-password"})
    assert json.loads(path.read_text()) == {"admin": "rotated-password"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["passwords.json"]


def test_bucket_is_created_once(airflow_init: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    from moto import mock_aws

    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        assert airflow_init.ensure_bucket("trainyard") is True
        assert airflow_init.ensure_bucket("trainyard") is False


class FakeMlflowAuth(BaseHTTPRequestHandler):
    """The two routes of MLflow's auth API the init uses, with MLflow's answers: a taken
    username is 400 RESOURCE_ALREADY_EXISTS, anyone but admin is 401."""

    admin_password = "admin-password-0123"
    users: dict[str, str] = {}

    def _answer(self, status: int, body: dict[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body).encode())

    def _handle(self) -> None:
        expected = base64.b64encode(f"admin:{self.admin_password}".encode()).decode()
        if self.headers.get("Authorization") != f"Basic {expected}":
            return self._answer(401, {"error_code": "UNAUTHENTICATED"})
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        route = (self.command, self.path)
        if route == ("POST", "/api/2.0/mlflow/users/create"):
            if body["username"] in self.users:
                return self._answer(400, {"error_code": "RESOURCE_ALREADY_EXISTS"})
        elif route != ("PATCH", "/api/2.0/mlflow/users/update-password"):
            return self._answer(404, {"error_code": "ENDPOINT_NOT_FOUND"})
        self.users[body["username"]] = body["password"]
        return self._answer(200, {})

    do_POST = do_PATCH = _handle

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def mlflow_server() -> Iterator[str]:
    FakeMlflowAuth.users = {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeMlflowAuth)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    thread.join()


def test_mlflow_user_is_created_then_given_the_env_password(
    airflow_init: ModuleType, mlflow_server: str
) -> None:
    admin = FakeMlflowAuth.admin_password
    assert airflow_init.ensure_mlflow_user(mlflow_server, admin, "trainyard", "first-pw") == (
        "created"
    )
    assert airflow_init.ensure_mlflow_user(mlflow_server, admin, "trainyard", "rotated-pw") == (
        "updated"
    )
    assert FakeMlflowAuth.users == {"trainyard": "rotated-pw"}


def test_wrong_admin_password_stops_the_init(airflow_init: ModuleType, mlflow_server: str) -> None:
    with pytest.raises(airflow_init.MlflowApiError) as error:
        airflow_init.ensure_mlflow_user(mlflow_server, "not-the-admin", "trainyard", "pw")
    assert error.value.status == 401
    assert "not-the-admin" not in str(error.value)
    assert FakeMlflowAuth.users == {}


def test_compose_gives_the_init_everything_it_reads(
    airflow_init: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.unit.test_compose import compose

    service = compose()["services"]["airflow-init"]
    assert service["command"] == ["python", "/opt/trainyard/containers/airflow_init.py"]
    calls: list[tuple[object, ...]] = []
    monkeypatch.setattr(airflow_init.subprocess, "run", lambda argv, check: calls.append(argv))
    monkeypatch.setattr(airflow_init, "write_passwords_file", lambda *a: calls.append(a))
    monkeypatch.setattr(airflow_init, "ensure_bucket", lambda *a: calls.append(a) or True)
    monkeypatch.setattr(airflow_init, "ensure_mlflow_user", lambda *a: calls.append(a) or "created")

    env = {key: str(value) for key, value in service["environment"].items()}
    assert airflow_init.main(env) == 0
    migrate, gpu, team_gpu, team, passwords, bucket, user, team_user = calls
    assert migrate == ["airflow", "db", "migrate"]
    # the GPU pool the training and tuning tasks take their slots from, before the scheduler;
    # the hotel example's team's GPU pool and the pool of its other tasks
    assert gpu[:5] == ["airflow", "pools", "set", "gpu", "64"]
    assert team_gpu[:5] == ["airflow", "pools", "set", "gpu-revenue", "64"]
    assert team[:5] == ["airflow", "pools", "set", "team-revenue", "16"]
    assert passwords == (
        Path("/opt/airflow/auth/passwords.json"),
        {"admin": env["AIRFLOW_ADMIN_PASSWORD"]},
    )
    assert bucket == ("trainyard", "http://s3:9000")
    assert user == (
        "http://mlflow:5000",
        env["MLFLOW_ADMIN_PASSWORD"],
        "trainyard",
        env["MLFLOW_TRACKING_PASSWORD"],
    )
    # the hotel example's team's own user, with the password its worker alone holds
    assert team_user == (
        "http://mlflow:5000",
        env["MLFLOW_ADMIN_PASSWORD"],
        "team-revenue",
        env["MLFLOW_TEAM_REVENUE_PASSWORD"],
    )
    worker = compose()["services"]["airflow-worker-revenue"]
    assert worker["command"] == ["airflow", "celery", "worker", "--queues", "team-revenue"]
    assert "MLFLOW_TEAM_REVENUE_PASSWORD" in worker["environment"]
    assert worker["environment"]["MLFLOW_TRACKING_USERNAME"] == "team-revenue"
    assert worker["environment"]["MLFLOW_TRACKING_PASSWORD"] == env["MLFLOW_TEAM_REVENUE_PASSWORD"]
    assert (
        "MLFLOW_TEAM_REVENUE_PASSWORD" not in compose()["services"]["airflow-worker"]["environment"]
    )
    # the api-server reads the passwords file the init wrote
    for name in ("airflow-init", "airflow-apiserver"):
        assert "airflow-auth:/opt/airflow/auth" in compose()["services"][name]["volumes"], name
