"""A catalogue of bad inputs: each stops the run before training with a message that names the
problem, and nothing is written to validated/, to a training set or to the registry."""

import os
import subprocess
import sys
from dataclasses import replace
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from mlflow import MlflowClient

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.steps.features import build_features
from pipeline_steps.steps.validate import validate
from tests.conftest import FIRST_DAY
from tests.data.conftest import validate_file

RAW = f"raw/flights/date={FIRST_DAY}/version=0001"


def _set(table: pa.Table, column: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(column), column, values)


def _first_row(table: pa.Table, column: str, value: pa.Scalar) -> pa.Array:
    first = pc.equal(pa.array(range(table.num_rows)), 0)
    return pc.if_else(first, value, table[column])


CASES = {
    "missing column": (
        lambda t: t.drop_columns(["carrier"]),
        r"expect_table_columns_to_match_set: missing column\(s\) \['carrier'\]",
    ),
    "renamed column": (
        lambda t: t.rename_columns(["airline" if c == "carrier" else c for c in t.column_names]),
        r"schema change: column 'carrier' removed \(was string\) against the schema \(failed\)",
    ),
    "widened type": (
        lambda t: _set(t, "distance", pc.cast(t["distance"], pa.float64())),
        r"schema change: column 'distance' widened int32 -> double against the schema",
    ),
    "wrong dtype": (
        lambda t: _set(t, "distance", pc.cast(t["distance"], pa.string())),
        r"expect_column_values_to_be_in_type_list on column 'distance'",
    ),
    "all-null column": (
        lambda t: _set(t, "origin", pa.nulls(t.num_rows, pa.string())),
        r"expect_column_values_to_not_be_null on column 'origin'",
    ),
    "out-of-range value": (
        lambda t: _set(t, "arr_delay", _first_row(t, "arr_delay", pa.scalar(99_999, pa.int32()))),
        r"column 'arr_delay': 1 unexpected value\(s\), e\.g\. \[99999",
    ),
    "unknown category": (
        lambda t: _set(t, "carrier", _first_row(t, "carrier", pa.scalar("ZZ"))),
        r"in_set on column 'carrier': 1 unexpected value\(s\), e\.g\. \['ZZ'\]",
    ),
    "duplicate keys": (
        lambda t: pa.concat_tables([t, t.slice(5, 2)]),
        r"expect_compound_columns_to_be_unique",
    ),
    "empty partition": (lambda t: t.slice(0, 0), r"expect_table_row_count_to_be_between"),
    "rows of another date": (
        lambda t: _set(t, "month", _first_row(t, "month", pa.scalar(7, pa.int32()))),
        r"expect_column_values_to_be_between on column 'month'",
    ),
    "partition 10x larger": (
        lambda t: pa.concat_tables([t] * 10).combine_chunks(),
        r"expect_table_row_count_to_be_between",
    ),
}


def _assert_nothing_downstream(ctx: RunContext) -> None:
    assert FIRST_DAY not in ctx.lake.partition_dates("validated", "flights")
    with pytest.raises(StepError, match="not validated"):
        build_features(ctx)
    assert not ctx.lake.exists(ctx.lake.training_set_dir(ctx.run_id))
    uri = ctx.settings.mlflow.tracking_uri
    assert MlflowClient(uri, uri).search_model_versions() == []


@pytest.mark.parametrize("case", CASES)
def test_bad_partition_stops_before_training(run: RunContext, case: str) -> None:
    change, message = CASES[case]
    path = run.lake.path(RAW, "data.parquet")
    pq.write_table(change(pq.read_table(path)), path)
    with pytest.raises(StepError, match=message) as error:
        validate(run)
    assert RAW in str(error.value)
    assert run.lake.exists(f"quarantine/flights/date={FIRST_DAY}", "validation.json")
    _assert_nothing_downstream(run)


def test_truncated_parquet_is_reported_as_unreadable(run: RunContext) -> None:
    path = Path(run.lake.path(RAW, "data.parquet"))
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(StepError, match=rf"partition .*{RAW} cannot be read"):
        validate(run)
    _assert_nothing_downstream(run)


def test_check_a_file_by_hand(tmp_path: Path, run: RunContext) -> None:
    """``trainyard validate --path`` as its own process, as a user runs it (a CSV that fails to
    convert once made the process abort at exit)."""
    good = run.lake.path(RAW, "data.parquet")
    cli = [sys.executable, "-m", "pipeline_steps.commands.cli"]
    command = [*cli, "validate", "--suite", "flights"]
    passed = subprocess.run([*command, "--path", good], capture_output=True, text=True)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "passed suite 'flights'" in passed.stdout

    csv = tmp_path / "flights.csv"
    table = pq.read_table(good).to_pandas()
    table.to_csv(csv, index=False)
    lines = csv.read_text().splitlines()
    lines.insert(3, "2013,6,4,this line,is,broken")
    csv.write_text("\n".join(lines) + "\n")
    broken = subprocess.run([*command, "--path", str(csv)], capture_output=True, text=True)
    assert broken.returncode == 2
    assert f"file {csv} cannot be read" in broken.stderr and "Traceback" not in broken.stderr

    pq.write_table(pq.read_table(good).drop_columns(["dest"]), tmp_path / "no_dest.parquet")
    failed = validate_file(tmp_path / "no_dest.parquet", "--date", str(date(2013, 6, 4)))
    assert failed.returncode == 1
    assert "expect_table_columns_to_match_set" in failed.stdout and "dest" in failed.stdout


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stdout + done.stderr
    printed = (done.stdout + done.stderr).splitlines()
    lines = [line for line in printed if line.startswith("trainyard validate")]
    assert len(lines) == 1, done.stdout + done.stderr
    return lines[0]


def test_a_file_without_rows_fails_with_one_line(tmp_path: Path, run: RunContext) -> None:
    table = pq.read_table(run.lake.path(RAW, "data.parquet"))
    pq.write_table(table.slice(0, 0), tmp_path / "empty.parquet")
    table.slice(0, 0).to_pandas().to_csv(tmp_path / "header.csv", index=False)
    (tmp_path / "zero.csv").write_bytes(b"")
    for name, said, code in [
        ("empty.parquet", "has no rows", 1),
        ("header.csv", "has no rows (only a header)", 1),
        ("zero.csv", "is empty (0 bytes)", 2),
    ]:
        done = validate_file(tmp_path / name)
        assert done.returncode == code, done.stdout + done.stderr
        assert f"file {tmp_path / name} {said}" in _one_line(done)


def test_a_file_of_several_dates_lists_them_or_is_split(tmp_path: Path, run: RunContext) -> None:
    table = pq.read_table(run.lake.path(RAW, "data.parquet"))
    other = _set(table.slice(0, 3), "day", pa.array([FIRST_DAY.day + 1] * 3, pa.int32()))
    next_day = pc.add(other["time_hour"], pa.scalar(86_400_000_000, pa.duration("us")))
    other = _set(other, "time_hour", next_day.cast(other.schema.field("time_hour").type))
    pq.write_table(pa.concat_tables([table, other]), tmp_path / "two.parquet")
    done = validate_file(tmp_path / "two.parquet")
    assert done.returncode == 1
    following = date(FIRST_DAY.year, FIRST_DAY.month, FIRST_DAY.day + 1)
    assert (
        f"holds several dates: {FIRST_DAY} ({table.num_rows} rows), {following} (3 rows)"
        in _one_line(done)
    )
    split = validate_file(tmp_path / "two.parquet", "--split-by-date")
    assert split.returncode == 0, split.stdout + split.stderr
    assert f"(date {FIRST_DAY}) passed" in split.stdout
    assert f"(date {following}) passed" in split.stdout
    dated = validate_file(tmp_path / "two.parquet", "--date", str(FIRST_DAY))
    assert dated.returncode == 1 and "on column 'day'" in dated.stdout


def test_a_file_without_its_date_columns_names_them(tmp_path: Path, run: RunContext) -> None:
    table = pq.read_table(run.lake.path(RAW, "data.parquet"))
    pq.write_table(table.drop_columns(["day"]), tmp_path / "no_day.parquet")
    done = validate_file(tmp_path / "no_day.parquet")
    assert done.returncode == 1
    assert "date cannot be inferred, column(s) ['day'] missing" in _one_line(done)


@pytest.mark.parametrize("content", ["", "header"])
def test_seeding_from_an_empty_source_file_fails_with_one_line(
    tmp_path: Path, run: RunContext, content: str
) -> None:
    files = tmp_path / "files"
    for dataset in ("flights", "weather", "planes"):
        (files / dataset).mkdir(parents=True)
        table = pq.read_table(run.lake.path(RAW.replace("flights", dataset, 1), "data.parquet"))
        text = table.slice(0, 0).to_pandas().to_csv(index=False) if content else ""
        (files / dataset / f"{FIRST_DAY}.csv").write_text(text)
    home = tmp_path / "other-home"
    path = f"ingest.path={files}/{{dataset}}/{{date}}.csv"
    source = ["--set", "ingest.source=file", "--set", path]
    for command in (
        ["seed", "--start", str(FIRST_DAY), "--end", str(FIRST_DAY)],
        ["step", "ingest", "--run-id", "empty", "--logical-date", str(FIRST_DAY)],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "pipeline_steps.commands.cli", *command, *source],
            capture_output=True,
            text=True,
            env={**os.environ, "TRAINYARD_HOME": str(home)},
        )
        assert done.returncode == 2, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert "failed (permanent)" in last and f"{FIRST_DAY}" in last
    assert not (home / "lake" / "flight_delay" / "validated").exists()


def _with_surprise(ctx: RunContext) -> None:
    path = ctx.lake.path(RAW, "data.parquet")
    table = pq.read_table(path)
    pq.write_table(table.append_column("surprise", pa.array([1] * table.num_rows)), path)


def test_an_added_column_is_reported_and_kept_out_of_validated(run: RunContext) -> None:
    _with_surprise(run)
    manifest = validate(run)
    changes = [
        (c.column, c.change, c.against, c.action)
        for c in manifest.datasets["flights"].schema_changes
    ]
    assert ("surprise", "added", "schema", "dropped") in changes
    assert ("surprise", "added", "previous", "kept") in changes
    validated = run.lake.validated_partition("flights", FIRST_DAY)
    assert validated is not None
    assert "surprise" not in run.lake.read_table(validated, "data.parquet").column_names
    report = run.lake.read_json(f"reports/validation/date={FIRST_DAY}", "flights.json")
    assert {"column": "surprise", "change": "added", "against": "schema"}.items() <= report[
        "schema_changes"
    ][0].items()


def test_an_added_column_stops_the_run_when_set_to_fail(
    run: RunContext, make_settings, lake_home: Path
) -> None:
    _with_surprise(run)
    strict = replace(
        run,
        settings=make_settings(
            "validation.schema_policy={flights.added_columns: fail}", home=lake_home
        ),
    )
    with pytest.raises(StepError, match=r"column 'surprise' added \(int64\) against the schema"):
        validate(strict)
    _assert_nothing_downstream(strict)


def test_a_reordered_column_set_passes_and_is_reported(run: RunContext) -> None:
    path = run.lake.path(RAW, "data.parquet")
    table = pq.read_table(path)
    pq.write_table(table.select(list(reversed(table.column_names))), path)
    manifest = validate(run)
    changes = manifest.datasets["flights"].schema_changes
    assert changes and all(c.change == "reordered" and c.action == "kept" for c in changes)
    assert {c.against for c in changes} == {"schema", "previous"}
