"""The release path on real days with trained models: a first champion; a challenger that passed
the gate on its day refused on its shadow days; one staged and released by the monitor DAG
(which records the champion asset event); a degraded model forced in and rolled back by the
monitor; each decision recorded."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from tests.conftest import FIRST_DAY
from tests.pipeline_runs import dag_test, load_history, run_all, run_context

pytestmark = pytest.mark.slow

DAYS = [FIRST_DAY + timedelta(days=n) for n in range(8)]  # 2013-06-04 .. 06-11
ENV = {
    "TRAINYARD_TRAIN__EPOCHS": "3",
    "TRAINYARD_GATE__MIN_AUC": "0.5",
    # a challenger as good as the champion within a few points passes, on its day and pooled
    "TRAINYARD_GATE__MAX_AUC_DROP": "0.05",
    "TRAINYARD_GATE__MAX_LOG_LOSS_RISE": "0.1",
    "TRAINYARD_RELEASE__SHADOW_DAYS": "2",
    "TRAINYARD_RELEASE__ROLLBACK_DAYS": "2",
    "TRAINYARD_DRIFT__CURRENT_DAYS": "1",
    "TRAINYARD_DRIFT__MIN_REFERENCE_DAYS": "2",
    "TRAINYARD_VALIDATION__DATA_DOCS": "false",
}


@pytest.fixture
def release_env(airflow_env, monkeypatch):
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    return airflow_env


def _aliases(settings) -> dict[str, str]:
    from mlflow import MlflowClient

    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    return {k: str(v) for k, v in client.get_registered_model("flight_delay").aliases.items()}


def _monitor_and_release(settings, day):
    from pipeline_steps.core.context import RunContext
    from pipeline_steps.steps.monitor import monitor
    from pipeline_steps.steps.release import release

    ctx = RunContext(run_id=f"monitor__{day}", logical_date=day, settings=settings)
    monitor(ctx)
    return release(ctx)


def _champion_events(db: Path, run_id: str) -> list[str]:
    """The champion asset events a DAG run recorded (the metadata DB is the test session's)."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "WHERE a.name = 'flight_delay_champion' AND e.source_run_id = ? ORDER BY e.id",
            (run_id,),
        ).fetchall()
    return [row[0] for row in rows]


def test_refused_in_shadow_released_then_a_forced_bad_champion_rolled_back(release_env, airflow_db):
    import json

    from pipeline_steps.core.context import RunContext
    from pipeline_steps.core.manifests import PromoteManifest
    from pipeline_steps.core.settings import load_settings
    from pipeline_steps.evaluation.champion import champion_history

    settings = load_settings()
    load_history(settings, DAYS)
    lake = RunContext(run_id="x", logical_date=DAYS[0], settings=settings).lake

    first = run_context(settings, "first", DAYS[0], "scheduled")
    run_all(first)
    assert first.upstream(PromoteManifest).decision == "promoted"

    # Version 2 passes the gate on its own day, then is worse on the next two: retired.
    second = run_context(settings, "second", DAYS[1], "scheduled")
    run_all(second)
    assert second.upstream(PromoteManifest).decision == "staged"
    assert _aliases(settings) == {"champion": "1", "challenger": "2", "staging": "2"}
    waiting = _monitor_and_release(settings, DAYS[2])
    assert waiting.action == "waiting" and waiting.shadow_days == [DAYS[2].isoformat()]
    refused = _monitor_and_release(settings, DAYS[3])
    assert (refused.action, refused.outcome) == ("retired", "refuse"), refused.reasons
    assert refused.shadow_days == [DAYS[2].isoformat(), DAYS[3].isoformat()]
    assert any(r.startswith("AUC challenger - champion") for r in refused.reasons)
    assert _aliases(settings) == {"champion": "1", "challenger": "2"}
    assert lake.read_json("runs/second", "release.json")["action"] == "retired"

    # The day's model trained again is version 1's twin (the same training set, settings and
    # code): recorded as identical, nothing registered or staged.
    again = run_context(settings, "first-again", DAYS[0], "manual")
    run_all(again)
    assert again.upstream(PromoteManifest).decision == "identical"
    assert _aliases(settings) == {"champion": "1", "challenger": "2"}
    # Trained from another seed, a model as good: staged, and released by the monitor DAG after
    # its shadow days, which records the champion asset event.
    reseeded = load_settings(overrides=["train.seed=7"])
    again = run_context(reseeded, "first-reseeded", DAYS[0], "manual")
    run_all(again)
    assert again.upstream(PromoteManifest).decision == "staged"
    assert _monitor_and_release(settings, DAYS[4]).action == "waiting"
    monitored = dag_test("flight_delay_drift_monitor", DAYS[5])
    report = lake.read_json(f"reports/release/date={DAYS[5].isoformat()}", "release.json")
    assert report["action"] == "released", report["reasons"]
    assert _aliases(settings) == {"champion": "3", "challenger": "3"}
    (event,) = _champion_events(airflow_db, monitored.run_id)
    extra = json.loads(event)
    assert (extra["version"], extra["from_version"], extra["kind"]) == ("3", "1", "release")

    # A model that learned nothing, forced in over the gate: the monitor takes it back.
    forced = load_settings(
        overrides=[
            "train.epochs=1",
            "train.learning_rate=1e-7",
            "promotion.force=true",
            "promotion.reason=testing the rollback",
        ]
    )
    bad = run_context(forced, "forced", DAYS[5], "manual")
    run_all(bad)
    assert bad.upstream(PromoteManifest).decision == "forced"
    assert _aliases(settings)["champion"] == "4"
    first_bad = _monitor_and_release(settings, DAYS[6])
    assert first_bad.rollback is not None and first_bad.rollback.degraded_in_a_row == 1
    decided = _monitor_and_release(settings, DAYS[7])
    assert decided.action == "rolled_back", decided.rollback
    assert (decided.champion_before, decided.champion_after) == ("4", "3")
    assert _aliases(settings)["champion"] == "3"
    moves = [(m.kind, m.from_version, m.to_version) for m in champion_history(settings).moves]
    assert moves == [
        ("promotion", None, "1"),
        ("release", "1", "3"),
        ("promotion", "3", "4"),
        ("rollback", "4", "3"),
    ]
