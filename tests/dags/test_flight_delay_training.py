"""The DAG parses cleanly, has the designed shape and retries, and stays light to parse."""

from datetime import timedelta
from itertools import pairwise

import pytest

from tests.conftest import ROOT

DAG_ID = "flight_delay_training"
STEPS = ["ingest", "validate", "features", "train", "evaluate", "promote"]
TASKS = ["trigger", "wait_for_data", *STEPS, "emit_champion_event"]


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags"))


def test_no_import_errors(dagbag) -> None:
    assert dagbag.import_errors == {}
    assert DAG_ID in dagbag.dag_ids


def test_task_graph_is_a_chain_of_the_steps(dagbag) -> None:
    dag = dagbag.dags[DAG_ID]
    assert [t.task_id for t in dag.topological_sort()] == TASKS
    for upstream, downstream in pairwise(TASKS):
        assert dag.get_task(downstream).upstream_task_ids == {upstream}


def test_schedule_and_run_limits(dagbag) -> None:
    dag = dagbag.dags[DAG_ID]
    assert dag.timetable.timetable.summary == "0 0 * * *"
    assert dag.timetable.summary == "Asset or 0 0 * * *"
    assert dag.start_date.isoformat().startswith("2013-01-01")
    assert dag.catchup is False
    assert dag.max_active_runs == 1


def test_every_step_retries_with_capped_exponential_backoff(dagbag) -> None:
    dag = dagbag.dags[DAG_ID]
    # a try of the trigger task lost to its worker is retried (a refused run fails at once:
    # AirflowFailException); waiting for data has nothing transient to retry
    assert dag.get_task("trigger").retries == 2
    sensor = dag.get_task("wait_for_data")
    assert sensor.retries == 0 and sensor.mode == "reschedule"
    for task in (dag.get_task(step) for step in STEPS):
        assert task.retries == 2
        assert task.retry_delay == timedelta(seconds=60)
        assert task.retry_exponential_backoff == 2.0
        assert task.max_retry_delay == timedelta(seconds=900)


def test_steps_run_the_trainyard_cli_and_train_goes_through_torchrun(dagbag) -> None:
    dag = dagbag.dags[DAG_ID]
    run_args = [
        "--run-id",
        "{{ run_id }}",
        "--logical-date",
        "{{ ti.xcom_pull(task_ids='trigger')['logical_date'] }}",
        "--trigger",
        "{{ ti.xcom_pull(task_ids='trigger')['trigger'] | tojson }}",
    ]
    ingest = dag.get_task("ingest").argv
    assert ingest[:9] == ["trainyard", "step", "ingest", *run_args]
    assert "train.epochs={{ params.epochs | tojson }}" in ingest
    train = dag.get_task("train").argv
    assert train[0] == "torchrun"
    assert train[train.index("--no-python") + 1 :] == ["trainyard", "step", "train", *ingest[3:]]


def test_torchrun_starts_the_processes_the_trigger_form_asks_for(dagbag) -> None:
    """The form's ``nproc_per_node`` is what torchrun starts, not only what the step is told."""
    import jinja2

    train = dagbag.dags[DAG_ID].get_task("train").argv
    (launch,) = (a for a in train if a.startswith("--nproc-per-node="))
    template = jinja2.Environment().from_string(launch)
    assert template.render(params={"nproc_per_node": 2}) == "--nproc-per-node=2"
    told = train[train.index("--no-python") + 1 :]
    (setting,) = (a for a in told if a.startswith("train.nproc_per_node="))
    rendered = jinja2.Environment().from_string(setting).render(params={"nproc_per_node": 2})
    assert rendered == "train.nproc_per_node=2"
