"""containers/airflow_health.py, the compose services' health check: the same answer as
Airflow's ``Job.is_alive`` (what ``airflow jobs check --local`` asks) on a real metadata
database, without importing Airflow."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import pytest

from tests.unit.test_compose import compose

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "containers" / "airflow_health.py"


@pytest.fixture(scope="module")
def health() -> ModuleType:
    spec = importlib.util.spec_from_file_location("airflow_health", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def database(airflow_db: Path) -> Iterator[tuple[dict[str, str], str]]:
    """The environment that points at the run's Airflow DB, and a host name of this test's own;
    the jobs the test adds are removed after it."""
    host = f"health-{uuid.uuid4().hex[:8]}"
    yield {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_db}"}, host
    from airflow.jobs.job import Job
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    with create_session() as session:
        session.execute(delete(Job).where(Job.hostname == host))


def add_job(job_type: str, host: str, state: str, heartbeat_age_s: float) -> object:
    """A row of the ``job`` table as Airflow writes it, through Airflow's own model."""
    from airflow.jobs.job import Job
    from airflow.utils.session import create_session

    with create_session() as session:
        job = Job(heartrate=5)
        job.job_type = job_type
        job.hostname = host
        job.state = state
        job.latest_heartbeat = datetime.now(UTC) - timedelta(seconds=heartbeat_age_s)
        session.add(job)
        session.flush()
        session.expunge(job)
    return job


@pytest.mark.parametrize(
    ("job_type", "state", "age_s", "expected"),
    [
        ("SchedulerJob", "running", 1, True),
        ("TriggererJob", "running", 1, True),
        ("DagProcessorJob", "running", 1, True),
        ("SchedulerJob", "running", 45, False),  # past the 30 s threshold
        ("SchedulerJob", "success", 1, False),  # ended cleanly: not running
    ],
)
def test_same_answer_as_airflow(
    health: ModuleType,
    database: tuple[dict[str, str], str],
    job_type: str,
    state: str,
    age_s: float,
    expected: bool,
) -> None:
    environ, host = database
    job = add_job(job_type, host, state, age_s)
    assert job.is_alive() is expected  # type: ignore[attr-defined]
    alive, reason = health.job_alive(job_type, environ=environ, hostname=host)
    assert alive is expected, reason
    assert host in reason


def test_another_host_and_another_type_do_not_count(
    health: ModuleType, database: tuple[dict[str, str], str]
) -> None:
    environ, host = database
    add_job("SchedulerJob", host, "running", 1)
    alive, reason = health.job_alive("SchedulerJob", environ=environ, hostname=f"{host}-other")
    assert not alive and reason == f"no running SchedulerJob on {host}-other"
    assert not health.job_alive("TriggererJob", environ=environ, hostname=host)[0]


def test_threshold_from_airflow_setting(
    health: ModuleType, database: tuple[dict[str, str], str]
) -> None:
    environ, host = database
    add_job("TriggererJob", host, "running", 45)
    longer = {**environ, "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "60"}
    assert health.job_alive("TriggererJob", environ=longer, hostname=host)[0]
    alive, reason = health.job_alive("TriggererJob", environ=environ, hostname=host)
    assert not alive and "limit 30 s" in reason


def test_command_line_exit_codes(health: ModuleType, database: tuple[dict[str, str], str]) -> None:
    environ, host = database
    add_job("DagProcessorJob", host, "running", 1)
    argv = [sys.executable, str(SCRIPT), "job", "DagProcessorJob"]
    # the container's own host name is what the script uses: here this machine's, with no job
    done = subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "no running DagProcessorJob" in done.stdout
    unset = subprocess.run(argv, env={}, capture_output=True, text=True, timeout=30)
    assert unset.returncode == 2
    assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN is not set" in unset.stderr


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "mysql://x/airflow"}, "'mysql'"),
        ({"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "sqlite://"}, "no SQLite file"),
        (
            {
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "sqlite:////tmp/x.db",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "soon",
            },
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD='soon'",
        ),
    ],
)
def test_bad_settings_are_named(health: ModuleType, environ: dict[str, str], message: str) -> None:
    with pytest.raises(health.HealthError, match=message):
        health.job_alive("SchedulerJob", environ=environ, hostname="h")


def test_unknown_job_type_is_named(health: ModuleType) -> None:
    with pytest.raises(health.HealthError, match="'LocalTaskJob'"):
        health.job_alive("LocalTaskJob", environ={}, hostname="h")


def test_compose_checks_each_job_with_it() -> None:
    services = compose()["services"]
    for name, job_type in [
        ("airflow-scheduler", "SchedulerJob"),
        ("airflow-dag-processor", "DagProcessorJob"),
        ("airflow-triggerer", "TriggererJob"),
    ]:
        in_image = f"/opt/trainyard/{SCRIPT.relative_to(ROOT)}"
        assert services[name]["healthcheck"]["test"] == ["CMD", "python", in_image, "job", job_type]
    dockerfile = (ROOT / "containers" / "airflow.Dockerfile").read_text()
    assert "containers/airflow_health.py /opt/trainyard/containers/" in dockerfile
