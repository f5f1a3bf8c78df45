"""A catalogue of bad inputs: each stops the run before training with a message that names the
problem, and nothing is written to validated/, to a training set or to the registry."""

import subprocess
import sys
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from mlflow import MlflowClient

from pipeline_steps.context import RunContext
from pipeline_steps.errors import StepError
from pipeline_steps.steps.features import build_features
from pipeline_steps.steps.ingest import ingest
from pipeline_steps.steps.validate import validate
from tests.conftest import FIRST_DAY

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
    "extra column": (
        lambda t: t.append_column("surprise", pa.array([1] * t.num_rows)),
        r"expect_table_columns_to_match_set: unexpected column\(s\) \['surprise'\]",
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


@pytest.fixture
def run(lake_home, make_settings) -> RunContext:
    ctx = RunContext(run_id="bad", logical_date=FIRST_DAY, settings=make_settings(home=lake_home))
    ingest(ctx)
    return ctx


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
    good = run.lake.path(RAW, "data.parquet")
    command = [sys.executable, "-m", "pipeline_steps.cli", "validate", "--suite", "flights"]
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
    failed = subprocess.run(
        [*command, "--path", str(tmp_path / "no_dest.parquet"), "--date", str(date(2013, 6, 4))],
        capture_output=True,
        text=True,
    )
    assert failed.returncode == 1
    assert "expect_table_columns_to_match_set" in failed.stdout and "dest" in failed.stdout
