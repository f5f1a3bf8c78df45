"""The champion over time against a real local MLflow registry: rolling back moves the alias with
an audit record and refuses what it cannot do without changing anything; ``report --champion``
reads the moves from the registry and the daily score from the monitoring experiment."""

import json
from dataclasses import replace
from datetime import date
from types import SimpleNamespace

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient

from pipeline_steps.commands.cli import main
from pipeline_steps.commands.report import print_report
from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.manifests import DriftSignal, ScoredChampion
from pipeline_steps.evaluation.champion import champion_moves, rollback
from pipeline_steps.steps.promote import promote
from tests.conftest import environ_of
from tests.manifests import (
    scored,
)
from tests.registry import logged_model, record_evaluated

DAY = date(2013, 6, 4)


@pytest.fixture
def settings(make_settings):
    # promotions move the champion at once here (the staged release: tests/unit/test_release.py)
    return make_settings("gate.min_auc=0.6", "gate.max_auc_drop=0.0", "release.mode=direct")


def _client(settings) -> MlflowClient:
    return MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)


def _promote(settings, run_id: str, auc: float, day: date = DAY) -> str:
    """Record a run up to evaluate against the live champion and promote it; its version."""
    client = _client(settings)
    try:
        live = client.get_model_version_by_alias("flight_delay", "champion")
        champion = ScoredChampion(
            version=str(live.version),
            model_uri=f"models:/flight_delay/{live.version}",
            metrics=scored(float(live.tags["trainyard.challenger_auc"])),
        )
    except mlflow.exceptions.MlflowException:
        champion = None
    ctx = RunContext(run_id=run_id, logical_date=day, settings=settings)
    return promote(record_evaluated(ctx, *logged_model(settings), auc, champion)).version


def _champion(settings) -> str:
    return str(_client(settings).get_model_version_by_alias("flight_delay", "champion").version)


def _registry(settings) -> list[tuple[str, dict[str, str], str, list[str]]]:
    """Every version of every registered model: tags, description, aliases."""
    client = _client(settings)
    return sorted(
        (f"{v.name}/{v.version}", dict(v.tags), v.description or "", sorted(v.aliases))
        for v in client.search_model_versions("")
    )


def test_rollback_moves_the_champion_back_with_an_audit_record(settings) -> None:
    assert _promote(settings, "run-1", 0.7) == "1"
    assert _promote(settings, "run-2", 0.8, date(2013, 6, 5)) == "2"
    move = rollback(settings, "1", "v2 scores the new carrier badly", "ada")
    assert _champion(settings) == "1"
    assert (move.from_version, move.to_version, move.by) == ("2", "1", "ada")

    version = _client(settings).get_model_version("flight_delay", "1")
    tags = version.tags
    assert tags["trainyard.rollback_from"] == "2"
    assert tags["trainyard.rollback_reason"] == "v2 scores the new carrier badly"
    assert tags["trainyard.rollback_by"] == "ada"
    assert tags["trainyard.rollback_at"] == move.at
    assert json.loads(tags["trainyard.rollbacks.1"]) == {
        "from": "2",
        "reason": "v2 scores the new carrier badly",
        "by": "ada",
        "at": move.at,
    }
    assert tags["trainyard.decision"] == "promoted"  # its own decision is kept
    assert version.description.startswith("Decision: **promoted**")
    assert version.description.endswith(
        f"Rollback: on {move.at} ada moved the champion back to this version from version 2: "
        "v2 scores the new carrier badly"
    )

    # Back and forth: every rollback is its own record, in the order they happened.
    rollback(settings, "2", "v2 was fine after all", "bob")
    rollback(settings, "1", "it was not", "ada")
    moves = [
        (m.kind, m.from_version, m.to_version, m.by)
        for m in champion_moves(_client(settings), settings.mlflow)
    ]
    assert moves == [
        ("promotion", None, "1", "cli"),
        ("promotion", "1", "2", "cli"),
        ("rollback", "2", "1", "ada"),
        ("rollback", "1", "2", "bob"),
        ("rollback", "2", "1", "ada"),
    ]
    tags = _client(settings).get_model_version("flight_delay", "1").tags
    assert json.loads(tags["trainyard.rollbacks.2"])["reason"] == "it was not"
    assert tags["trainyard.rollback_reason"] == "it was not"  # the flat tags: the latest


def test_a_backfill_compares_with_the_champion_the_original_run_saw(settings) -> None:
    """A date already decided by a run that was not a backfill keeps the champion that run
    compared with, rollbacks included; a date never decided is reconstructed from promotions,
    where a rollback (which has no logical date) cannot count."""
    from pipeline_steps.core.tracking import champion_as_of, reference_champion
    from pipeline_steps.core.trigger import Trigger

    assert _promote(settings, "run-1", 0.7, date(2013, 6, 2)) == "1"
    assert _promote(settings, "run-2", 0.8, date(2013, 6, 3)) == "2"
    rollback(settings, "1", "v2 scores the new carrier badly", "ada")
    assert _promote(settings, "run-3", 0.65, DAY) == "3"  # judged against version 1
    client, cfg = _client(settings), settings.mlflow

    def as_of(day: date) -> str | None:
        found = champion_as_of(client, cfg, day)
        return str(found.version) if found else None

    assert as_of(date(2013, 6, 2)) is None  # the first run had no champion
    assert as_of(date(2013, 6, 3)) == "1"
    assert as_of(DAY) == "1"  # after the rollback, not version 2
    assert as_of(date(2013, 6, 5)) == "2"  # never decided: the newest promotion before it
    backfill = Trigger(kind="backfill")
    assert str(reference_champion(client, cfg, backfill, DAY).version) == "1"

    # A backfill's own versions never stand for the date.
    day = date(2013, 6, 5)
    ctx = RunContext(run_id="backfill-5", logical_date=day, settings=settings)
    champion = ScoredChampion(version="2", model_uri="models:/flight_delay/2", metrics=scored(0.8))
    backfilled = record_evaluated(ctx, *logged_model(settings), 0.9, champion)
    promote(replace(backfilled, trigger=backfill))
    assert as_of(day) == "2"
    assert _champion(settings) == "1"


def _unregistered_version(settings) -> None:
    """A version 3 registered by hand, without a promote step's decision."""
    mlflow.register_model(logged_model(settings)[1], "flight_delay")


def _other_model(settings) -> None:
    """Versions 1..4 of another registered model."""
    client = _client(settings)
    client.create_registered_model("other")
    source = client.get_model_version("flight_delay", "1").source
    for _ in range(4):
        client.create_model_version("other", source)


@pytest.fixture(scope="module")
def refusal_registry(tmp_path_factory):
    """One registry for every refused rollback (a refusal changes nothing): versions 1 and 2
    promoted, 3 registered by hand, and another model's versions 1..4; and its state."""
    from pipeline_steps.core.settings import load_settings

    home = tmp_path_factory.mktemp("refusals") / "home"
    settings = load_settings(
        overrides=["gate.min_auc=0.6", "gate.max_auc_drop=0.0", "release.mode=direct"],
        environ=environ_of(home),
    )
    _promote(settings, "run-1", 0.7)
    _promote(settings, "run-2", 0.8)
    _unregistered_version(settings)
    _other_model(settings)  # its version 4 is not flight_delay's
    return settings, _registry(settings)


@pytest.mark.parametrize(
    ("to_version", "reason", "message"),
    [
        ("9", "r", r"--to-version 9: registered model 'flight_delay' has no version 9"),
        ("4", "r", r"--to-version 4: registered model 'flight_delay' has no version 4"),
        ("two", "r", r"--to-version 'two': a model version is a number from 1"),
        ("0", "r", r"--to-version '0': a model version is a number from 1"),
        ("2", "r", r"--to-version 2: version 2 is already the champion"),
        ("1", "  ", r"--reason is empty"),
        ("3", "r", r"--to-version 3: no promote decision is recorded on it"),
    ],
)
def test_a_refused_rollback_changes_nothing(refusal_registry, to_version, reason, message) -> None:
    settings, before = refusal_registry
    with pytest.raises(StepError, match=message):
        rollback(settings, to_version, reason, "ada")
    assert _registry(settings) == before
    assert _champion(settings) == "2"


def test_the_rollback_command_names_the_parameter_and_moves_the_champion(
    settings, tmp_path, monkeypatch, capsys
) -> None:
    _promote(settings, "run-1", 0.7)
    _promote(settings, "run-2", 0.8)
    monkeypatch.setenv("TRAINYARD_HOME", str(tmp_path / "home"))
    assert main(["rollback", "--to-version", "9", "--reason", "r"]) == 2
    assert "trainyard rollback failed (permanent): --to-version 9:" in capsys.readouterr().err
    monkeypatch.setattr("pipeline_steps.evaluation.champion.getpass.getuser", lambda: "os-user")
    assert main(["rollback", "--to-version", "1", "--reason", "v2 is off"]) == 0
    out = capsys.readouterr().out
    assert "champion moved back from version 2 to version 1 by os-user" in out
    assert _champion(settings) == "1"
    tags = _client(settings).get_model_version("flight_delay", "1").tags
    assert tags["trainyard.rollback_by"] == "os-user"


def _monitored(settings, day: date, version: str, scores: list[float], crossed: bool) -> None:
    """The drift monitor's record of ``day``: the champion scored on four labelled rows."""
    from pipeline_steps.quality.calibration import PREDICTION, Verdict
    from pipeline_steps.steps.monitor import Champion, log_champion_day

    signal = DriftSignal(
        name="label",
        kind="label",
        statistic="rate_change",
        value=0.2 if crossed else 0.01,
        threshold=0.05,
        null_quantile=0.03,
        p_value=0.001 if crossed else 0.5,
        importance=None,
        crossed=crossed,
    )
    today = pd.DataFrame({"delayed": [0, 1, 0, 1], PREDICTION: scores})
    log_champion_day(
        RunContext(run_id=f"monitor-{day}", logical_date=day, settings=settings),
        Champion(version=version, model_uri=f"models:/flight_delay/{version}", window=None),
        today,
        np.asarray(scores),
        SimpleNamespace(label="delayed", task="binary", classes=()),  # type: ignore[arg-type]
        Verdict(signals=[signal], triggers=("label",)),
    )


def test_the_champion_report_lists_every_move_and_the_daily_score(settings, capsys) -> None:
    _promote(settings, "run-1", 0.7)
    _promote(settings, "run-2", 0.8, date(2013, 6, 5))
    _promote(settings, "run-3", 0.75, date(2013, 6, 6))  # rejected: not a move
    rollback(settings, "1", "v2 scores the new carrier badly", "ada")
    _monitored(settings, date(2013, 6, 5), "1", [0.2, 0.8, 0.4, 0.6], crossed=False)
    _monitored(settings, date(2013, 6, 6), "2", [0.2, 0.8, 0.7, 0.6], crossed=True)
    mlflow_run = _client(settings).get_model_version("flight_delay", "2").run_id

    print_report(settings, champion=True)
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0] == "registered model flight_delay: champion v1, challenger v3"
    assert "moves of the champion alias, oldest first (3 moves)" in text
    moves = [line for line in lines if " -> " in line]
    assert [line.split("UTC  ")[1] for line in moves] == [
        "none -> v1  PROMOTED  logical date 2013-06-04",
        "v1 -> v2  PROMOTED  logical date 2013-06-05",
        "v2 -> v1  ROLLBACK by ada",
    ]
    assert f"      run run-2 (MLflow run {mlflow_run}), trigger cli" in lines
    assert "      - v2 scores the new carrier badly" in lines
    assert any(line.startswith("      - AUC challenger - champion +0.1000") for line in lines)
    assert "the champion day by day (monitoring experiment flight_delay_monitoring, 2 days)" in text
    days = [line.split() for line in lines if line.startswith("  2013-06-0")]
    assert days == [
        ["2013-06-05", "1", "1.0000", days[0][3], "1.0000", "0.5000", "4", "0.5000", "none"],
        ["2013-06-06", "2", "0.7500", days[1][3], "0.7500", "0.5000", "4", "0.5750", "label"],
    ]

    print_report(settings, start=date(2013, 6, 6), champion=True)
    text = capsys.readouterr().out
    assert "(monitoring experiment flight_delay_monitoring, 1 day)" in text
    assert "2013-06-05  " not in text and "(3 moves)" in text


def test_the_daily_score_of_an_ordinal_champion_is_read_back_in_its_own_metrics(
    settings, capsys
) -> None:
    """The report's daily table is of the champion's task: an ordinal champion's class MAE and
    QWK as the monitor logged them, not the columns of a binary one."""
    from pipeline_steps.evaluation.metrics import holdout_metrics
    from pipeline_steps.quality.calibration import Verdict
    from pipeline_steps.steps.monitor import Champion, log_champion_day

    _promote(settings, "run-1", 0.7)
    classes = ("Fair", "Good", "Ideal")
    labels = [0, 1, 2, 1, 2]
    probabilities = np.array(
        [[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.1, 0.2, 0.7], [0.6, 0.3, 0.1], [0.1, 0.6, 0.3]]
    )
    log_champion_day(
        RunContext(run_id="monitor-ordinal", logical_date=date(2013, 6, 5), settings=settings),
        Champion(version="1", model_uri="models:/flight_delay/1", window=None),
        pd.DataFrame({"cut": labels}),
        probabilities,
        SimpleNamespace(label="cut", task="ordinal", classes=classes),  # type: ignore[arg-type]
        Verdict(signals=[], triggers=("label",)),
    )
    expected = holdout_metrics(labels, probabilities, task="ordinal", classes=classes)
    assert 0 < expected.class_mae < 1 and expected.qwk == expected.qwk

    print_report(settings, champion=True)
    lines = capsys.readouterr().out.splitlines()
    header = next(line.split("  ") for line in lines if line.strip().startswith("date "))
    assert [c.strip() for c in header if c.strip()][2:6] == [
        "class MAE",
        "QWK",
        "accuracy",
        "log loss",
    ]
    (day,) = [line.split() for line in lines if line.startswith("  2013-06-05")]
    assert day[2:6] == [
        f"{expected.class_mae:.4f}",
        f"{expected.qwk:.4f}",
        f"{expected.accuracy:.4f}",
        f"{expected.log_loss:.4f}",
    ]
    assert day[6] == "5" and "n/a" not in day[2:6]


def test_the_champion_report_without_history_says_so(settings, capsys) -> None:
    print_report(settings, champion=True)
    text = capsys.readouterr().out
    assert "champion none, challenger none" in text
    assert "none: no run has promoted a version yet" in text
    assert "none: the drift monitor has not scored the champion on these days" in text


def test_the_challenger_alias_cannot_be_the_champion_alias(make_settings) -> None:
    from pipeline_steps.core.settings import SettingsError

    with pytest.raises(SettingsError, match=r"mlflow.challenger_alias and mlflow.champion_alias"):
        make_settings("mlflow.challenger_alias=champion")


def test_a_move_without_a_recorded_origin_follows_the_move_before() -> None:
    """Versions promoted before ``trainyard.moved_from`` was recorded: the origin is the previous
    move's target, in the order of their registration."""
    from pipeline_steps.evaluation.champion import versions_moves

    def version(number: int, created: int, **tags: str) -> SimpleNamespace:
        base = {"trainyard.decision": "promoted", "trainyard.logical_date": "2013-06-04"}
        return SimpleNamespace(
            version=str(number), creation_timestamp=created, run_id="r", tags=base | tags
        )

    moves = versions_moves(
        [
            version(2, 2_000),
            version(1, 1_000),
            version(3, 3_000, **{"trainyard.decision": "rejected"}),
            version(4, 4_000, **{"trainyard.trigger_kind": "backfill"}),
        ]
    )
    assert [(m.from_version, m.to_version) for m in moves] == [(None, "1"), ("1", "2")]
