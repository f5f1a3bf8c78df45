"""Two promotes released at the same instant, many times, against a real local MLflow registry:
exactly one moves the alias each time, because reading the champion, deciding and moving the
alias happen under one lock (``promotion.lock``). Without the lock the race is there to see."""

import contextlib
import functools
import itertools
import threading
import time
from collections.abc import Callable
from datetime import date
from typing import Any

import mlflow
import pytest
from mlflow import MlflowClient

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.manifests import PromoteManifest, ScoredChampion
from pipeline_steps.steps import promote as promote_step
from tests.manifests import (
    scored,
)
from tests.registry import logged_model, record_evaluated

pytestmark = pytest.mark.slow
ROUNDS = 5
DAY = date(2013, 6, 4)
READ_TO_SET_S = 0.3  # widens the window between reading the champion and moving the alias


@pytest.fixture
def settings(make_settings):
    # promotions move the champion at once here (the staged release: tests/unit/test_release.py)
    return make_settings("gate.min_auc=0.6", "gate.max_auc_drop=0.0", "release.mode=direct")


@pytest.fixture
def model_uri(settings) -> str:
    return logged_model(settings)[1]


def _challenger(settings, model_uri: str, name: str, auc: float, champion) -> RunContext:
    """A run ready to promote: its own MLflow run, a passing evaluation against ``champion``."""
    ctx = RunContext(run_id=name, logical_date=DAY, settings=settings)
    with mlflow.start_run() as run:
        pass
    return record_evaluated(ctx, run.info.run_id, model_uri, auc, champion)


def _together(calls: list[Callable[[], Any]]) -> list[Any]:
    """Each call in its own thread, all released at the same instant; their results."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = calls[index]()
        except BaseException as exc:  # reported below, in the test's thread
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def _released_together(contexts: list[RunContext]) -> list[PromoteManifest]:
    return _together([functools.partial(promote_step.promote, ctx) for ctx in contexts])


def _slow_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """Promote imports ``champion_version`` from tracking when it runs: slow that one down."""
    from pipeline_steps.core import tracking

    real = tracking.champion_version

    def slow(client, cfg):
        found = real(client, cfg)
        time.sleep(READ_TO_SET_S)
        return found

    monkeypatch.setattr(tracking, "champion_version", slow)


def _champion(client: MlflowClient) -> ScoredChampion | None:
    try:
        version = client.get_model_version_by_alias("flight_delay", "champion")
    except mlflow.exceptions.MlflowException:
        return None
    auc = float(version.tags["trainyard.challenger_auc"])
    return ScoredChampion(
        model_uri=f"models:/flight_delay/{version.version}",
        metrics=scored(auc),
        version=str(version.version),
    )


def _rounds(settings, model_uri: str, rounds: int) -> list[list[PromoteManifest]]:
    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    outcomes = []
    for n in range(rounds):
        champion = _champion(client)
        auc = 0.7 + 0.01 * n  # both beat the champion they compare against
        pair = [
            _challenger(settings, model_uri, f"round-{n}-{side}", auc, champion)
            for side in ("a", "b")
        ]
        outcomes.append(_released_together(pair))
    return outcomes


def test_one_promotion_at_a_time(settings, model_uri, monkeypatch) -> None:
    _slow_reader(monkeypatch)
    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    outcomes = _rounds(settings, model_uri, ROUNDS)
    for pair in outcomes:
        decisions = sorted(m.decision for m in pair)
        assert decisions == ["promoted", "rejected"], [m.reasons for m in pair]
        winner = next(m for m in pair if m.decision == "promoted")
        loser = next(m for m in pair if m.decision == "rejected")
        assert any("champion changed" in reason for reason in loser.reasons), loser.reasons
        assert loser.champion_before == winner.version  # it saw the winner's move
    alias = client.get_model_version_by_alias("flight_delay", "champion")
    assert str(alias.version) == next(
        m.version for m in outcomes[-1] if m.champion_after == m.version
    )


def test_without_the_lock_both_promote(settings, model_uri, monkeypatch) -> None:
    _slow_reader(monkeypatch)
    monkeypatch.setattr(promote_step, "exclusive", lambda *a, **k: contextlib.nullcontext())
    try:
        outcomes = _rounds(settings, model_uri, 3)
    except mlflow.exceptions.MlflowException as exc:
        # Both moved the alias at the same instant and the store's own unique key refused the
        # second insert: the race showed, as an error instead of a lost promotion.
        assert "UNIQUE constraint failed: registered_model_aliases" in str(exc), exc
        return
    lost = [pair for pair in outcomes if [m.decision for m in pair] == ["promoted", "promoted"]]
    assert lost, "the race did not show: this test no longer proves the lock is needed"


def test_a_lock_setting_that_is_neither_folder_nor_postgres_is_refused(make_settings) -> None:
    from pipeline_steps.core.locks import exclusive
    from pipeline_steps.core.settings import SettingsError

    lock = exclusive("redis://x", "promotion.flight_delay", setting="promotion.lock")
    with pytest.raises(SettingsError, match=r"promotion.lock='redis://x'"), lock:
        pass


def _promote_then_rollback_race(settings, model_uri: str, rounds: int) -> list[tuple]:
    """Version 1, then 2, promoted; then per round a challenger that beats the live champion
    and a rollback to the champion before it, released together. Returns per round the
    promotion's manifest, the rollback's move and the live champion afterwards."""
    from pipeline_steps.evaluation.champion import rollback

    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    for n, auc in enumerate((0.7, 0.71)):
        promote_step.promote(_challenger(settings, model_uri, f"setup-{n}", auc, _champion(client)))
    previous, outcomes = "1", []
    for n in range(rounds):
        champion = _champion(client)
        assert champion is not None
        ctx = _challenger(settings, model_uri, f"race-{n}", 0.8 + 0.01 * n, champion)
        results = _together(
            [
                functools.partial(promote_step.promote, ctx),
                functools.partial(rollback, settings, previous, "race", "ada"),
            ]
        )
        live = str(client.get_model_version_by_alias("flight_delay", "champion").version)
        outcomes.append((*results, live))
        previous = champion.version
    return outcomes


def _consistent(promoted: PromoteManifest, move, live: str) -> bool:
    """One went first and the other saw it: the rollback records the promoted version as what
    it rolled back from, or the promotion was refused because the champion had changed."""
    if promoted.decision == "promoted":
        return move.from_version == promoted.version and live == move.to_version
    return promoted.champion_before == move.to_version and live == move.to_version


def test_a_rollback_and_a_promotion_take_turns(settings, model_uri, monkeypatch) -> None:
    from pipeline_steps.evaluation.champion import champion_moves

    _slow_reader(monkeypatch)
    for promoted, move, live in _promote_then_rollback_race(settings, model_uri, 3):
        assert _consistent(promoted, move, live), (promoted.reasons, move, live)
    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    moves = champion_moves(client, settings.mlflow)
    assert all(b.from_version == a.to_version for a, b in itertools.pairwise(moves))
    assert moves[-1].to_version == live


def test_without_the_lock_a_rollback_loses_track(settings, model_uri, monkeypatch) -> None:
    from pipeline_steps.evaluation import champion

    _slow_reader(monkeypatch)
    nolock = lambda *a, **k: contextlib.nullcontext()  # noqa: E731
    monkeypatch.setattr(promote_step, "exclusive", nolock)
    monkeypatch.setattr(champion, "exclusive", nolock)
    outcomes = _promote_then_rollback_race(settings, model_uri, 2)
    assert not all(_consistent(*outcome) for outcome in outcomes), (
        "the race did not show: this test no longer proves the rollback needs the lock"
    )
