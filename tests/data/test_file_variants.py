"""A clean real day written in the ordinary ways that tools write files passes both
``trainyard validate --path`` and the ``file`` ingest source: integers written as ``11.0``,
quoted numbers, a byte-order mark, CRLF line ends, gzip and zip, parquet with dictionary or
large string columns, columns and rows in another order. A true fraction in an integer column
fails with a message that names the file and the column.

Parquet as pandas, pyarrow and DuckDB write it holds the same values in other physical types:
int64 for int32, doubles for an integer column with missing values, nanoseconds, dictionaries;
it is read as the schema's types, never reported as a schema change (Spark's parquet:
``tests/data/test_spark_validation.py``)."""

from __future__ import annotations

import csv
import random
import re
from collections.abc import Callable
from datetime import date
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from flight_delay.domain import FLIGHTS_SCHEMA, SCHEMAS, read_nycflights13

from pipeline_steps.core.context import RunContext
from pipeline_steps.quality.file_check import read_any
from pipeline_steps.steps.ingest import ingest
from pipeline_steps.steps.validate import validate
from tests.data.conftest import assert_ingest_refuses, validate_file

DAY = date(2013, 1, 2)

Writer = Callable[[pa.Table, Path], Path]


def _to_csv(name: str = "day.csv", **options: object) -> Writer:
    """pandas' ``DataFrame.to_csv``: a nullable integer column comes out as ``11.0``."""

    def write(table: pa.Table, folder: Path) -> Path:
        table.to_pandas().to_csv(folder / name, index=False, **options)  # type: ignore[call-overload]
        return folder / name

    return write


def _to_parquet(transform: Callable[[pa.Array], pa.Array]) -> Writer:
    """Parquet whose string columns went through ``transform``."""

    def write(table: pa.Table, folder: Path) -> Path:
        for index, field in enumerate(table.schema):
            if pa.types.is_string(field.type):
                table = table.set_column(index, field.name, transform(table[field.name]))
        pq.write_table(table, folder / "day.parquet")
        return folder / "day.parquet"

    return write


def _pandas_parquet(change: Callable[[pd.DataFrame], pd.DataFrame] = lambda f: f) -> Writer:
    """``DataFrame.to_parquet`` of the frame ``pd.read_csv`` gives a team from an export:
    integers as int64, an integer column with missing values as float64, times in ns."""

    def write(table: pa.Table, folder: Path) -> Path:
        export = _to_csv("export.csv")(table, folder)
        times = [f.name for f in table.schema if pa.types.is_timestamp(f.type)]
        frame = change(pd.read_csv(export, parse_dates=times, float_precision="round_trip"))
        export.unlink()
        frame.to_parquet(folder / "day.parquet")
        return folder / "day.parquet"

    return write


def _categories(frame: pd.DataFrame) -> pd.DataFrame:
    """Text columns as pandas categories (parquet dictionaries)."""
    text = frame.select_dtypes("object").columns
    return frame.astype({column: "category" for column in text})


def _row_groups_zstd(table: pa.Table, folder: Path) -> Path:
    pq.write_table(table, folder / "day.parquet", row_group_size=100, compression="zstd")
    return folder / "day.parquet"


def _duckdb_copy(table: pa.Table, folder: Path) -> Path:
    """DuckDB's ``COPY ... TO`` of its own reading of the CSV export (BIGINT, TIMESTAMPTZ)."""
    import duckdb

    export = _to_csv("export.csv")(table, folder)
    out = folder / "day.parquet"
    duckdb.sql(f"COPY (SELECT * FROM read_csv('{export}')) TO '{out}' (FORMAT parquet)")
    export.unlink()
    return out


def _reordered(write: Writer) -> Writer:
    return lambda table, folder: write(table.select(table.column_names[::-1]), folder)


def _shuffled(write: Writer) -> Writer:
    def shuffle(table: pa.Table, folder: Path) -> Path:
        order = list(range(table.num_rows))
        random.Random(13).shuffle(order)
        return write(table.take(order), folder)

    return shuffle


def _large_string(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return column.cast(pa.large_string())


VARIANTS: dict[str, Writer] = {
    "to_csv 11.0": _to_csv(),
    "quote all": _to_csv(quoting=csv.QUOTE_ALL),
    "quote non-numeric": _to_csv(quoting=csv.QUOTE_NONNUMERIC),
    "utf-8 bom": _to_csv(encoding="utf-8-sig"),
    "crlf": _to_csv(lineterminator="\r\n"),
    "gzip": _to_csv("day.csv.gz"),
    "zip": _to_csv("day.csv.zip"),
    "parquet dictionary": _to_parquet(pc.dictionary_encode),
    "parquet large_string": _to_parquet(_large_string),
    "csv reordered": _reordered(_to_csv()),
    "parquet reordered": _reordered(_to_parquet(lambda c: c)),
    "csv shuffled": _shuffled(_to_csv()),
    "parquet shuffled": _shuffled(_to_parquet(lambda c: c)),
    "pandas to_parquet": _pandas_parquet(),
    "pandas to_parquet reordered": _pandas_parquet(lambda f: f[f.columns[::-1]]),
    "pandas to_parquet categories": _pandas_parquet(_categories),
    # shuffled rows keep their labels: pandas stores them as a column, __index_level_0__
    "pandas to_parquet shuffled": _pandas_parquet(lambda f: f.sample(frac=1, random_state=13)),
    # times left as ISO text, as pandas holds them unless parse_dates is given
    "pandas to_parquet text times": _pandas_parquet(
        lambda f: f.assign(time_hour=f["time_hour"].astype(str).str.replace(" ", "T"))
    ),
    "pyarrow row groups zstd": _row_groups_zstd,
    "duckdb copy": _duckdb_copy,
}

CASES = [("flights", name) for name in VARIANTS] + [
    (dataset, name)
    for dataset in ("weather", "planes")
    for name in ("to_csv 11.0", "parquet dictionary", "parquet large_string", "pandas to_parquet")
]


def _assert_same_rows(read: pa.Table, day: pa.Table) -> None:
    """``read`` holds the rows of ``day`` in its column types, in any column and row order."""
    read = read.select(day.column_names)
    assert read.schema.types == day.schema.types
    everything = [(name, "ascending") for name in day.column_names]
    assert read.sort_by(everything).equals(day.sort_by(everything))


@pytest.mark.slow
@pytest.mark.parametrize(("dataset", "variant"), CASES)
def test_a_clean_day_written_another_way_passes_validate_path(
    tmp_path: Path, dataset: str, variant: str
) -> None:
    day = read_nycflights13(dataset, DAY)
    path = VARIANTS[variant](day, tmp_path)
    done = validate_file(path, suite=dataset)
    assert done.returncode == 0, done.stdout + done.stderr
    # planes, a registry snapshot, is judged as the partition after the lake's latest
    assert re.search(
        rf"file {re.escape(str(path))} \(date [\d-]+\) passed suite '{dataset}'", done.stdout
    )
    _assert_same_rows(read_any(str(path), SCHEMAS[dataset]), day)
    assert "schema change" not in done.stdout, done.stdout


def test_64_bit_integers_written_as_floats_are_read_without_rounding(tmp_path: Path) -> None:
    """A schema of int64 columns: read as text and cast through a decimal, not a double."""
    wide = pa.schema(
        [f.with_type(pa.int64()) if pa.types.is_integer(f.type) else f for f in FLIGHTS_SCHEMA]
    )
    day = read_nycflights13("flights", DAY).cast(wide)
    big = 2**62 + 1  # a double would round it to 2**62
    day = day.set_column(0, "year", pc.add(day["year"], big - 2013))
    path = _to_csv()(day, tmp_path)
    assert f"{big}," in path.read_text() and ".0," in path.read_text()
    _assert_same_rows(read_any(str(path), wide), day)


PIPELINE_VARIANTS = [
    "to_csv 11.0",
    "quote non-numeric",
    "utf-8 bom",
    "crlf",
    "zip",
    "parquet dictionary",
    "parquet large_string",
    "csv reordered",
    "parquet shuffled",
    "pandas to_parquet",
    "duckdb copy",
]


@pytest.mark.slow
@pytest.mark.parametrize("variant", PIPELINE_VARIANTS)
def test_the_file_source_ingests_and_validates_a_clean_day_in_the_domain_types(
    make_settings, tmp_path: Path, variant: str
) -> None:
    files = tmp_path / "files"
    for dataset in SCHEMAS:
        (files / dataset).mkdir(parents=True)
        written = VARIANTS[variant](read_nycflights13(dataset, DAY), files / dataset)
        written.rename(files / dataset / f"{DAY}{''.join(written.suffixes)}")
    ending = "".join(written.suffixes)
    settings = make_settings(
        "ingest.source=file", f"ingest.path={files}/{{dataset}}/{{date}}{ending}", home=tmp_path
    )
    ctx = RunContext(run_id="variants", logical_date=DAY, settings=settings)
    ingested = ingest(ctx)
    validated = validate(ctx)
    for dataset, schema in SCHEMAS.items():
        day = read_nycflights13(dataset, DAY)
        _assert_same_rows(pq.read_table(f"{ingested.datasets[dataset].path}/data.parquet"), day)
        verdict = validated.datasets[dataset]
        assert verdict.status == "validated" and verdict.failed == 0, verdict
        assert [c for c in verdict.schema_changes if c.change != "reordered"] == []
        validated_schema = pq.read_schema(
            ctx.lake.path(f"validated/{dataset}/date={DAY}", "data.parquet")
        )
        assert {f.name: f.type for f in validated_schema} == {f.name: f.type for f in schema}


def _fraction_in_dep_time(folder: Path) -> Path:
    """The day written by pandas, one ``dep_time`` given a fraction (``517.0`` -> ``517.5``)."""
    frame = read_nycflights13("flights", DAY).to_pandas()
    frame["dep_time"] = frame["dep_time"].astype("float64")
    frame.loc[0, "dep_time"] += 0.5
    frame.to_csv(folder / f"{DAY}.csv", index=False)
    return folder / f"{DAY}.csv"


def test_a_fraction_in_an_integer_column_fails_naming_the_column(
    make_settings, tmp_path: Path
) -> None:
    path = _fraction_in_dep_time(tmp_path)
    done = validate_file(path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert f"file {path}" in done.stderr and "column 'dep_time'" in done.stderr
    assert ".5" in done.stderr and "whole number" in done.stderr

    assert_ingest_refuses(
        make_settings, path, rf"file {re.escape(str(path))}.*column 'dep_time'.*whole number"
    )


def _misfit(column: str, value: object) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """The pandas frame of the day with ``value`` in the fourth row of ``column``."""

    def change(frame: pd.DataFrame) -> pd.DataFrame:
        if isinstance(value, float):
            frame[column] = frame[column].astype("float64")
        frame.loc[3, column] = value
        return frame

    return change


MISFITS = {
    "a fraction": ("dep_time", 517.5, r"holds 517\.5, not a whole number, in row 4"),
    "an overflow": ("flight", 2**40, rf"holds {2**40}, out of its range .*, in row 4"),
    "a nanosecond": (
        "time_hour",
        pd.Timestamp("2013-01-02 05:00:00.000000001", tz="UTC"),
        r"holds 2013-01-02 05:00:00\.000000001.*, in row 4",
    ),
}


@pytest.mark.parametrize("misfit", MISFITS)
def test_a_value_its_declared_type_cannot_hold_fails_naming_file_column_and_row(
    make_settings, tmp_path: Path, misfit: str
) -> None:
    column, value, message = MISFITS[misfit]
    (tmp_path / "flights").mkdir()
    path = _pandas_parquet(_misfit(column, value))(
        read_nycflights13("flights", DAY), tmp_path / "flights"
    )
    path = path.rename(tmp_path / "flights" / f"{DAY}.parquet")
    done = validate_file(path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert re.search(rf"file {re.escape(str(path))} .*column '{column}' .*{message}", done.stderr)

    assert_ingest_refuses(make_settings, path, rf"file {re.escape(str(path))}.*column '{column}'")


def _cut(folder: Path) -> Path:
    """The day's CSV cut in the middle of a row, as an interrupted copy leaves it."""
    text = _to_csv()(read_nycflights13("flights", DAY), folder).read_bytes()
    (folder / "day.csv").write_bytes(text[: len(text) // 2 + 7])
    return folder / "day.csv"


def _written(name: str, content: bytes) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        (folder / name).write_bytes(content)
        return folder / name

    return write


def _json_lines(folder: Path) -> Path:
    frame = read_nycflights13("flights", DAY).to_pandas()
    frame.to_json(folder / "day.csv", orient="records", lines=True)
    return folder / "day.csv"


def _local_times(folder: Path) -> Path:
    """``time_hour`` in New York time without its zone, as a local export writes it."""
    frame = read_nycflights13("flights", DAY).to_pandas()
    local = frame["time_hour"].dt.tz_convert("America/New_York").dt.tz_localize(None)
    frame.assign(time_hour=local).to_csv(folder / "day.csv", index=False)
    return folder / "day.csv"


def _semicolons(folder: Path) -> Path:
    read_nycflights13("flights", DAY).to_pandas().to_csv(folder / "day.csv", sep=";", index=False)
    return folder / "day.csv"


BAD_FILES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "empty": (_written("day.csv", b""), r"is empty \(0 bytes\)"),
    "cut short": (_cut, r"Expected 19 columns, got \d+.*a file cut short"),
    "binary garbage": (_written("day.csv", bytes(range(256)) * 8), "not a CSV file: .*binary"),
    "garbage parquet": (_written("day.parquet", b"\x00\x01" * 2000), "not a parquet file"),
    "a spreadsheet": (_written("day.csv", b"PK\x03\x04" + b"\x00" * 500), "xlsx spreadsheet"),
    "parquet named csv": (
        lambda folder: _to_parquet(lambda c: c)(read_nycflights13("flights", DAY), folder).rename(
            folder / "day.csv"
        ),
        r"a parquet file \(name it \.parquet\)",
    ),
    "json lines": (_json_lines, "not a CSV file: it holds JSON"),
    "semicolons": (_semicolons, "is delimited by semicolons, not commas"),
    "local times without a zone": (_local_times, r"column 'time_hour'.*expected a zone offset"),
}


@pytest.mark.parametrize("bad", BAD_FILES)
def test_a_bad_file_gets_one_line_and_exit_2_and_nothing_is_ingested(
    make_settings, tmp_path: Path, bad: str
) -> None:
    write, message = BAD_FILES[bad]
    folder = tmp_path / "flights"
    folder.mkdir()
    path = write(folder)
    done = validate_file(path)
    assert done.returncode == 2, done.stdout + done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("trainyard validate")]
    assert len(said) == 1 and "Traceback" not in done.stdout + done.stderr, done.stderr
    assert re.search(rf"file {re.escape(str(path))} .*{message}", said[0]), said[0]

    named = path.rename(folder / f"{DAY}{path.suffix}")
    assert_ingest_refuses(make_settings, named, rf"file {re.escape(str(named))}")


def test_a_time_of_day_is_read_as_the_same_text_whatever_its_unit() -> None:
    from pipeline_steps.domain.physical_types import as_declared, holds_same_kind

    seconds = pa.array([41916, None], pa.time32("s"))  # how a CSV's 11:38:36 is read
    micros = pa.array([41916_000_000, None], pa.time64("us"))  # pandas' time, in parquet
    assert holds_same_kind(seconds.type, pa.string()) and holds_same_kind(micros.type, pa.string())
    for column in (seconds, micros):
        assert as_declared(column, pa.string(), "time").to_pylist() == ["11:38:36", None]
    fraction = pa.array([41916_500_000], pa.time64("us"))
    assert as_declared(fraction, pa.string(), "time").to_pylist() == ["11:38:36.500000"]
    assert not holds_same_kind(seconds.type, pa.int64())  # a time of day is no number
