"""The hotel-rates DAG: the training chain of the same factory, over its own settings file."""

from itertools import pairwise

import pytest

from tests.conftest import ROOT

DAG_ID = "hotel_rate_training"
CONFIG = str(ROOT / "examples" / "hotel_rates" / "settings.yaml")
STEPS = ["ingest", "validate", "features", "train", "evaluate", "promote"]
TASKS = ["trigger", "wait_for_data", *STEPS, "emit_champion_event"]


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    dagbag = DagBag(dag_folder=str(ROOT / "dags"))
    assert dagbag.import_errors == {}
    return dagbag.dags[DAG_ID]


def test_the_chain_is_the_training_pipeline_on_its_cron_or_its_own_drift(dag) -> None:
    assert [t.task_id for t in dag.topological_sort()] == TASKS
    for upstream, downstream in pairwise(TASKS):
        assert dag.get_task(downstream).upstream_task_ids == {upstream}
    assert dag.timetable.timetable.summary == "0 0 * * *"
    condition = dag.timetable.asset_condition
    assert (condition.name, condition.uri) == ("hotel_rate_drift", "trainyard://drift/hotel_rate")
    assert dag.start_date.isoformat().startswith("2016-07-02")


def test_every_step_and_the_trigger_load_the_example_settings_file(dag) -> None:
    for step in STEPS:
        argv = dag.get_task(step).argv
        assert argv[argv.index("--config") + 1] == CONFIG, step
    train = dag.get_task("train").argv
    assert train[0] == "torchrun" and train[train.index("--no-python") + 1] == "trainyard"
    assert dag.get_task("trigger").config == CONFIG
    # The trigger form's defaults are the example's settings, not the flights defaults.
    assert dag.params["window_days"] == 42 and dag.params["epochs"] == 40


def test_the_form_is_checked_over_the_example_settings_file(monkeypatch, tmp_path) -> None:
    """A value the example's settings refuse together with the form's is refused by the trigger
    task, whatever ``TRAINYARD_CONFIG`` names."""
    from pipeline_steps.orchestration.trigger import RunRefused, check_form

    other = tmp_path / "other.yaml"
    other.write_text("features:\n  window_days: 30\n")
    monkeypatch.setenv("TRAINYARD_CONFIG", str(other))
    # min_train_days is 14 in the example: a window of 10 days cannot hold it.
    with pytest.raises(RunRefused, match="window_days"):
        check_form([("features.window_days", 10, 42)], CONFIG)
    check_form([("features.window_days", 10, 30)])  # the flights defaults accept it
