"""Large partitions are validated chunk by chunk with the verdict a single frame would get."""

import json
from datetime import date
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from flight_delay.domain import read_nycflights13

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.quality.suite_chunks import run_suite_chunked
from pipeline_steps.quality.suites import as_frame, load_suite, run_suite
from pipeline_steps.steps.ingest import ingest
from pipeline_steps.steps.validate import validate

DAY = date(2013, 6, 1)
SUITE = Path(__file__).parents[2] / "examples" / "flight_delay" / "expectations" / "flights.json"
PARAMETERS = {
    "partition_year": 2013,
    "partition_month": 6,
    "partition_day": 1,
    "row_count_min": 0,
    "row_count_max": 10**6,
}


def _flights() -> pd.DataFrame:
    return read_nycflights13("flights", DAY).to_pandas()


def _write(frame: pd.DataFrame, path: Path) -> pa.Table:
    table = pa.Table.from_pandas(frame, schema=read_nycflights13("flights", DAY).schema)
    table = table.replace_schema_metadata(None)
    pq.write_table(table, path, row_group_size=100)
    return table


def _seen(outcome) -> list[tuple]:
    """What a user reads of a verdict: expectation, column, count, examples, observed value."""

    def plain(value):  # 5000 and 5000.0 read alike; sums merged by chunk differ in the last digit
        return json.loads(json.dumps(value), parse_float=lambda s: float(f"{float(s):.10g}"))

    return sorted(
        (
            f.severity,
            f.expectation,
            str(f.column),
            f.unexpected_count,
            json.dumps(plain(f.examples), sort_keys=True).replace(".0", ""),
            json.dumps(plain(f.observed_value), sort_keys=True).replace(".0", ""),
        )
        for f in [*outcome.failures, *outcome.warnings]
    )


def _both(table: pa.Table, path: Path, chunk_rows: int, parameters=PARAMETERS):
    single = run_suite("flights", as_frame(table), load_suite(SUITE), parameters)
    chunked = run_suite_chunked(
        "flights", pq.ParquetFile(path), load_suite(SUITE), parameters, None, chunk_rows
    )
    return single, chunked


def test_a_real_partition_passes_in_chunks(tmp_path: Path) -> None:
    table = _write(_flights(), tmp_path / "d.parquet")
    single, chunked = _both(table, tmp_path / "d.parquet", chunk_rows=250)
    assert single.success and chunked.success
    assert (
        chunked.evaluated == single.evaluated == len(json.loads(SUITE.read_text())["expectations"])
    )


def test_chunked_failures_match_the_single_frame_verdict(tmp_path: Path) -> None:
    frame = _flights()
    frame.loc[5, "dep_delay"] = 5000  # out of range, first chunk
    frame.loc[600, "dep_delay"] = -500  # and a later one
    frame.loc[10, "carrier"] = "ZZ"  # unknown category
    frame.loc[650, "origin"] = "XXX"
    frame.loc[700, "dest"] = "jfk"  # not an airport code
    frame.loc[20, "month"] = 7  # a row of another date
    frame.loc[30, "sched_dep_time"] = 1075  # impossible clock time
    frame.loc[[40, 41], "tailnum"] = None
    # rows repeating a flight key: the copies land in a different chunk than the originals
    frame = pd.concat([frame, frame.iloc[[3, 640]]], ignore_index=True)
    frame.loc[frame.index[-100:], "distance"] = 4983  # the route mix moves: a quantile warning
    table = _write(frame, tmp_path / "d.parquet")

    single, chunked = _both(table, tmp_path / "d.parquet", chunk_rows=250, parameters=PARAMETERS)
    assert not single.success and len(single.failures) >= 7 and single.warnings
    assert _seen(chunked) == _seen(single)
    assert chunked.result["statistics"] == single.result["statistics"]


def test_row_count_comes_from_the_whole_partition(tmp_path: Path) -> None:
    table = _write(_flights(), tmp_path / "d.parquet")
    bounds = {**PARAMETERS, "row_count_min": 10, "row_count_max": 300}
    single, chunked = _both(table, tmp_path / "d.parquet", chunk_rows=200, parameters=bounds)
    assert _seen(chunked) == _seen(single)
    [failure] = [f for f in chunked.failures if f.expectation.startswith("expect_table_row")]
    assert failure.observed_value == table.num_rows


@pytest.mark.parametrize("margin", [-0.01, 0.01])
def test_mostly_is_applied_to_the_totals(tmp_path: Path, margin: float) -> None:
    frame = _flights()
    table = _write(frame, tmp_path / "d.parquet")
    share = float((frame["distance"] <= 1000).mean())
    suite = tmp_path / "mostly.json"
    suite.write_text(
        json.dumps(
            {
                "name": "flights",
                "expectations": [
                    {
                        "type": "expect_column_values_to_be_between",
                        "kwargs": {
                            "column": "distance",
                            "max_value": 1000,
                            "mostly": round(share + margin, 4),
                        },
                    }
                ],
            }
        )
    )
    single = run_suite("flights", as_frame(table), load_suite(suite))
    chunked = run_suite_chunked(
        "flights", pq.ParquetFile(tmp_path / "d.parquet"), load_suite(suite), {}, None, 150
    )
    assert single.success is chunked.success is (margin < 0)
    assert _seen(chunked) == _seen(single)


def test_the_validate_step_chunks_large_partitions_and_renders_docs(make_settings) -> None:
    settings = make_settings("validation.chunk_rows=300", "validation.data_docs=true")
    ctx = RunContext(run_id="r1", logical_date=DAY, settings=settings)
    ingest(ctx)
    manifest = validate(ctx)
    assert manifest.verdict == "passed"
    docs = Path(manifest.datasets["flights"].data_docs)
    page = next((docs.parent / "validations").rglob("*.html")).read_text()
    assert "expect_compound_columns_to_be_unique" in page or "unique" in page

    raw = ctx.lake.path("raw/flights/date=2013-06-01/version=0001", "data.parquet")
    table = pq.read_table(raw)
    pq.write_table(pa.concat_tables([table, table.slice(0, 3)]), raw, row_group_size=100)
    ctx.lake.remove("validated/flights/date=2013-06-01")
    with pytest.raises(StepError, match="expect_compound_columns_to_be_unique"):
        validate(ctx)
    assert ctx.lake.partition_dates("validated", "flights") == []


def test_history_statistics_come_from_the_whole_partition(tmp_path: Path) -> None:
    """Mean, spread, distinct values and top share merged across chunks give the single frame's
    values and verdicts: a day of one carrier's flights, its distances in kilometres."""
    from pipeline_steps.quality.history import history_checks

    frame = _flights()
    frame = frame[frame["carrier"] == "UA"].reset_index(drop=True)
    frame["distance"] = (frame["distance"] * 1.609344).round().astype("int64")
    table = _write(frame, tmp_path / "d.parquet")
    checks = history_checks(load_suite(SUITE))
    tight = {n: 1.0 for c in checks for n in (c.min_parameter, c.max_parameter) if n}
    single, chunked = _both(table, tmp_path / "d.parquet", 97, {**PARAMETERS, **tight})
    history = [f for f in single.failures + single.warnings if "column_" in f.expectation]
    assert {f.column for f in history} >= {"distance", "origin", "dest", "tailnum"}
    assert _seen(chunked) == _seen(single)
