"""A backfill's decisions do not depend on its concurrency or on the live alias meanwhile.

Three demo days are backfilled twice from the same state (history loaded, a champion promoted
by a scheduled run of the day before): once one run after the other (concurrency 1), once with
the three runs' steps interleaved in mixed orders as three concurrent runs may execute them
(concurrency 3), while a scheduled run of a later date moves the live alias halfway through.
"""

from __future__ import annotations

import shutil
from datetime import date, timedelta
from pathlib import Path

import pytest
from mlflow import MlflowClient

from pipeline_steps.core.manifests import EvaluateManifest, PromoteManifest
from pipeline_steps.core.settings import Settings
from pipeline_steps.core.tracking import DATE_TAG, DECISION_TAG, KIND_TAG, connect
from tests.conftest import FIRST_DAY
from tests.pipeline_runs import demo_settings, load_history, run_all, run_context, run_step

pytestmark = pytest.mark.slow

BACKFILL = [FIRST_DAY + timedelta(days=n) for n in (1, 2, 3)]


@pytest.fixture(scope="module")
def champion_home(seeded_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The seeded lake with the backfill range's history loaded and version 1 promoted by a
    scheduled run of FIRST_DAY."""
    home = tmp_path_factory.mktemp("backfill") / "home"
    shutil.copytree(seeded_home, home)
    settings = demo_settings(home)
    load_history(settings, [FIRST_DAY, *BACKFILL])
    run_all(run_context(settings, "scheduled__first", FIRST_DAY, "scheduled"))
    return home


def _copy(champion_home: Path, tmp_path: Path, name: str) -> Settings:
    home = tmp_path / name
    shutil.copytree(champion_home, home)
    return demo_settings(home)


def _outcomes(settings: Settings) -> dict[date, tuple[str, str | None, float, float]]:
    """Per backfilled day: the decision, the champion compared with, the two scores."""
    found = {}
    for day in BACKFILL:
        ctx = run_context(settings, f"backfill__{day}", day, "backfill")
        evaluation, decision = ctx.upstream(EvaluateManifest), ctx.upstream(PromoteManifest)
        champion = evaluation.champion.version if evaluation.champion else None
        found[day] = (
            decision.decision,
            champion,
            evaluation.challenger.metrics.auc,
            evaluation.challenger.metrics.log_loss,
        )
    return found


def _live_promotion_of_a_later_date(settings: Settings) -> str:
    """What a scheduled run of 2013-07-01 leaves in the registry when it promotes."""
    import mlflow

    cfg = settings.mlflow
    client = connect(cfg)
    champion = client.get_model_version_by_alias(cfg.registered_model, cfg.champion_alias)
    version = mlflow.register_model(
        f"models:/{cfg.registered_model}/{champion.version}", cfg.registered_model
    )
    for key, value in {
        DECISION_TAG: "promoted",
        DATE_TAG: "2013-07-01",
        KIND_TAG: "scheduled",
    }.items():
        client.set_model_version_tag(cfg.registered_model, version.version, key, value)
    client.set_registered_model_alias(cfg.registered_model, cfg.champion_alias, version.version)
    return str(version.version)


def _alias(settings: Settings) -> str:
    cfg = settings.mlflow
    client = MlflowClient(cfg.tracking_uri, cfg.tracking_uri)
    return str(client.get_model_version_by_alias(cfg.registered_model, cfg.champion_alias).version)


def test_backfill_decisions_are_the_same_with_concurrency_1_and_3(
    champion_home: Path, tmp_path: Path
) -> None:
    one_at_a_time = _copy(champion_home, tmp_path, "concurrency-1")
    for day in BACKFILL:
        run_all(run_context(one_at_a_time, f"backfill__{day}", day, "backfill"))

    concurrent = _copy(champion_home, tmp_path, "concurrency-3")
    runs = {day: run_context(concurrent, f"backfill__{day}", day, "backfill") for day in BACKFILL}
    first, second, third = BACKFILL
    orders = {
        "ingest": [third, second, first],
        "validate": [second, third, first],
        "features": [third, first, second],
        "train": [second, third, first],
        "evaluate": [third],
    }
    for step, days in orders.items():
        for day in days:
            run_step(runs[day], step)
    later = _live_promotion_of_a_later_date(concurrent)  # the alias moves meanwhile
    for day in [first, second]:
        run_step(runs[day], "evaluate")
    for day in [second, third, first]:
        run_step(runs[day], "promote")

    sequential, interleaved = _outcomes(one_at_a_time), _outcomes(concurrent)
    assert sequential == interleaved
    # every backfilled day compared with the champion as of its date: version 1
    assert {champion for _, champion, _, _ in sequential.values()} == {"1"}
    assert {decision for decision, *_ in sequential.values()} <= {"passed", "rejected"}
    # and no backfill moved the live alias
    assert _alias(one_at_a_time) == "1"
    assert _alias(concurrent) == later
    reasons = (
        run_context(concurrent, f"backfill__{first}", first, "backfill")
        .upstream(PromoteManifest)
        .reasons
    )
    assert "never moves the live alias" in reasons[-1]
