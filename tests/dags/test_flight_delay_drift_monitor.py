"""The monitor DAG parses, checks a day without training, and its last task emits the drift
asset that schedules the training DAG beside its cron."""

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

DAG_ID = "flight_delay_drift_monitor"


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags"))


def test_monitor_is_a_chain_that_ends_in_the_drift_event(dagbag) -> None:
    assert dagbag.import_errors == {}
    dag = dagbag.dags[DAG_ID]
    order = ["wait_for_data", "ingest", "validate", "monitor", "emit_drift_event"]
    assert [t.task_id for t in dag.topological_sort()] == order
    assert dag.get_task("monitor").argv[:3] == ["trainyard", "step", "monitor"]
    assert "train" not in dag.task_ids and dag.max_active_runs == 1


def test_the_event_task_reads_and_updates_the_drift_asset(dagbag) -> None:
    from pipeline_steps.orchestration import DRIFT_ASSET

    emit = dagbag.dags[DAG_ID].get_task("emit_drift_event")
    assert emit.outlets == [DRIFT_ASSET] and emit.inlets == [DRIFT_ASSET]
    assert emit.cooldown_hours == 72.0
    assert DRIFT_ASSET.uri == "trainyard://drift/flight_delay"


def test_training_is_scheduled_by_its_cron_or_the_drift_asset(dagbag) -> None:
    from airflow.timetables.assets import AssetOrTimeSchedule

    training = dagbag.dags["flight_delay_training"]
    assert isinstance(training.timetable, AssetOrTimeSchedule)
    assert training.timetable.timetable.summary == "0 0 * * *"
    condition = training.timetable.asset_condition
    assert (condition.name, condition.uri) == (
        "flight_delay_drift",
        "trainyard://drift/flight_delay",
    )


def test_parsing_the_monitor_imports_no_heavy_library() -> None:
    code = (
        "import sys, json; sys.path.insert(0, 'dags'); import flight_delay_drift_monitor; "
        "heavy = ['torch', 'pandas', 'great_expectations', 'feast', 'mlflow', 'pyarrow', "
        "'numpy', 'scipy']; print(json.dumps([m for m in heavy if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
