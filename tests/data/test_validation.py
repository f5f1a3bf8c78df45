"""The suites stop bad partitions before training and say what is wrong."""

import subprocess
import sys
from datetime import date

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipeline_steps.context import RunContext, StepError
from pipeline_steps.ingest import ingest
from pipeline_steps.validate import validate

DAY = date(2013, 6, 1)
RAW = "raw/flights/date=2013-06-01"


@pytest.fixture
def ingested(make_settings) -> RunContext:
    ctx = RunContext(run_id="r1", logical_date=DAY, settings=make_settings())
    ingest(ctx)
    return ctx


def _rewrite(ctx: RunContext, change) -> None:
    path = ctx.lake.path(RAW, "data.parquet")
    pq.write_table(change(pq.read_table(path)), path)


def test_real_partition_passes_and_is_published(ingested: RunContext) -> None:
    manifest = validate(ingested)
    assert manifest["verdict"] == "passed"
    assert ingested.lake.partition_dates("validated", "flights") == [DAY]
    report = ingested.lake.read_json("reports/validation/date=2013-06-01", "flights.json")
    assert report["result"]["success"] is True and report["failures"] == []


def test_missing_column_fails_names_it_and_publishes_nothing(ingested: RunContext) -> None:
    _rewrite(ingested, lambda t: t.drop_columns(["carrier"]))
    with pytest.raises(StepError) as error:
        validate(ingested)
    message = str(error.value)
    assert RAW in message and "expect_table_columns_to_match_set" in message
    assert "carrier" in message
    assert ingested.lake.partition_dates("validated", "flights") == []
    assert ingested.lake.exists("quarantine/flights/date=2013-06-01", "validation.json")


def test_out_of_range_values_are_reported_with_examples(ingested: RunContext) -> None:
    def corrupt(table: pa.Table) -> pa.Table:
        distance = pc.if_else(
            pc.equal(table["flight"], table["flight"][0]),
            pa.scalar(99_999, pa.int32()),
            table["distance"],
        )
        return table.set_column(table.schema.get_field_index("distance"), "distance", distance)

    _rewrite(ingested, corrupt)
    with pytest.raises(
        StepError, match=r"column 'distance': \d+ unexpected value\(s\), e.g. \[99999"
    ):
        validate(ingested)
    assert ingested.lake.partition_dates("validated", "flights") == []


def test_a_failing_rerun_withdraws_an_earlier_validated_copy(ingested: RunContext) -> None:
    validate(ingested)
    _rewrite(
        ingested,
        lambda t: t.set_column(
            t.schema.get_field_index("origin"), "origin", pa.array(["XXX"] * t.num_rows)
        ),
    )
    ingested.lake.write_json(
        {**ingested.lake.read_json(RAW, "_manifest.json"), "sha256": "new"}, RAW, "_manifest.json"
    )
    with pytest.raises(StepError, match="origin"):
        validate(ingested)
    assert ingested.lake.partition_dates("validated", "flights") == []


def test_cli_failure_is_readable_without_traceback(ingested: RunContext) -> None:
    _rewrite(ingested, lambda t: t.drop_columns(["dest"]))
    env_home = ingested.settings.lake.root.removesuffix("/lake")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline_steps.cli",
            "step",
            "validate",
            "--run-id",
            "r1",
            "--logical-date",
            "2013-06-01",
        ],
        capture_output=True,
        text=True,
        env={"TRAINYARD_HOME": env_home, "PATH": "/usr/bin"},
    )
    assert result.returncode == 2
    assert "trainyard step validate failed: validation failed" in result.stderr
    assert "dest" in result.stderr and "Traceback" not in result.stderr
