"""``trainyard airflow-env``: the exports that show the Airflow CLI the deployment's DAGs from any
shell, the same ``make airflow`` starts Airflow with."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline_steps.core.settings import SettingsError
from pipeline_steps.services.airflow_env import airflow_environment
from tests.conftest import ROOT

BIN = str(Path(sys.executable).parent)


def test_the_embedded_default_from_a_bare_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    env = airflow_environment({"PATH": "/usr/bin:/bin"})
    assert env == {
        "TRAINYARD_HOME": str(tmp_path / ".trainyard"),
        "AIRFLOW_HOME": str(tmp_path / ".trainyard" / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__API__PORT": "8080",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": "http://localhost:8080/execution/",
        "PATH": f"{BIN}:/usr/bin:/bin",
    }


def test_the_environment_s_own_values_a_port_and_a_domains_folder(tmp_path) -> None:
    domains = tmp_path / "domains"
    (domains / "bookings").mkdir(parents=True)
    (domains / "bookings" / "settings.yaml").write_text("domain:\n  name: bookings\n")
    (domains / "single.yaml").write_text("domain:\n  name: single\n")
    environ = {
        "TRAINYARD_HOME": str(tmp_path / "home"),
        "TRAINYARD_CONFIG": str(tmp_path / "mine.yaml"),
        "PYTHONPATH": "/opt/team",
        "PATH": f"/usr/bin:{BIN}",
    }
    env = airflow_environment(environ, port=8093, domains=domains)
    assert env["AIRFLOW_HOME"] == str(tmp_path / "home" / "airflow")
    assert env["TRAINYARD_CONFIG"] == str(tmp_path / "mine.yaml")
    assert env["TRAINYARD_ORCHESTRATION__DOMAINS_DIR"] == str(domains)
    assert env["PYTHONPATH"] == f"{domains / 'bookings'}:/opt/team"  # a domain folder's package
    assert env["AIRFLOW__API__PORT"] == "8093"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://localhost:8093/execution/"
    assert env["PATH"] == f"{BIN}:/usr/bin"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"port": 70000}, "--port 70000: a TCP port is 1 to 65535"),
        ({"domains": "/nonexistent/domains"}, "--domains /nonexistent/domains is not a folder"),
        ({"dags": "/nonexistent/dags"}, "--dags /nonexistent/dags is not a folder"),
    ],
)
def test_a_bad_option_is_named(options, message) -> None:
    with pytest.raises(SettingsError, match=message):
        airflow_environment({}, **options)


def test_a_port_the_environment_gives_is_checked_too() -> None:
    assert airflow_environment({"AIRFLOW__API__PORT": "8094"})["AIRFLOW__API__PORT"] == "8094"
    with pytest.raises(SettingsError, match="AIRFLOW__API__PORT 'http': a TCP port is 1 to 65535"):
        airflow_environment({"AIRFLOW__API__PORT": "http"})


def test_a_shell_evaluating_the_exports_runs_airflow_on_them(tmp_path) -> None:
    """What a user types: the printed exports evaluated by bash, then a command that reads
    them (here Airflow's own ``config get-value``, which builds no DAG)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TRAINYARD"))}
    environ["TRAINYARD_HOME"] = str(tmp_path / "home with a space")
    script = (
        f'eval "$({BIN}/trainyard airflow-env --port 8093)" && '
        "airflow config get-value core dags_folder && "
        "airflow config get-value api port && "
        'echo "$AIRFLOW_HOME"'
    )
    done = subprocess.run(
        ["bash", "-c", script], env=environ, cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:3] == [
        str(ROOT / "dags"),
        "8093",
        str(tmp_path / "home with a space" / "airflow"),
    ]
    refused = subprocess.run(
        [f"{BIN}/trainyard", "airflow-env", "--port", "0"], capture_output=True, text=True
    )
    assert refused.returncode == 2 and "--port 0: a TCP port is 1 to 65535" in refused.stderr
