"""Two promotes released at the same instant, many times, against a real local MLflow registry:
exactly one moves the alias each time, because reading the champion, deciding and moving the
alias happen under one lock (``promotion.lock``). Without the lock the race is there to see."""

import contextlib
import threading
import time
from datetime import date
from typing import Any

import mlflow
import numpy as np
import pytest
from mlflow import MlflowClient
from mlflow.pyfunc import PythonModel

from pipeline_steps.context import RunContext
from pipeline_steps.manifests import PromoteManifest, ScoredChampion
from pipeline_steps.steps import promote as promote_step
from pipeline_steps.tracking import connect
from tests.manifests import (
    evaluate_manifest,
    features_manifest,
    ingest_manifest,
    scored,
    train_manifest,
)

pytestmark = pytest.mark.slow
ROUNDS = 5
DAY = date(2013, 6, 4)
READ_TO_SET_S = 0.3  # widens the window between reading the champion and moving the alias


class Constant(PythonModel):
    def predict(self, context, model_input, params=None):
        return np.full(len(model_input), 0.5)


@pytest.fixture
def settings(make_settings):
    return make_settings("gate.min_auc=0.6", "gate.max_auc_drop=0.0")


@pytest.fixture
def model_uri(settings) -> str:
    connect(settings.mlflow)
    with mlflow.start_run():
        return mlflow.pyfunc.log_model(name="model", python_model=Constant()).model_uri


def _challenger(settings, model_uri: str, name: str, auc: float, champion) -> RunContext:
    """A run ready to promote: its own MLflow run, a passing evaluation against ``champion``."""
    ctx = RunContext(run_id=name, logical_date=DAY, settings=settings)
    with mlflow.start_run() as run:
        pass
    ctx.record(ingest_manifest())
    ctx.record(features_manifest())
    ctx.record(train_manifest(run.info.run_id, model_uri))
    ctx.record(evaluate_manifest(run.info.run_id, model_uri, auc, champion))
    return ctx


def _released_together(contexts: list[RunContext]) -> list[PromoteManifest]:
    barrier = threading.Barrier(len(contexts))
    results: list[Any] = [None] * len(contexts)

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = promote_step.promote(contexts[index])
        except BaseException as exc:  # reported below, in the test's thread
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(contexts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def _slow_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """Promote imports ``champion_version`` from tracking when it runs: slow that one down."""
    from pipeline_steps import tracking

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
    outcomes = _rounds(settings, model_uri, 3)
    lost = [pair for pair in outcomes if [m.decision for m in pair] == ["promoted", "promoted"]]
    assert lost, "the race did not show: this test no longer proves the lock is needed"


def test_a_lock_setting_that_is_neither_folder_nor_postgres_is_refused(make_settings) -> None:
    from pipeline_steps.locks import exclusive
    from pipeline_steps.settings import SettingsError

    lock = exclusive("redis://x", "promotion.flight_delay", setting="promotion.lock")
    with pytest.raises(SettingsError, match=r"promotion.lock='redis://x'"), lock:
        pass
