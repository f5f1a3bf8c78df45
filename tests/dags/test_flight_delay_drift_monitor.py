"""The monitor DAG parses, checks a day without training, and its last task emits the drift
asset that schedules the training DAG beside its cron."""

import json

import pytest

from tests.conftest import ROOT

DAG_ID = "flight_delay_drift_monitor"


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags"))


def test_monitor_checks_the_day_then_releases_and_emits_the_events(dagbag) -> None:
    assert dagbag.import_errors == {}
    dag = dagbag.dags[DAG_ID]
    order = ["wait_for_data", "ingest", "validate", "monitor", "release"]
    assert [t.task_id for t in dag.topological_sort()][:5] == order
    release = dag.get_task("release")
    assert release.downstream_task_ids == {"emit_drift_event", "approve_release"}
    assert dag.get_task("approve_release").downstream_task_ids == {"emit_champion_event"}
    assert dag.get_task("emit_champion_event").trigger_rule == "none_failed"
    assert dag.get_task("emit_drift_event").trigger_rule == "all_done"
    assert dag.get_task("monitor").argv[:3] == ["trainyard", "step", "monitor"]
    assert release.argv[:3] == ["trainyard", "step", "release"]
    assert "train" not in dag.task_ids and dag.max_active_runs == 1


def test_the_release_step_knows_a_backfill_from_its_run_type(dagbag) -> None:
    """The trigger template the release step gets renders to the run's kind."""
    import jinja2

    from pipeline_steps.orchestration.release import MONITOR_TRIGGER

    template = jinja2.Environment().from_string(MONITOR_TRIGGER)
    for run_type, kind in [
        ("backfill", "backfill"),
        ("DagRunType.BACKFILL_JOB", "backfill"),
        ("manual", "manual"),
        ("scheduled", "scheduled"),
    ]:
        rendered = template.render(dag_run={"run_type": run_type})
        assert json.loads(rendered) == {"kind": kind}


def test_the_approval_is_airflows_human_in_the_loop_operator(dagbag) -> None:
    from datetime import timedelta

    from airflow.providers.standard.operators.hitl import ApprovalOperator

    approve = dagbag.dags[DAG_ID].get_task("approve_release")
    assert isinstance(approve, ApprovalOperator)
    assert approve.response_timeout == timedelta(hours=24)
    assert "comment" in approve.params


def test_the_serving_example_runs_on_every_move_of_the_champion(dagbag) -> None:
    serving = dagbag.dags["flight_delay_serving"]
    assert [t.task_id for t in serving.topological_sort()] == [
        "serving_day",
        "ingest",
        "validate",
        "score",
    ]
    condition = serving.timetable.asset_condition
    assert (condition.name, condition.uri) == (
        "flight_delay_champion",
        "trainyard://champion/flight_delay",
    )
    emitting = dagbag.dags["flight_delay_training"].get_task("emit_champion_event")
    assert [a.uri for a in emitting.outlets] == ["trainyard://champion/flight_delay"]


def test_the_event_task_reads_and_updates_the_drift_asset(dagbag) -> None:
    emit = dagbag.dags[DAG_ID].get_task("emit_drift_event")
    assert [a.uri for a in emit.outlets] == ["trainyard://drift/flight_delay"]
    assert emit.inlets == emit.outlets and emit.outlets[0].name == "flight_delay_drift"
    assert emit.cooldown_hours == 72.0


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
