"""The tuning DAG parses, has its shape, maps its trials, and checks its form."""

from datetime import timedelta

import pytest

from tests.conftest import ROOT
from tests.dags.templates import rendered

DAG_ID = "flight_delay_tuning"
TASKS = ["tuning_day", "ingest", "validate", "features", "prepare_study", "trial", "record_best"]


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    return bag.dags[DAG_ID]


def test_the_study_is_a_chain_with_mapped_trials(dag) -> None:
    assert [t.task_id for t in dag.topological_sort()] == TASKS
    trial = dag.get_task("trial")
    assert trial.is_mapped
    assert trial.upstream_task_ids == {"prepare_study"}
    # trials run the real train step under torchrun, with the steps' retries
    assert trial.partial_kwargs["retries"] == 2
    assert trial.partial_kwargs["retry_delay"] == timedelta(seconds=60)
    assert trial.partial_kwargs["max_active_tis_per_dagrun"] == 4
    argv = trial.partial_kwargs["argv"]
    assert argv[0] == "torchrun" and argv[argv.index("--no-python") + 1 :][:3] == [
        "trainyard",
        "step",
        "train",
    ]
    assert dag.get_task("record_best").trigger_rule == "all_done"
    assert dag.schedule is None and dag.max_active_runs == 1


def _validate(dag, **conf):
    """What the scheduler's copy of the DAG does with a trigger's conf before it creates a run."""
    from airflow.serialization.serialized_objects import DagSerialization

    serialized = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    return serialized.params.deep_merge(conf).validate()


def test_the_form_offers_the_study_settings_and_refuses_bad_values(dag) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    params = dag.params
    assert set(params) == {
        "logical_date",
        "trials",
        "parallel_trials",
        "sampler",
        "pruner",
        "search_space",
        "time_budget_s",
        "epochs",
    }
    assert params["sampler"] == "tpe" and params["pruner"] == "median"
    for name, value in [
        ("sampler", "bayes"),
        ("pruner", "asha"),
        ("parallel_trials", 5),  # above tuning.max_parallel_trials
        ("trials", 0),
        ("logical_date", "June 1st"),
    ]:
        with pytest.raises(ParamValidationError, match=name):
            _validate(dag, **{name: value})
    values = _validate(dag, logical_date="2013-06-01", trials=5, sampler="random")
    assert (values["logical_date"], values["trials"], values["sampler"]) == (
        "2013-06-01",
        5,
        "random",
    )


def test_a_monthly_schedule_comes_from_the_settings(monkeypatch) -> None:
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("TRAINYARD_TUNING__SCHEDULE", "0 3 1 * *")
    dag = DagBag(dag_folder=str(ROOT / "dags")).dags[DAG_ID]
    assert dag.schedule == dag.timetable.expression == "0 3 1 * *"


def test_on_kubernetes_a_trial_is_the_train_pod_with_its_gpus(make_settings) -> None:
    from pipeline_steps.orchestration.launch import step_argv
    from pipeline_steps.orchestration.trial_pod import PodTrialOperator
    from pipeline_steps.orchestration.tuning import trial_tasks, tuning_run_args

    settings = make_settings("orchestration.runtime=kubernetes", "kubernetes.train_gpus=2")
    mapped = trial_tasks(settings, tuning_run_args(), [0, 1])
    assert mapped.operator_class is PodTrialOperator
    kwargs = mapped.partial_kwargs
    assert kwargs["cmds"] == step_argv("train", settings, tuning_run_args())
    assert "--nproc-per-node=2" in kwargs["cmds"]
    assert rendered(kwargs["container_resources"].limits["nvidia.com/gpu"]) == "2"
    assert kwargs["env_vars"]["TRAINYARD_TUNING__STORAGE"] == settings.tuning.storage


def test_the_day_to_tune_for_is_the_forms_else_the_runs_and_never_missing() -> None:
    from datetime import UTC, datetime

    from airflow.sdk.exceptions import AirflowFailException

    from pipeline_steps.orchestration.tuning import TuningDayOperator

    task = TuningDayOperator()
    june = datetime(2013, 6, 2, tzinfo=UTC)
    assert task.execute({"params": {"logical_date": "2013-06-01"}, "logical_date": june}) == (
        "2013-06-01"
    )
    assert task.execute({"params": {"logical_date": None}, "logical_date": june}) == "2013-06-02"
    with pytest.raises(AirflowFailException, match="trigger it with logical_date"):
        task.execute({"params": {"logical_date": None}, "logical_date": None})


def test_the_docs_list_every_key_of_the_tuning_form() -> None:
    import re

    from pipeline_steps.orchestration.params import TUNING_FORM

    table = (ROOT / "docs" / "tuning.md").read_text()
    documented = set(re.findall(r"^  \| `(\w+)` \|", table, flags=re.MULTILINE))
    assert documented == {*TUNING_FORM, "logical_date"}
    for key, field in TUNING_FORM.items():
        assert f"| `{key}` | {field.title} " in table, key
