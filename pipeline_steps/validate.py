"""Validate step: each dataset's GX suite, run by a Checkpoint, on the day's raw partition.

Passing partitions are published to ``validated/``; failing ones go to ``quarantine/`` with their
report, any earlier validated copy of that date is withdrawn, and the step fails with a message
naming the partition, the failed expectations, the columns and example values. Results (JSON)
and Data Docs (HTML) are kept under ``reports/validation/date=D/``.
"""

from __future__ import annotations

import logging
import math
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline_steps.context import RunContext, StepError
from pipeline_steps.lake import CHUNK_ROWS, MANIFEST, Lake
from pipeline_steps.settings import ValidationSettings
from pipeline_steps.suites import (
    SuiteOutcome,
    as_frame,
    describe,
    load_suite,
    run_suite,
    suite_path,
    temporary_docs_dir,
)

if TYPE_CHECKING:
    from great_expectations.core.expectation_suite import ExpectationSuite

log = logging.getLogger(__name__)
MIN_HISTORY = 3  # trailing days needed before row counts are judged against their mean


def suite_parameters(
    lake: Lake, dataset: str, day: date, settings: ValidationSettings
) -> dict[str, Any]:
    """Run-time values the suites refer to: the partition date and row-count bounds."""
    history = [
        d
        for d in lake.partition_dates("validated", dataset)
        if day - timedelta(days=settings.trailing_days) <= d < day
    ]
    low, high = 0, 10**12
    if len(history) >= MIN_HISTORY:
        counts = [
            lake.read_json(Lake.partition("validated", dataset, d), MANIFEST)["rows"]
            for d in history
        ]
        mean = sum(counts) / len(counts)
        low, high = (
            math.floor(mean * settings.row_count_low),
            math.ceil(mean * settings.row_count_high),
        )
    return {
        "partition_year": day.year,
        "partition_month": day.month,
        "partition_day": day.day,
        "row_count_min": low,
        "row_count_max": high,
    }


def validate(ctx: RunContext) -> dict[str, Any]:
    """Validate every dataset's raw partition of the logical date.

    Returns the step manifest (verdict, warnings and report paths per dataset). Raises
    ``StepError`` when a partition is missing, unreadable or fails a critical expectation;
    nothing reaches ``validated/`` then.
    """
    lake, day = ctx.lake, ctx.logical_date
    verdicts = {d: validate_partition(ctx, d, day) for d in ctx.settings.ingest.datasets}
    failed = [v["message"] for v in verdicts.values() if not v["success"]]

    if failed:
        for dataset, verdict in verdicts.items():
            if not verdict["success"]:
                copy_partition(lake, verdict["raw"], "quarantine", dataset, day, verdict["report"])
            lake.remove(Lake.partition("validated", dataset, day))
        raise StepError("validation failed\n" + "\n".join(failed))

    for dataset, verdict in verdicts.items():
        if verdict["status"] != "cached":
            copy_partition(lake, verdict["raw"], "validated", dataset, day, verdict["report"])
    drift = drift_report(ctx)
    manifest = {
        "step": "validate",
        "logical_date": day.isoformat(),
        "verdict": "passed",
        "datasets": {
            k: {
                x: v[x]
                for x in (
                    "success",
                    "status",
                    "report",
                    "data_docs",
                    "evaluated",
                    "failed",
                    "warnings",
                )
            }
            for k, v in verdicts.items()
        },
        "drift": drift,
    }
    return ctx.record("validate", manifest)


def champion_window(ctx: RunContext) -> tuple[date, date] | None:
    """First and last training day of the current champion, as its MLflow run recorded them."""
    from pipeline_steps.tracking import champion_version, connect

    client = connect(ctx.settings.mlflow)
    version = champion_version(client, ctx.settings.mlflow)
    if version is None or not version.run_id:
        return None
    tags = client.get_run(version.run_id).data.tags
    if "trainyard.train_first_day" not in tags:
        return None
    return (
        date.fromisoformat(tags["trainyard.train_first_day"]),
        date.fromisoformat(tags["trainyard.train_last_day"]),
    )


def drift_report(ctx: RunContext) -> dict[str, Any]:
    """Measure drift of D's partitions and store ``reports/drift/date=D/drift.{json,html}``."""
    from pipeline_steps.drift import measure, reference_days, report_html

    lake, day, cfg = ctx.lake, ctx.logical_date, ctx.settings.drift
    days, source = reference_days(lake, day, cfg, champion_window(ctx))
    datasets = {name.split(".")[0] for name in (*cfg.numeric, *cfg.categorical)}
    datasets &= set(ctx.settings.ingest.datasets)
    current = {d: lake.path(Lake.partition("validated", d, day), "data.parquet") for d in datasets}
    reference = {
        d: [
            lake.path(Lake.partition("validated", d, r), "data.parquet")
            for r in days
            if lake.exists(Lake.partition("validated", d, r), MANIFEST)
        ]
        for d in datasets
    }
    measured = measure(lake, reference, current, cfg)
    report = {
        "logical_date": day.isoformat(),
        "reference": {"source": source, "days": [d.isoformat() for d in days]},
        **measured,
    }
    folder = f"reports/drift/date={day.isoformat()}"
    lake.write_json(report, folder, "drift.json")
    lake.write_bytes(report_html(report).encode(), folder, "drift.html")
    if report["drift_detected"]:
        log.warning("drift on %s: %s", day, ", ".join(report["crossed"]))
    return {
        "drift_detected": report["drift_detected"],
        "crossed": report["crossed"],
        "reference": source,
        "values": {n: f["value"] for n, f in report["features"].items()},
        "report": lake.path(folder, "drift.html"),
    }


def validate_partition(ctx: RunContext, dataset: str, day: date) -> dict[str, Any]:
    lake, settings = ctx.lake, ctx.settings.validation
    raw = raw_folder(ctx, dataset, day)
    raw_manifest = lake.read_json(raw, MANIFEST)
    reports = f"reports/validation/date={day.isoformat()}"
    report = lake.path(reports, f"{dataset}.json")
    validated = Lake.partition("validated", dataset, day)
    if lake.exists(validated, MANIFEST):
        published = lake.read_json(validated, MANIFEST)
        if published.get("sha256") == raw_manifest["sha256"]:
            return {
                "success": True,
                "status": "cached",
                "raw": raw,
                "report": report,
                "data_docs": None,
                "evaluated": 0,
                "failed": 0,
                "warnings": [],
                "message": "",
            }
    suite = load_suite(suite_path(settings.expectations_dir, dataset))
    parameters = suite_parameters(lake, dataset, day, settings)
    docs = None
    with temporary_docs_dir() as tmp_docs:
        outcome = run_partition_suite(
            lake,
            raw,
            dataset,
            suite,
            parameters,
            tmp_docs if settings.data_docs else None,
            settings.chunk_rows,
        )
        if settings.data_docs:
            docs = lake.path(reports, "data_docs", dataset)
            lake.remove(reports, "data_docs", dataset)
            lake.fs.put(f"{tmp_docs}/", docs, recursive=True)
    lake.write_json(
        {
            "partition": lake.path(raw),
            "sha256": raw_manifest["sha256"],
            "parameters": parameters,
            "failures": outcome.failures,
            "warnings": outcome.warnings,
            "result": outcome.result,
        },
        reports,
        f"{dataset}.json",
    )
    return {**_verdict(lake.path(raw), outcome, report, docs), "raw": raw}


def run_partition_suite(
    lake: Lake,
    raw: str,
    dataset: str,
    suite: ExpectationSuite,
    parameters: dict[str, Any],
    data_docs_dir: str | None,
    chunk_rows: int,
) -> SuiteOutcome:
    """Run the suite on the whole partition, or chunk by chunk when it has more rows."""
    from pipeline_steps.suite_chunks import run_suite_chunked

    path = lake.path(raw, "data.parquet")
    try:
        with lake.fs.open(path, "rb") as fh:
            parquet = pq.ParquetFile(fh)
            if parquet.metadata.num_rows > chunk_rows:
                return run_suite_chunked(
                    dataset, parquet, suite, parameters, data_docs_dir, chunk_rows
                )
            frame = as_frame(parquet.read())
    except (pa.ArrowException, OSError) as exc:
        raise StepError(f"partition {lake.path(raw)} cannot be read: {exc}") from exc
    return run_suite(dataset, frame, suite, parameters, data_docs_dir)


def _verdict(
    partition: str, outcome: SuiteOutcome, report: str, docs: str | None
) -> dict[str, Any]:
    log.info(
        "validate %s: %d expectations, %d failed, %d warnings",
        partition,
        outcome.evaluated,
        len(outcome.failures),
        len(outcome.warnings),
    )
    if outcome.warnings:
        log.warning("%s", describe(f"partition {partition}", outcome.warnings, "warned on"))
    return {
        "success": outcome.success,
        "status": "validated",
        "report": report,
        "data_docs": f"{docs}/index.html" if docs else None,
        "evaluated": outcome.evaluated,
        "failed": len(outcome.failures),
        "warnings": [
            w["expectation"] + (f" ({w['column']})" if w["column"] else "")
            for w in outcome.warnings
        ],
        "message": describe(f"partition {partition}", outcome.failures) if outcome.failures else "",
    }


def read_any(path: str, suite: str) -> pa.Table:
    """Read a CSV or parquet file (local path or fsspec URL) as the file source would."""
    import fsspec

    from pipeline_steps.sources import open_file

    try:
        with fsspec.open(path, "rb", compression="infer") as fh:
            schema, batches = open_file(fh, path, suite, CHUNK_ROWS)
            return pa.Table.from_batches(list(batches), schema)
    except FileNotFoundError as exc:
        raise StepError(f"file {path} does not exist") from exc
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise StepError(f"file {path} cannot be read: {exc}") from exc


def check_file(
    path: str, suite: str, settings: ValidationSettings, day: date | None = None
) -> SuiteOutcome:
    """Validate one file by hand against a suite; the partition date defaults to the file's."""
    frame = as_frame(read_any(path, suite))
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
    return run_suite(
        suite, frame, load_suite(suite_path(settings.expectations_dir, suite)), parameters
    )


def raw_folder(ctx: RunContext, dataset: str, day: date) -> str:
    """The raw version this run ingested, else the latest one."""
    from pipeline_steps.ingest import latest_raw

    if ctx.lake.exists(ctx.run_dir, "ingest.json"):
        recorded = ctx.upstream("ingest")["datasets"].get(dataset, {})
        if recorded.get("version") and recorded.get("date") == day.isoformat():
            return Lake.raw_version(dataset, day, recorded["version"])
    return latest_raw(ctx.lake, dataset, day)


def copy_partition(lake: Lake, raw: str, stage: str, dataset: str, day: date, report: str) -> None:
    """Copy a raw partition version to ``validated/`` or ``quarantine/`` atomically, its
    manifest pointing at the validation report (kept beside it in quarantine)."""
    with lake.staged_dir(Lake.partition(stage, dataset, day)) as tmp:
        lake.fs.copy(lake.path(raw, "data.parquet"), f"{tmp}/data.parquet")
        lake.dump_json(
            {**lake.read_json(raw, MANIFEST), "validation_report": report}, f"{tmp}/{MANIFEST}"
        )
        if stage == "quarantine":
            lake.fs.copy(report, f"{tmp}/validation.json")
