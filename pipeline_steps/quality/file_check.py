"""``trainyard validate --path``: one CSV or parquet file checked by hand against a suite."""

from __future__ import annotations

from datetime import date
from typing import Any

import pyarrow as pa

from pipeline_steps.domain import load_domain
from pipeline_steps.errors import StepError
from pipeline_steps.lake import CHUNK_ROWS
from pipeline_steps.quality.suites import SuiteOutcome, as_frame, load_suite, run_suite, suite_path
from pipeline_steps.settings import Settings


def read_any(path: str, schema: pa.Schema | None) -> pa.Table:
    """Read a CSV or parquet file (local path or fsspec URL) as the file source would, CSV
    columns typed by ``schema`` where it names them."""
    import fsspec

    from pipeline_steps.sources import open_file

    try:
        with fsspec.open(path, "rb", compression="infer") as fh:
            found, batches = open_file(fh, path, schema, CHUNK_ROWS)
            return pa.Table.from_batches(list(batches), found)
    except FileNotFoundError as exc:
        raise StepError(f"file {path} does not exist") from exc
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise StepError(f"file {path} cannot be read: {exc}") from exc


def check_file(path: str, suite: str, settings: Settings, day: date | None = None) -> SuiteOutcome:
    """Validate one file by hand against a suite (a dataset's name); the partition date
    defaults to the file's. Raises ``StepError`` when the file or the suite cannot be read."""
    schema = load_domain(settings.domain.module).schemas.get(suite)
    frame = as_frame(read_any(path, schema))
    if day is None and {"year", "month", "day"} <= set(frame.columns) and len(frame):
        year, month, dom = frame[["year", "month", "day"]].mode().iloc[0]
        day = date(int(year), int(month), int(dom))
    parameters: dict[str, Any] = {"row_count_min": 0, "row_count_max": 10**12}
    if day is not None:
        parameters |= {
            "partition_year": day.year,
            "partition_month": day.month,
            "partition_day": day.day,
        }
    expectations = load_suite(suite_path(settings.validation.expectations_dir, suite))
    return run_suite(suite, frame, expectations, parameters)
