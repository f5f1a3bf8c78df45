"""The real tuning DAG under dag.test(): mapped trials train, the study continues on a re-run."""

from datetime import timedelta

import optuna
import pytest
from mlflow import MlflowClient

from tests.conftest import FIRST_DAY
from tests.pipeline_runs import dag_test

pytestmark = pytest.mark.slow


@pytest.fixture
def airflow_env(airflow_env, monkeypatch):
    monkeypatch.setenv("TRAINYARD_VALIDATION__DATA_DOCS", "false")
    return airflow_env


def _tune(run_day, conf):
    return dag_test("flight_delay_tuning", run_day, conf)


def test_a_small_study_runs_as_mapped_trials_and_continues_when_run_again(airflow_env) -> None:
    from pipeline_steps.core.lake import Lake
    from pipeline_steps.core.settings import load_settings
    from pipeline_steps.tuning.study import open_study

    conf = {
        "logical_date": FIRST_DAY.isoformat(),
        "trials": 3,
        "parallel_trials": 2,
        "epochs": 1,
        "sampler": "random",
        "pruner": "none",
    }
    first = _tune(FIRST_DAY, conf)
    settings = load_settings()
    lake = Lake(settings.lake_root)
    best = lake.read_json("tuning", "best", "flight_delay.json")
    study = open_study(settings, best["study"])
    states = optuna.trial.TrialState
    assert len(study.get_trials(states=(states.COMPLETE,))) == 3
    assert best["value"] == study.best_value and best["trial"] == study.best_trial.number
    assert best["logical_date"] == FIRST_DAY.isoformat()
    # one frozen training set for the whole study: every trial trained on the run's
    trained = [
        lake.read_json(Lake.run_dir(first.run_id), "trials", str(n), "train.json") for n in range(3)
    ]
    assert {t["training_set_sha256"] for t in trained} == {best["training_set_sha256"]}

    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    experiment = client.get_experiment_by_name(settings.tuning.experiment)
    children = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{best['mlflow_parent_run_id']}'",
    )
    assert len(children) == 3
    assert {r.data.tags["trainyard.trial_state"] for r in children} == {"COMPLETE"}
    assert all("val_loss" in r.data.metrics for r in children)

    # run again for the same day with a bigger study: only the missing trial runs
    again = _tune(FIRST_DAY + timedelta(days=1), {**conf, "trials": 4})
    study = open_study(settings, best["study"])
    assert len(study.get_trials(states=(states.COMPLETE,))) == 4
    assert lake.exists(Lake.run_dir(again.run_id), "trials", "3", "train.json")
    assert not lake.exists(Lake.run_dir(again.run_id), "trials", "0")
