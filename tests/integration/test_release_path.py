"""The release path on real days with trained models: a first champion, a challenger staged and
released after its shadow days by the monitor DAG (which records the champion asset event), a
degraded model forced in and rolled back by the monitor, each decision recorded."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from tests.conftest import FIRST_DAY
from tests.pipeline_runs import dag_test, load_history, run_all, run_context

pytestmark = pytest.mark.slow

DAYS = [FIRST_DAY + timedelta(days=n) for n in range(6)]  # 2013-06-04 .. 06-09
ENV = {
    "TRAINYARD_TRAIN__EPOCHS": "3",
    "TRAINYARD_GATE__MIN_AUC": "0.5",
    # a challenger as good as the champion within a few points passes, on its day and pooled
    "TRAINYARD_GATE__MAX_AUC_DROP": "0.05",
    "TRAINYARD_GATE__MAX_LOG_LOSS_RISE": "0.05",
    "TRAINYARD_RELEASE__SHADOW_DAYS": "2",
    "TRAINYARD_RELEASE__ROLLBACK_DAYS": "2",
    "TRAINYARD_RELEASE__ROLLBACK_MARGIN": "0.03",
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
    return dict(client.get_registered_model("flight_delay").aliases)


def _monitor_and_release(settings, day):
    from pipeline_steps.core.context import RunContext
    from pipeline_steps.steps.monitor import monitor
    from pipeline_steps.steps.release import release

    ctx = RunContext(run_id=f"monitor__{day}", logical_date=day, settings=settings)
    monitor(ctx)
    return release(ctx)


def _champion_events(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "WHERE a.name = 'flight_delay_champion' ORDER BY e.id"
        ).fetchall()
    return [row[0] for row in rows]


def test_staged_released_then_a_forced_bad_champion_rolled_back(release_env, airflow_db):
    import json

    from pipeline_steps.core.context import RunContext
    from pipeline_steps.core.manifests import PromoteManifest
    from pipeline_steps.core.settings import load_settings
    from pipeline_steps.evaluation.champion import champion_history

    settings = load_settings()
    load_history(settings, DAYS)

    first = run_context(settings, "first", DAYS[0], "scheduled")
    run_all(first)
    assert first.upstream(PromoteManifest).decision == "promoted"
    second = run_context(settings, "second", DAYS[1], "scheduled")
    run_all(second)
    staged = second.upstream(PromoteManifest)
    assert staged.decision == "staged", staged.reasons
    assert _aliases(settings) == {"champion": "1", "challenger": "2", "staging": "2"}

    waiting = _monitor_and_release(settings, DAYS[2])
    assert waiting.action == "waiting" and waiting.shadow_days == [DAYS[2].isoformat()]
    # The monitor DAG itself decides the second shadow day and emits the champion event.
    dag_test("flight_delay_drift_monitor", DAYS[3])
    report = RunContext(run_id="x", logical_date=DAYS[3], settings=settings).lake.read_json(
        f"reports/release/date={DAYS[3].isoformat()}", "release.json"
    )
    assert report["action"] == "released", report["reasons"]
    assert report["shadow_days"] == [DAYS[2].isoformat(), DAYS[3].isoformat()]
    assert _aliases(settings)["champion"] == "2" and "staging" not in _aliases(settings)
    (event,) = _champion_events(airflow_db)
    extra = json.loads(event)
    assert (extra["version"], extra["from_version"], extra["kind"]) == ("2", "1", "release")

    # A model that learned nothing, forced in over the gate: the monitor takes it back.
    forced = load_settings(
        overrides=[
            "train.epochs=1",
            "train.learning_rate=1e-7",
            "promotion.force=true",
            "promotion.reason=testing the rollback",
        ]
    )
    bad = run_context(forced, "forced", DAYS[4], "manual")
    run_all(bad)
    assert bad.upstream(PromoteManifest).decision == "forced"
    assert _aliases(settings)["champion"] == "3"
    first_bad = _monitor_and_release(settings, DAYS[4])
    assert first_bad.rollback is not None and first_bad.rollback.degraded_in_a_row == 1
    decided = _monitor_and_release(settings, DAYS[5])
    assert decided.action == "rolled_back", decided.rollback
    assert (decided.champion_before, decided.champion_after) == ("3", "2")
    assert _aliases(settings)["champion"] == "2"
    moves = [(m.kind, m.from_version, m.to_version) for m in champion_history(settings).moves]
    assert moves == [
        ("promotion", None, "1"),
        ("release", "1", "2"),
        ("promotion", "2", "3"),
        ("rollback", "3", "2"),
    ]
