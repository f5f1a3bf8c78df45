"""Sources of daily partitions, as streams of record batches of bounded size.

``file`` (CSV or parquet on local disk or any fsspec URL) and ``sql`` (a SQLAlchemy URL) read a
user's data; ``domain``, the default, reads the domain's own source (e.g. the real data a
shipped example's package reads). Rows of a dataset the domain knows
are cast to its types; a file's integer columns are read exactly, whether written ``11`` or, as
pandas writes an integer column with missing values, ``11.0``.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from pipeline_steps.core.domain import Availability, Domain, Source
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.settings import IngestSettings
from pipeline_steps.domain.event_times import days_of
from pipeline_steps.domain.physical_types import as_declared, holds_same_kind

NULLS = ["NA", ""]


def csv_options(schema: pa.Schema | None) -> pcsv.ConvertOptions:
    """CSV parsing with the dataset's column types where known ("NA" and "" are missing).

    Columns are not selected or reordered: a missing or extra column stays visible to the suites.
    """
    return pcsv.ConvertOptions(
        column_types={f.name: f.type for f in schema} if schema is not None else None,
        null_values=NULLS,
        strings_can_be_null=True,
    )


_CSV_COLUMN = re.compile(r"In CSV column #(\d+): (?:Row #(\d+): )?(.*)")
"""pyarrow's conversion error: the column's index, the file's line where the reader knows it
(the serial reader does: one thread, as ``OMP_NUM_THREADS=1`` gives it), the reason."""
_DELIMITERS = {";": "semicolons", "\t": "tabs", "|": "pipes"}


def describe_read_error(exc: Exception, header: list[str], schema: pa.Schema | None = None) -> str:
    """One line for a file that cannot be read, naming the column where the reader says which
    (pyarrow gives only its index) and the line where it says which, with the type ``schema``
    gives it (integer columns are read as wider types, see ``open_file``), and the likely cause
    of a decimal comma."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    found = _CSV_COLUMN.search(line)
    if found and int(found.group(1)) < len(header):
        name = header[int(found.group(1))]
        where, reason = found.group(2), found.group(3)
        if schema is not None and name in schema.names:
            typed = f"CSV conversion error to {schema.field(name).type}:"
            reason = re.sub(r"^CSV conversion error to .+?:", typed, reason)
        line = f"column {name!r}{f', line {where}' if where else ''}: {reason}"
        if re.search(r"invalid value '-?\d+,\d+'", line):
            line += " (a decimal comma? numbers must use a decimal point)"
    if re.search(r"Expected \d+ columns, got \d+", line):
        line += " (a file cut short, or a field with an unquoted comma)"
    return line


def single_column_delimiter(names: list[str]) -> str | None:
    """When a CSV was read as one column whose name holds another delimiter: that delimiter's
    name (the file is delimited by it, not by commas)."""
    if len(names) != 1:
        return None
    return next((word for mark, word in _DELIMITERS.items() if mark in names[0]), None)


_MAGIC = {
    b"PAR1": "a parquet file (name it .parquet)",
    b"PK\x03\x04": "a zip archive, such as an xlsx spreadsheet (export it as CSV or parquet)",
    b"\x1f\x8b": "gzip-compressed data (name it .csv.gz)",
    b"\xd0\xcf\x11\xe0": "an xls spreadsheet (export it as CSV or parquet)",
}
"""The first bytes of formats that are no CSV text, and what to do about them."""


def wrong_format(fs: Any, path: str) -> str | None:
    """What ``path`` holds when it is not the format its name says, from its first bytes: for a
    ``.parquet`` name anything without parquet's magic; for a CSV name (uncompressed) another
    format's magic, binary content, or JSON. None when it looks like what it claims."""
    from fsspec.utils import infer_compression

    with fs.open(path, "rb") as fh:
        head = fh.read(4096)
    if path.endswith(".parquet"):
        if head.startswith(b"PAR1"):
            return None
        found = next((what for magic, what in _MAGIC.items() if head.startswith(magic)), None)
        return f"not a parquet file: it holds {found or 'no parquet data (no PAR1 magic)'}"
    if infer_compression(path) is not None:
        return None
    found = next((what for magic, what in _MAGIC.items() if head.startswith(magic)), None)
    if found is None and (b"\x00" in head or not _utf8(head)):
        found = "binary data, not text"
    if found is None and head.lstrip(b"\xef\xbb\xbf \r\n\t")[:1] in (b"{", b"["):
        found = "JSON, not comma-separated text (export it as CSV or parquet)"
    return f"not a CSV file: it holds {found}" if found else None


def _utf8(head: bytes) -> bool:
    """Whether ``head`` is UTF-8 text, allowing a character cut at its end."""
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(head) - 3
    return True


def csv_header(fh: Any) -> list[str]:
    """The first line of a CSV split on commas (to name columns in errors)."""
    first = b""
    while b"\n" not in first:
        block = fh.read(1 << 16)
        if not block:
            break
        first += block
    text = first.split(b"\n", 1)[0].decode("utf-8-sig", "replace")
    return [name.strip().strip('"') for name in text.rstrip("\r\n").split(",")]


_ARROW_CODECS = ("gzip", "bz2", "zstd", "lz4")
"""Compressions Arrow decompresses itself; fsspec's file objects read the others."""


def open_source_file(fs: Any, path: str) -> Any:
    """A file to read ``path`` of ``fs`` from, as a context manager.

    A local file opens as a native Arrow file: Arrow's CSV reader reads ahead on its own threads,
    and reading ahead from a Python file object would hold the interpreter's lock on them, which
    aborts the process when it exits while one is still reading (after a conversion error).
    Other filesystems, and compressions Arrow lacks, read through fsspec.
    """
    from fsspec.implementations.local import LocalFileSystem
    from fsspec.utils import infer_compression

    codec = infer_compression(path)
    if isinstance(fs, LocalFileSystem):
        if path.endswith(".parquet"):
            return pa.memory_map(path)
        if codec is None or codec in _ARROW_CODECS:
            return pa.input_stream(path, compression=codec)
    return fs.open(path, "rb", compression="infer")


def open_file(
    fh: Any, path: str, schema: pa.Schema | None, batch_rows: int
) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """Schema and record batches of an open CSV or parquet file (by its name's ending).

    The columns that ``schema`` names and the file holds in another physical type of the same
    kind come in the schema's types (``physical_types``): a CSV's integer columns exactly, ``11``
    and ``11.0`` alike; parquet's int64 for int32, whole doubles for integers, dictionary-encoded
    and large strings, other timestamp units. Other columns, and all of a file without a schema,
    come as the file has them. Iterating raises ``pa.ArrowInvalid`` naming the column, the row
    and a value its declared type cannot hold (``11.5``).
    """
    retyped: dict[int, pa.DataType]
    if path.endswith(".parquet"):
        parquet = pq.ParquetFile(fh)
        found, index = parquet.schema_arrow, _pandas_index(parquet.schema_arrow)
        if index:  # the row labels pandas stores beside the data are no column of it
            found = pa.schema([f for f in found if f.name not in index], found.metadata)
        batches = parquet.iter_batches(batch_size=batch_rows, columns=found.names)
        retyped = _retyped(found, schema, holds_same_kind)
    else:
        reader = pcsv.open_csv(
            fh,
            read_options=pcsv.ReadOptions(block_size=1 << 22),
            convert_options=csv_options(_as_written(schema) if schema is not None else None),
        )
        found, batches = reader.schema, iter(reader)
        retyped = _retyped(found, schema, lambda read, declared: read != declared)
    if not retyped:
        return found, batches
    typed = pa.schema([f.with_type(retyped.get(i, f.type)) for i, f in enumerate(found)])
    return typed, _typed_batches(batches, typed, retyped)


def _pandas_index(schema: pa.Schema) -> set[str]:
    """The columns pandas' ``to_parquet`` wrote for a frame's index (``__index_level_0__``, as
    its metadata names them), not for its data."""
    metadata = schema.pandas_metadata or {}
    return {name for name in metadata.get("index_columns", []) if isinstance(name, str)}


def _as_written(schema: pa.Schema) -> pa.Schema:
    """The types a CSV's columns are read in: an integer of up to 32 bits as a double (which holds
    each of its values exactly, and reads ``11.0``), a 64-bit one as text (a double would round
    it); ``as_declared`` casts them back."""

    def written(declared: pa.DataType) -> pa.DataType:
        if not pa.types.is_integer(declared):
            return declared
        return pa.float64() if declared.bit_width <= 32 else pa.string()

    return pa.schema([f.with_type(written(f.type)) for f in schema])


def _retyped(
    found: pa.Schema,
    schema: pa.Schema | None,
    converts: Callable[[pa.DataType, pa.DataType], bool],
) -> dict[int, pa.DataType]:
    """Position -> declared type of the columns of ``found`` that ``schema`` names and that
    ``converts`` (from the found type to the declared one)."""
    if schema is None:
        return {}
    declared = {f.name: f.type for f in schema}
    return {
        i: declared[f.name]
        for i, f in enumerate(found)
        if f.name in declared and converts(f.type, declared[f.name])
    }


def _typed_batches(
    batches: Iterator[pa.RecordBatch], typed: pa.Schema, retyped: dict[int, pa.DataType]
) -> Iterator[pa.RecordBatch]:
    first_row = 1
    for batch in batches:
        columns = list(batch.columns)
        for index, declared in retyped.items():
            columns[index] = as_declared(columns[index], declared, typed.names[index], first_row)
        first_row += batch.num_rows
        yield pa.RecordBatch.from_arrays(columns, schema=typed)


# -- sources as streams of record batches --------------------------------------------------------


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


def number_rows(batch: pa.RecordBatch, column: str, file: str, first: int) -> pa.RecordBatch:
    """``batch`` with a key column ``column`` (``ingest.row_key``) appended: each row's
    ``<file>:<row number>``, the batch's first row being row ``first`` of the file (from 1)."""
    keys = _row_keys(batch.schema.names, column, file, first, batch.num_rows)
    return pa.RecordBatch.from_arrays([*batch.columns, keys], [*batch.schema.names, column])


def with_row_keys(table: pa.Table, column: str, file: str) -> pa.Table:
    """A whole file's rows with their ``number_rows`` key."""
    return table.append_column(column, _row_keys(table.column_names, column, file, 1, len(table)))


def _row_keys(names: list[str], column: str, file: str, first: int, rows: int) -> pa.Array:
    if column in names:
        raise StepError(
            f"file {file} has a column {column!r} already; ingest.row_key makes one of that "
            "name: use the file's column as the key (--key), or name the made one otherwise"
        )
    return pa.array([f"{file}:{first + n}" for n in range(rows)], pa.string())


@dataclass(frozen=True)
class FileSource:
    """CSV or parquet files on local disk or any fsspec URL, one or many per day."""

    template: str
    date_column: str
    batch_rows: int
    schemas: Mapping[str, pa.Schema]
    name: str = "file"
    date_format: str = ""
    """How ``date_column`` writes a time (``ingest.date_format``, :mod:`event_times`)."""
    time_zone: str = ""
    """The zone a day is counted in (``ingest.time_zone``)."""
    row_key: str = ""
    """A key column made for rows without an id (``ingest.row_key``, :func:`number_rows`)."""

    def files(self, dataset: str, day: date) -> tuple[Any, list[str]]:
        url = self.template.format(dataset=dataset, date=day.isoformat())
        fs, pattern = fsspec.core.url_to_fs(url)
        found = sorted(fs.glob(pattern)) if fs.exists(pattern) or glob.has_magic(pattern) else []
        if not found:
            raise StepError(f"file source: no file matches {url}")
        return fs, found

    def availability(self, dataset: str, day: date) -> Availability:
        url = self.template.format(dataset=dataset, date=day.isoformat())
        try:
            self.files(dataset, day)
        except StepError:
            return Availability(False, f"no data for {day} in source file: nothing matches {url}")
        return Availability(True, f"{url} matches file(s) that may hold {day}")

    def later_rows(self, dataset: str, day: date) -> bool:
        """Whether the files that may hold ``day`` hold rows of a later day: a source that has
        moved past the day, which will not get its rows any more. False without
        ``date_column`` (the path alone selects the day) or without files."""
        if not self.date_column:
            return False
        try:
            fs, files = self.files(dataset, day)
        except StepError:
            return False
        dated = (self.date_format, self.time_zone)
        for path in files:
            for batch in self._read(fs, path, self.schemas.get(dataset)):
                if self.date_column not in batch.schema.names or not batch.num_rows:
                    continue
                latest = pc.max(days_of(batch.column(self.date_column), *dated)).as_py()
                if latest is not None and latest > day:
                    return True
        return False

    def batches(self, dataset: str, day: date) -> Iterator[pa.RecordBatch]:
        fs, files = self.files(dataset, day)
        for path in files:
            wrong = wrong_format(fs, path)
            if wrong:
                raise StepError(f"file {path} is {wrong}")
            first = 1
            try:
                for batch in self._read(fs, path, self.schemas.get(dataset)):
                    delimiter = single_column_delimiter(batch.schema.names)
                    if delimiter:
                        raise StepError(
                            f"file {path} is delimited by {delimiter}, not commas: its one "
                            f"column is {batch.schema.names[0][:60]!r}…"
                        )
                    if self.row_key:
                        batch = number_rows(batch, self.row_key, path, first)
                        first += batch.num_rows
                    batch = conform(batch, self.schemas.get(dataset))
                    if self.date_column:
                        batch = _rows_of_day(
                            batch, self.date_column, (self.date_format, self.time_zone), day
                        )
                    yield batch
            except pa.ArrowException as exc:
                header: list[str] = []
                if not path.endswith(".parquet"):
                    with open_source_file(fs, path) as fh:
                        header = csv_header(fh)
                reason = describe_read_error(exc, header, self.schemas.get(dataset))
                raise StepError(f"file {path} cannot be read: {reason}") from exc

    def _read(self, fs: Any, path: str, schema: pa.Schema | None) -> Iterator[pa.RecordBatch]:
        with open_source_file(fs, path) as fh:
            yield from open_file(fh, path, schema, self.batch_rows)[1]


def _rows_of_day(
    batch: pa.RecordBatch, column: str, dated: tuple[str, str], day: date
) -> pa.RecordBatch:
    """The rows of ``batch`` whose ``column`` falls on ``day``, read in ``dated``'s format and
    counted in its zone (``ingest.date_format``, ``ingest.time_zone``)."""
    if column not in batch.schema.names:
        raise StepError(f"ingest.date_column {column!r} is not a column of the source")
    try:
        days = days_of(batch.column(column), *dated)
    except pa.ArrowInvalid as exc:
        raise pa.ArrowInvalid(f"ingest.date_column {column!r} {exc}") from exc
    return batch.filter(pc.equal(days, pa.scalar(day, pa.date32())))


@dataclass(frozen=True)
class SqlSource:
    """A SQLAlchemy URL and a query with ``:day``, streamed with server-side cursors."""

    url: str
    query: str
    batch_rows: int
    schemas: Mapping[str, pa.Schema]
    name: str = "sql"

    def availability(self, dataset: str, day: date) -> Availability:
        import sqlalchemy as sa

        engine = sa.create_engine(self.url)
        try:
            with engine.connect() as conn:
                result = conn.execution_options(stream_results=True).execute(
                    sa.text(self.query.format(dataset=dataset)), {"day": day}
                )
                found = result.first() is not None
        except sa.exc.SQLAlchemyError as exc:
            return Availability(False, f"sql source {engine.url!r} not reachable yet: {exc}")
        finally:
            engine.dispose()
        if found:
            return Availability(True, f"sql source has {dataset} rows for {day}")
        return Availability(False, f"no data for {day} in sql source ({dataset} has no rows)")

    def batches(self, dataset: str, day: date) -> Iterator[pa.RecordBatch]:
        import sqlalchemy as sa

        engine = sa.create_engine(self.url)
        schema = self.schemas.get(dataset)
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


def open_source(settings: IngestSettings, domain: Domain) -> Source:
    """The configured source: ``file``, ``sql``, or the domain's own (``domain``, or its name as
    recorded in a run's settings); rows of the domain's datasets are cast to its types."""
    if settings.source == "file":
        return FileSource(
            settings.path,
            settings.date_column,
            settings.batch_rows,
            domain.schemas,
            date_format=settings.date_format,
            time_zone=settings.time_zone,
            row_key=settings.row_key,
        )
    if settings.row_key:
        raise StepError(
            f"ingest.row_key {settings.row_key!r} applies to the file source only (a file's rows "
            f"keep their place); ingest.source is {settings.source!r}"
        )
    if settings.source == "sql":
        return SqlSource(settings.sql_url, settings.sql_query, settings.batch_rows, domain.schemas)
    source = domain.source(settings.batch_rows)
    if settings.source not in ("domain", source.name):
        raise StepError(
            f"ingest.source {settings.source!r} is unknown; known: domain ({source.name}), "
            "file, sql"
        )
    return source
