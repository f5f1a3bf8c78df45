"""Jobs as a user submits them: ``trainyard submit``, ``jobs`` and ``cancel`` against a real
Airflow (API server, dag-processor, scheduler) parsing the real DAG files.

The teams' pools do not exist, so the scheduler creates the runs and their task instances but
starts none: every job waits, which is what a team's queue looks like while its slots are
taken. The hotel example's team ``revenue`` has a quota of one running and two waiting jobs;
the cron's run of the newest day waits with them. What is checked: the jobs reach Airflow with
the form's values, the quota refuses a third waiting job and a bad value before anything is
triggered, the scheduler gives every task of a job its priority (the cluster policy), ``jobs``
lists them in the order they would start, and ``cancel`` stops one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, free_port, sqlite_query, stop_together, wait_until

pytestmark = pytest.mark.slow
DOMAIN = "hotel_rate"
DAG = f"{DOMAIN}_training"
QUOTA = "{revenue: {runs: 1, queued: 2, gpus: 0, nodes: 1}}"


@pytest.fixture
def airflow(lake_home: Path, tmp_path: Path, airflow_template: Path) -> Iterator[dict[str, Any]]:
    home = tmp_path / "airflow"
    port = free_port()
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API_AUTH__JWT_SECRET": "jobs-test-secret",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "1",
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "TRAINYARD_HOME": str(lake_home),
        "TRAINYARD_ORCHESTRATION__QUOTAS": QUOTA,
        # several jobs of one domain run at once: the team's pools hold them, not the DAG
        "TRAINYARD_ORCHESTRATION__MAX_ACTIVE_RUNS": "4",
    }
    home.mkdir()
    shutil.copyfile(airflow_template, home / "airflow.db")
    (home / "simple_auth_manager_passwords.json.generated").write_text('{"admin": "pw"}')
    sqlite_query(home / "airflow.db", "UPDATE slot_pool SET slots = 0 WHERE pool = 'default_pool'")
    logs = tmp_path / "logs"
    logs.mkdir()
    commands = {
        "dag-processor": ["airflow", "dag-processor"],
        "scheduler": ["airflow", "scheduler"],
        "api-server": ["airflow", "api-server", "--port", str(port), "--workers", "1"],
    }
    processes = [
        subprocess.Popen(
            argv,
            env=env,
            stdout=(logs / f"{name}.log").open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for name, argv in commands.items()
    ]
    try:
        yield {"env": env, "db": home / "airflow.db", "logs": logs, "port": port}
    finally:
        stop_together(processes)


def _trainyard(airflow: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline_steps.commands.cli", *args],
        env=airflow["env"],
        capture_output=True,
        text=True,
        timeout=180,
    )


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=5):
            return True
    except OSError:
        return False


def _logs(airflow: dict[str, Any]) -> str:
    return "\n".join(
        f"--- {path.name}\n{path.read_text()[-3000:]}" for path in airflow["logs"].iterdir()
    )


def test_jobs_are_submitted_within_the_quota_listed_in_order_and_cancelled(airflow) -> None:
    db = airflow["db"]
    try:
        wait_until("the API server's health", lambda: _healthy(airflow["port"]), timeout_s=180)
        wait_until(
            f"the dag-processor to serialise {DAG}",
            lambda: sqlite_query(db, "SELECT 1 FROM serialized_dag WHERE dag_id = ?", DAG),
            timeout_s=180,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_logs(airflow)}") from None

    # the cron's run of the newest day comes first: it waits for the team's slots as jobs do
    cron = wait_until(
        "the cron's training run",
        lambda: sqlite_query(
            db, "SELECT run_id FROM dag_run WHERE dag_id = ? AND run_type = 'scheduled'", DAG
        ),
        timeout_s=120,
    )[0][0]

    # a value the form refuses: nothing reaches Airflow
    bad = _trainyard(airflow, "submit", DOMAIN, "--day", "2017-05-02", "--epochs", "0")
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "epochs (train.epochs)" in bad.stderr and "minimum" in bad.stderr, bad.stderr

    high = _trainyard(
        airflow, "submit", DOMAIN, "--day", "2017-05-02", "--priority", "30", "--epochs", "1"
    )
    print(high.stdout)
    assert high.returncode == 0, high.stdout + high.stderr + _logs(airflow)
    low = _trainyard(airflow, "submit", DOMAIN, "--day", "2017-05-01", "--priority", "5")
    assert low.returncode == 0, low.stdout + low.stderr
    assert "(team revenue)" in high.stdout and "1 process(es) x 1 node(s), 0 GPU(s)" in high.stdout
    high_id = high.stdout.split()[2]
    low_id = low.stdout.split()[2]
    runs = dict(sqlite_query(db, "SELECT run_id, conf FROM dag_run WHERE dag_id = ?", DAG))
    assert json.loads(runs[high_id]) == {"priority": 30, "epochs": 1}

    # the queue is full: two of the team's jobs wait
    wait_until(
        "the scheduler to create the task instances of both jobs and the cron's run",
        lambda: (
            len(sqlite_query(db, "SELECT DISTINCT run_id FROM task_instance WHERE dag_id = ?", DAG))
            == 3
        ),
        timeout_s=120,
    )
    third = _trainyard(airflow, "submit", DOMAIN, "--day", "2017-05-03")
    print(third.stderr.splitlines()[-1])
    assert third.returncode == 2, third.stdout + third.stderr
    assert "orchestration.quotas.revenue.queued is 2" in third.stderr, third.stderr

    # the cluster policy: every task of a job carries the job's priority
    weights = dict(
        sqlite_query(
            db,
            "SELECT run_id, group_concat(DISTINCT priority_weight) FROM task_instance "
            "WHERE dag_id = ? AND run_id != ? GROUP BY run_id",
            DAG,
            cron,
        )
    )
    assert weights == {high_id: "30", low_id: "5"}, weights

    listed = _trainyard(airflow, "jobs", "--team", "revenue")
    print(listed.stdout)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert rows[0][:4] == ["TEAM", "DOMAIN", "JOB", "KIND"], listed.stdout
    # the order the scheduler starts them in: the highest priority first
    assert [(r[2], r[3], r[5], r[6], r[7]) for r in rows[1:]] == [
        (high_id, "job", "waiting", "30", "1"),
        (cron, "cron", "waiting", "10", "2"),
        (low_id, "job", "waiting", "5", "3"),
    ], listed.stdout

    cancelled = _trainyard(airflow, "cancel", low_id)
    print(cancelled.stdout)
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"cancelled job {low_id} of {DAG}" in cancelled.stdout
    assert sqlite_query(db, "SELECT state FROM dag_run WHERE run_id = ?", low_id) == [("failed",)]
    again = _trainyard(airflow, "cancel", low_id)
    assert again.returncode == 2 and "has ended (failed)" in again.stderr, again.stderr
    left = _trainyard(airflow, "jobs")
    assert low_id not in left.stdout and high_id in left.stdout, left.stdout
