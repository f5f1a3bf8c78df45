"""The suites stop bad partitions before training and say what is wrong."""

import subprocess
import sys
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.steps.ingest import ingest
from pipeline_steps.steps.validate import validate
from tests.conftest import environ_of

DAY = date(2013, 6, 1)
RAW = "raw/flights/date=2013-06-01/version=0001"


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
    assert manifest.verdict == "passed"
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
            "pipeline_steps.commands.cli",
            "step",
            "validate",
            "--run-id",
            "r1",
            "--logical-date",
            "2013-06-01",
        ],
        capture_output=True,
        text=True,
        env={**environ_of(Path(env_home)), "PATH": "/usr/bin"},
    )
    assert result.returncode == 2
    assert "trainyard step validate failed (permanent): validation failed" in result.stderr
    assert "dest" in result.stderr and "Traceback" not in result.stderr


def _replace(table: pa.Table, column: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(column), column, values)


def test_rows_of_another_date_are_caught(ingested: RunContext) -> None:
    _rewrite(ingested, lambda t: _replace(t, "day", pa.array([2] * t.num_rows, pa.int32())))
    with pytest.raises(StepError, match=r"expect_column_values_to_be_between on column 'day'"):
        validate(ingested)


def test_duplicate_flight_keys_are_caught(ingested: RunContext) -> None:
    _rewrite(ingested, lambda t: pa.concat_tables([t, t.slice(0, 3)]))
    with pytest.raises(StepError, match="expect_compound_columns_to_be_unique"):
        validate(ingested)


def test_invalid_clock_times_are_caught(ingested: RunContext) -> None:
    def bad_minutes(t: pa.Table) -> pa.Table:
        times = pc.if_else(
            pc.equal(t["flight"], t["flight"][0]), pa.scalar(1075, pa.int32()), t["sched_dep_time"]
        )
        return _replace(t, "sched_dep_time", times)

    _rewrite(ingested, bad_minutes)
    with pytest.raises(
        StepError, match=r"column 'sched_dep_time': 1 unexpected value\(s\), e.g. \[1075\]"
    ):
        validate(ingested)


def test_row_count_is_judged_against_the_trailing_mean(lake_home, make_settings) -> None:
    from tests.conftest import FIRST_DAY

    ctx = RunContext(run_id="r1", logical_date=FIRST_DAY, settings=make_settings(home=lake_home))
    ingest(ctx)
    raw = f"raw/flights/date={FIRST_DAY}/version=0001"
    path = ctx.lake.path(raw, "data.parquet")
    table = pq.read_table(path)
    pq.write_table(table.slice(0, table.num_rows // 4), path)  # a quarter of a usual day
    with pytest.raises(StepError, match="expect_table_row_count_to_be_between"):
        validate(ctx)
    report = ctx.lake.read_json(f"reports/validation/date={FIRST_DAY}", "flights.json")
    assert report["parameters"]["row_count_min"] > table.num_rows // 4


def test_warnings_are_reported_and_the_run_goes_on(ingested: RunContext) -> None:
    """A third of tail numbers missing warns; more than half (the planes join key) stops."""

    def third_missing(t: pa.Table) -> pa.Table:
        kept = pa.array([i % 3 != 0 for i in range(t.num_rows)])
        return _replace(t, "tailnum", pc.if_else(kept, t["tailnum"], pa.scalar(None, pa.string())))

    _rewrite(ingested, third_missing)
    manifest = validate(ingested)
    assert manifest.verdict == "passed"
    assert "expect_column_values_to_not_be_null (tailnum)" in manifest.datasets["flights"].warnings
    assert ingested.lake.partition_dates("validated", "flights") == [DAY]
    # another run of the day finds the partition validated, and its warnings with it
    from dataclasses import replace

    from pipeline_steps.core.manifests import IngestManifest

    again = replace(ingested, run_id="r2")
    again.record(ingested.upstream(IngestManifest))
    cached = validate(again).datasets["flights"]
    assert cached.status == "cached"
    assert cached.warnings == manifest.datasets["flights"].warnings


def test_checkpoint_writes_data_docs_and_survives_quantile_results(make_settings) -> None:
    # The flights suite holds a quantile expectation, whose numpy results break GX's
    # Checkpoint store unless patched (pipeline_steps.quality.gx_compat).
    ctx = RunContext(
        run_id="r1", logical_date=DAY, settings=make_settings("validation.data_docs=true")
    )
    ingest(ctx)
    manifest = validate(ctx)
    docs = manifest.datasets["flights"].data_docs
    assert docs.endswith("data_docs/flights/index.html")
    assert "flights" in Path(docs).read_text()
    report = ctx.lake.read_json("reports/validation/date=2013-06-01", "flights.json")
    quantile = [
        r
        for r in report["result"]["results"]
        if r["expectation_config"]["type"] == "expect_column_quantile_values_to_be_between"
    ]
    assert quantile and quantile[0]["success"] is True


def test_a_passing_day_keeps_its_pages_and_a_failed_day_its_whole_site(make_settings) -> None:
    """A passing day's Data Docs are its pages (at most 200 KB per dataset) pointing at the
    lake's one copy of GX's assets; a failed day keeps its whole site (4.4 MB of it assets)."""
    import re

    ctx = RunContext(
        run_id="r1", logical_date=DAY, settings=make_settings("validation.data_docs=true")
    )
    ingest(ctx)
    validate(ctx)
    site = Path(ctx.lake.path("reports/validation/date=2013-06-01/data_docs"))
    assets = Path(ctx.lake.path("reports/data_docs_assets"))
    sites = sorted(p for p in site.iterdir() if p.is_dir())
    assert [p.name for p in sites] == sorted(ctx.datasets)
    for folder in sites:
        assert not (folder / "static").exists()
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        assert size <= 200_000, (folder.name, size)
        for page in folder.rglob("*.html"):  # every link to an asset finds it
            links = re.findall(r'(?:href|src)="([^":]*static/[^"]*)"', page.read_text())
            assert links and all((page.parent / link).resolve().is_file() for link in links)
            assert all(link.startswith("../") for link in links), links
    assert sum(f.stat().st_size for f in assets.rglob("*") if f.is_file()) > 1_000_000

    _rewrite(ctx, lambda t: t.drop_columns(["carrier"]))
    ctx.lake.write_json(
        {**ctx.lake.read_json(RAW, "_manifest.json"), "sha256": "new"}, RAW, "_manifest.json"
    )
    with pytest.raises(StepError, match="carrier"):
        validate(ctx)
    failed = site / "flights"
    assert (failed / "static").is_dir()
    assert sum(f.stat().st_size for f in failed.rglob("*") if f.is_file()) > 4_000_000
    index = (failed / "index.html").read_text()
    assert 'href="./static/images/favicon.ico"' in index


def test_validate_measures_no_drift(ingested: RunContext) -> None:
    # drift is the monitor's (flight_delay_drift_monitor): validate records no reading of it
    manifest = validate(ingested)
    assert manifest.verdict == "passed" and manifest.drift is None
    recorded = ingested.lake.read_json(ingested.run_dir, "validate.json")
    assert "drift" not in recorded and "drift" not in manifest.to_json()
    assert not ingested.lake.exists("reports/drift")
