"""``trainyard validate --path``: one CSV or parquet file checked by hand against a suite.

Exit codes of the command: 0 the file passes, 1 it fails (its suite, or it has no rows, or its
partition date cannot be inferred: several dates, or none), 2 it cannot be read at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import pyarrow as pa

from pipeline_steps.core.domain import load_domain
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.lake import CHUNK_ROWS
from pipeline_steps.core.settings import Settings
from pipeline_steps.quality.suites import SuiteOutcome, as_frame, load_suite, run_suite, suite_path

DATE_COLUMNS = ("year", "month", "day")
"""The columns a file's partition date is read from when ``--date`` is not given."""


class FileRejected(StepError):
    """The file was read but cannot pass as one partition: it has no rows, or not exactly one
    partition date. ``validate --path`` exits 1 with this one line."""


@dataclass(frozen=True)
class FileCheck:
    """One partition date of a file judged by its suite (``day`` None: the suite needs none)."""

    day: date | None
    rows: int
    outcome: SuiteOutcome


def read_any(path: str, schema: pa.Schema | None) -> pa.Table:
    """Read a CSV or parquet file (local path or fsspec URL) as the file source would, columns
    typed by ``schema`` where it names them (``open_file``: integers written ``11.0`` are read
    exactly, dictionary and large string columns as plain ones). Raises ``FileRejected`` for a
    file of 0 bytes (it has no rows), ``StepError`` when it is missing or cannot be read (a
    fraction in an integer column is named with its column)."""
    import fsspec

    from pipeline_steps.domain.sources import (
        csv_header,
        describe_read_error,
        open_file,
        open_source_file,
        single_column_delimiter,
    )

    header: list[str] = []
    try:
        fs, local = fsspec.core.url_to_fs(path)
        if fs.size(local) == 0:
            raise FileRejected(f"file {path} is empty (0 bytes): no rows to validate")
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
            raise FileRejected(
                f"file {path} is delimited by {delimiter}, not commas: its one column is "
                f"{header[0][:60]!r}…"
            ) from exc
        reason = describe_read_error(exc, header, schema)
        raise StepError(f"file {path} cannot be read: {reason}") from exc
    delimiter = single_column_delimiter(table.column_names)
    if delimiter:
        raise FileRejected(
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
    """Validate one file by hand against a suite (a dataset's name).

    The partition date is ``day`` when given, else the file's: its rows must then hold one date
    (``split_by_date`` validates each date's rows on their own). Returns one check per date
    validated. Raises ``FileRejected`` when the file has no rows or its date cannot be inferred,
    ``StepError`` when the file or the suite cannot be read.
    """
    domain = load_domain(settings.domain.module)
    schema = domain.schemas.get(suite)
    known = _known(domain.coverage)
    file = suite_path(settings.validation.expectations_dir, suite)
    expectations = load_suite(file)
    table = read_any(path, schema)
    if table.num_rows == 0:
        kind = "only a header" if not path.endswith(".parquet") else "a schema and no rows"
        raise FileRejected(f"file {path} has no rows ({kind}): nothing to validate")
    frame = as_frame(table)
    if day is not None or not _needs_date(file.read_text()):
        return [
            FileCheck(day, len(frame), run_suite(suite, frame, expectations, _params(day) | known))
        ]
    missing = [c for c in DATE_COLUMNS if c not in frame.columns]
    if missing:
        raise FileRejected(
            f"file {path}: its partition date cannot be inferred, column(s) {missing} missing; "
            "pass --date YYYY-MM-DD"
        )
    dated = frame.dropna(subset=list(DATE_COLUMNS))
    counts = dated.groupby(list(DATE_COLUMNS)).size()
    if counts.empty:
        raise FileRejected(
            f"file {path}: its partition date cannot be inferred, no row has all of "
            f"{list(DATE_COLUMNS)}; pass --date YYYY-MM-DD"
        )
    days = {key: _calendar_day(path, key) for key in counts.index}
    if len(counts) > 1 and not split_by_date:
        found = ", ".join(f"{days[k].isoformat()} ({n} rows)" for k, n in counts.items())
        raise FileRejected(
            f"file {path} holds several dates: {found}; pass --date YYYY-MM-DD, "
            "or --split-by-date to validate each"
        )
    if len(counts) == 1:  # rows without a complete date stay in for the suite to judge
        only = days[counts.index[0]]
        return [
            FileCheck(
                only, len(frame), run_suite(suite, frame, expectations, _params(only) | known)
            )
        ]
    checks = []
    for key, one_day in days.items():
        rows = dated[(dated[list(DATE_COLUMNS)] == list(key)).all(axis=1)]
        outcome = run_suite(suite, rows, load_suite(file), _params(one_day) | known)
        checks.append(FileCheck(one_day, len(rows), outcome))
    return checks


def _calendar_day(path: str, key: tuple[Any, ...]) -> date:
    year, month, dom = (int(v) for v in key)
    try:
        return date(year, month, dom)
    except ValueError as exc:
        raise FileRejected(
            f"file {path}: year/month/day {year}-{month}-{dom} is not a calendar date; "
            "pass --date YYYY-MM-DD"
        ) from exc


def _known(coverage: tuple[date, date] | None) -> dict[str, Any]:
    """What a file checked by hand is judged against beyond its rows: the source's declared
    coverage, and now as its ingest time (no row may be dated in the future)."""
    known: dict[str, Any] = {"ingested_at": datetime.now(UTC).isoformat(timespec="seconds")}
    if coverage:
        known |= {
            "coverage_first": coverage[0].isoformat(),
            "coverage_last": coverage[1].isoformat(),
        }
    return known


def _params(day: date | None) -> dict[str, Any]:
    """Suite parameters of a file checked by hand: no row-count bounds, the date if known."""
    parameters: dict[str, Any] = {"row_count_min": 0, "row_count_max": 10**12}
    if day is not None:
        parameters |= {
            "partition_year": day.year,
            "partition_month": day.month,
            "partition_day": day.day,
        }
    return parameters


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
