"""``trainyard validate --path``: one CSV or parquet file checked by hand, as the pipeline would.

The file is judged as the validate step would judge it as the partition of its date: the same
suite, the bounds the trailing validated days of the lake give (row count, missing shares, the
history checks of the day's distribution), the same schema-change policy. Without enough history
in the lake the checks that need it stay open, and the check says which and why.

Exit codes of the command: 0 the file passes, 1 it fails (its suite, or it has no rows, or its
partition date cannot be inferred: several dates, or none), 2 it cannot be read as what it
claims: missing, empty (0 bytes), another format (binary, JSON, a spreadsheet), another
delimiter, cut short, or a value its column's type cannot hold.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline_steps.core.domain import Domain, load_domain
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.lake import CHUNK_ROWS, Lake
from pipeline_steps.core.manifests import SchemaChange
from pipeline_steps.core.settings import Settings
from pipeline_steps.domain.event_times import days_of
from pipeline_steps.quality.schema_changes import judge
from pipeline_steps.quality.suites import SuiteOutcome, as_frame, load_suite, run_suite, suite_path

DATE_COLUMNS = ("year", "month", "day")
"""The columns a file's partition date is read from when ``--date`` is not given."""


class FileRejected(StepError):
    """The file was read but cannot pass as one partition: it has no rows, or not exactly one
    partition date. ``validate --path`` exits 1 with this one line."""


@dataclass(frozen=True)
class FileCheck:
    """One partition date of a file judged as the validate step would judge it."""

    day: date
    rows: int
    outcome: SuiteOutcome
    schema_changes: list[SchemaChange] = field(default_factory=list)
    not_applied: list[str] = field(default_factory=list)
    """Checks the lake's trailing history was too short to apply, each with why."""

    @property
    def refused(self) -> list[SchemaChange]:
        """Schema changes that stop the run (``validation`` settings)."""
        return [c for c in self.schema_changes if c.action == "failed"]

    @property
    def success(self) -> bool:
        return self.outcome.success and not self.refused


def read_any(path: str, schema: pa.Schema | None) -> pa.Table:
    """Read a CSV or parquet file (local path or fsspec URL) as the file source would, columns
    typed by ``schema`` where it names them (``open_file``: integers written ``11.0`` are read
    exactly, dictionary and large string columns as plain ones). Raises ``StepError`` when it
    is missing, empty (0 bytes), of another format than its name says (binary, JSON, a
    spreadsheet), delimited by something else than commas, or cannot be read (a fraction in an
    integer column is named with its column and row)."""
    import fsspec

    from pipeline_steps.domain.sources import (
        csv_header,
        describe_read_error,
        open_file,
        open_source_file,
        single_column_delimiter,
        wrong_format,
    )

    header: list[str] = []
    try:
        fs, local = fsspec.core.url_to_fs(path)
        if fs.size(local) == 0:
            raise StepError(f"file {path} is empty (0 bytes): no rows to validate")
        wrong = wrong_format(fs, local)
        if wrong:
            raise StepError(f"file {path} is {wrong}")
        if not path.endswith(".parquet"):
            with open_source_file(fs, local) as fh:
                header = csv_header(fh)
        with open_source_file(fs, local) as fh:
            found, batches = open_file(fh, path, schema, CHUNK_ROWS)
            table = pa.Table.from_batches(list(batches), found)
    except FileNotFoundError as exc:
        raise StepError(f"file {path} does not exist") from exc
    except (pa.ArrowException, OSError, ValueError) as exc:
        delimiter = single_column_delimiter(header[:1]) if len(header) == 1 else None
        if delimiter:
            raise StepError(
                f"file {path} is delimited by {delimiter}, not commas: its one column is "
                f"{header[0][:60]!r}…"
            ) from exc
        reason = describe_read_error(exc, header, schema)
        raise StepError(f"file {path} cannot be read: {reason}") from exc
    delimiter = single_column_delimiter(table.column_names)
    if delimiter:
        raise StepError(
            f"file {path} is delimited by {delimiter}, not commas: its one column is "
            f"{table.column_names[0][:60]!r}…"
        )
    return table


def check_file(
    path: str,
    suite: str,
    settings: Settings,
    day: date | None = None,
    split_by_date: bool = False,
) -> list[FileCheck]:
    """Validate one file by hand as the pipeline's validate step would judge it as the partition
    of its date: the dataset's suite, with the bounds the trailing validated days of the lake
    (``settings.lake``) give, and the same schema-change policy against the dataset's schema and
    the lake's previous raw version.

    The partition date is ``day`` when given, else the file's (from the domain's time column,
    ``ingest.date_column``, or from year/month/day columns): its rows must then hold one date
    (``split_by_date`` validates each date's rows on their own); a suite that needs no date (a
    registry snapshot) is judged as the partition of the day after the lake's latest validated
    one. Returns one check per date validated, each saying which checks the lake's history was
    too short to apply. Raises ``FileRejected`` when the file has no rows or its date cannot be
    inferred, ``StepError`` when the file or the suite cannot be read.
    """
    domain = load_domain(settings.domain.module)
    schema = domain.schemas.get(suite)
    file = suite_path(settings.validation.expectations_dir, suite)
    load_suite(file)  # a missing or broken suite is named before the file is read
    table = read_any(path, schema)
    if settings.ingest.row_key:  # the key ingest makes for rows without an id
        from pipeline_steps.domain.sources import with_row_keys

        table = with_row_keys(table, settings.ingest.row_key, path)
    if table.num_rows == 0:
        kind = "only a header" if not path.endswith(".parquet") else "a schema and no rows"
        raise FileRejected(f"file {path} has no rows ({kind}): nothing to validate")
    lake = Lake(settings.lake_root)
    dated = bool(settings.ingest.date_column) and settings.ingest.date_column in table.column_names
    if day is not None or not (dated or _needs_date(file.read_text())):
        return [_judge(lake, suite, table, day or _next_day(lake, suite), settings, domain)]
    row_days = _row_days(path, table, settings)
    counts = Counter(d for d in row_days.to_pylist() if d is not None)
    if not counts:
        raise FileRejected(
            f"file {path}: its partition date cannot be inferred, no row has a date in "
            f"{_dated_by(settings)}; pass --date YYYY-MM-DD"
        )
    if len(counts) > 1 and not split_by_date:
        found = ", ".join(f"{d.isoformat()} ({n} rows)" for d, n in sorted(counts.items()))
        raise FileRejected(
            f"file {path} holds several dates: {found}; pass --date YYYY-MM-DD, "
            "or --split-by-date to validate each"
        )
    if len(counts) == 1:  # rows without a complete date stay in for the suite to judge
        return [_judge(lake, suite, table, next(iter(counts)), settings, domain)]
    return [
        _judge(lake, suite, table.filter(pc.equal(row_days, one_day)), one_day, settings, domain)
        for one_day in sorted(counts)
    ]


def _dated_by(settings: Settings) -> str:
    column = settings.ingest.date_column
    return f"column {column!r} (ingest.date_column)" if column else f"columns {list(DATE_COLUMNS)}"


def _row_days(path: str, table: pa.Table, settings: Settings) -> pa.ChunkedArray:
    """The day of each row: from the domain's time column (``ingest.date_column``, read by
    ``ingest.date_format``) as the file source dates rows, else from year/month/day columns."""
    column = settings.ingest.date_column
    if column:
        if column not in table.column_names:
            raise FileRejected(
                f"file {path}: its partition date cannot be inferred, column {column!r} "
                "(ingest.date_column) missing; pass --date YYYY-MM-DD"
            )
        try:
            return days_of(table[column], settings.ingest.date_format, settings.ingest.time_zone)
        except pa.ArrowInvalid as exc:
            raise FileRejected(
                f"file {path}: column {column!r} (ingest.date_column) {exc}"
            ) from exc
    missing = [c for c in DATE_COLUMNS if c not in table.column_names]
    if missing:
        raise FileRejected(
            f"file {path}: its partition date cannot be inferred, column(s) {missing} missing; "
            "pass --date YYYY-MM-DD"
        )
    year, month, dom = (pc.cast(table[c], pa.int64()) for c in DATE_COLUMNS)
    keys = pc.add(pc.add(pc.multiply(year, 10_000), pc.multiply(month, 100)), dom)
    distinct = pc.unique(keys.drop_null())
    days = pa.array(
        [_calendar_day(path, (k // 10_000, k // 100 % 100, k % 100)) for k in distinct.to_pylist()],
        pa.date32(),
    )
    return pc.take(days, pc.index_in(keys, value_set=distinct))


def _judge(
    lake: Lake, dataset: str, table: pa.Table, day: date, settings: Settings, domain: Domain
) -> FileCheck:
    """The rows of one partition date judged as the validate step judges a raw partition."""
    from pipeline_steps.quality.trailing import suite_parameters, unapplied_checks

    expectations = load_suite(suite_path(settings.validation.expectations_dir, dataset))
    changes = judge(
        dataset,
        table.schema,
        domain.schemas.get(dataset),
        _previous_schema(lake, dataset, day),
        settings.validation,
    )
    dropped = {c.column for c in changes if c.action == "dropped"}
    parameters = suite_parameters(
        lake,
        dataset,
        day,
        settings.validation,
        suite=expectations,
        coverage=domain.coverage,
        ingested_at=datetime.now(UTC).isoformat(timespec="seconds"),
        rows=table.num_rows,
    )
    frame = as_frame(table.select([c for c in table.column_names if c not in dropped]))
    return FileCheck(
        day=day,
        rows=table.num_rows,
        outcome=run_suite(dataset, frame, expectations, parameters),
        schema_changes=changes,
        not_applied=unapplied_checks(lake, dataset, day, settings.validation, expectations),
    )


def _previous_schema(lake: Lake, dataset: str, day: date) -> pa.Schema | None:
    """The schema of the raw version the validate step would compare the file with."""
    previous = lake.previous_raw(dataset, day)
    return lake.parquet_schema(previous) if previous else None


def _next_day(lake: Lake, dataset: str) -> date:
    """The day after the lake's latest validated partition of ``dataset`` (today without any)."""
    validated = lake.partition_dates("validated", dataset)
    return validated[-1] + timedelta(days=1) if validated else datetime.now(UTC).date()


def _calendar_day(path: str, key: tuple[Any, ...]) -> date:
    year, month, dom = (int(v) for v in key)
    try:
        return date(year, month, dom)
    except ValueError as exc:
        raise FileRejected(
            f"file {path}: year/month/day {year}-{month}-{dom} is not a calendar date; "
            "pass --date YYYY-MM-DD"
        ) from exc


def _needs_date(suite_json: str) -> bool:
    """Whether a suite refers to the partition date (a ``partition_*`` parameter)."""
    return any(name.startswith("partition_") for name in _parameters(json.loads(suite_json)))


def _parameters(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$PARAMETER"), str):
            yield node["$PARAMETER"]
        for value in node.values():
            yield from _parameters(value)
    elif isinstance(node, list):
        for value in node:
            yield from _parameters(value)
