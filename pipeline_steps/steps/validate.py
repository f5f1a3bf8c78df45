"""Validate step: each dataset's GX suite, run by a Checkpoint, on the day's raw partition.

Passing partitions are published to ``validated/``; failing ones go to ``quarantine/`` with their
report, any earlier validated copy of that date is withdrawn, and the step fails with a message
naming the partition, the failed expectations, the columns and example values. Results (JSON)
and Data Docs (HTML) are kept under ``reports/validation/date=D/``. A run with ``ingest.pins``
(a replay) validates its pinned versions and publishes nothing. Drift is not measured here: the
drift monitor (:mod:`pipeline_steps.steps.monitor`) measures it over a window of days.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pyarrow as pa

from pipeline_steps.core import pipeline_gauges
from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.lake import MANIFEST, Lake
from pipeline_steps.core.manifests import (
    DatasetVerdict,
    IngestManifest,
    SchemaChange,
    ValidateManifest,
    to_json,
)
from pipeline_steps.engines.base import Engine, open_engine
from pipeline_steps.quality.data_docs import slim_site
from pipeline_steps.quality.schema_changes import judge
from pipeline_steps.quality.suites import (
    SuiteOutcome,
    UnmetExpectation,
    describe,
    load_suite,
    suite_path,
    temporary_docs_dir,
)
from pipeline_steps.quality.trailing import (
    suite_parameters,
    unapplied_checks,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class PartitionVerdict:
    """One dataset's partition judged: the raw version read, what the manifest records, and the
    readable failures (empty when it passed)."""

    raw: str
    verdict: DatasetVerdict
    message: str = ""

    @property
    def dropped(self) -> list[str]:
        """Columns the source added that are left out of ``validated/``."""
        return [c.column for c in self.verdict.schema_changes if c.action == "dropped"]

    @property
    def success(self) -> bool:
        return self.verdict.success


def validate(ctx: RunContext) -> ValidateManifest:
    """Validate every dataset's raw partition of the logical date.

    Returns the step manifest (verdict, warnings and report paths per dataset). Raises
    ``StepError`` when a partition is missing, unreadable or fails a critical expectation;
    nothing reaches ``validated/`` then.
    """
    lake, day = ctx.lake, ctx.logical_date
    with open_engine(ctx.settings.engine) as engine:
        verdicts = {d: validate_partition(ctx, d, day, engine) for d in ctx.datasets}
    failed = [v.message for v in verdicts.values() if not v.success]

    if lake.pins:
        # A pinned view (a replay) re-checks its recorded versions but leaves validated/ and
        # quarantine/ to the runs that ingest: readers get the pinned versions from the view.
        if failed:
            raise StepError("validation of the pinned versions failed\n" + "\n".join(failed))
    elif failed:
        for dataset, judged in verdicts.items():
            if not judged.success:
                lake.publish(judged.raw, "quarantine", dataset, day, judged.verdict.report)
            lake.remove(Lake.partition("validated", dataset, day))
        pipeline_gauges.validation_refused(ctx.settings, lake, list(ctx.datasets), day)
        raise StepError("validation failed\n" + "\n".join(failed))

    for dataset, judged in verdicts.items():
        if judged.verdict.status != "cached" and not lake.pins:
            lake.publish(
                judged.raw, "validated", dataset, day, judged.verdict.report, judged.dropped
            )
    if not lake.pins:
        pipeline_gauges.validation_streak(ctx.settings, 0)
    manifest = ValidateManifest(
        logical_date=day.isoformat(),
        verdict="passed",
        datasets={dataset: judged.verdict for dataset, judged in verdicts.items()},
    )
    return ctx.record(manifest)


def validate_partition(
    ctx: RunContext, dataset: str, day: date, engine: Engine
) -> PartitionVerdict:
    """Run the dataset's suite on the partition this run ingested with the step's ``engine``
    (cached when the validated copy has the same content) and keep its report and the Data Docs
    the engine renders."""
    lake, settings = ctx.lake, ctx.settings.validation
    raw = raw_folder(ctx, dataset, day)
    raw_manifest = lake.partition_manifest(raw)
    reports = f"reports/validation/date={day.isoformat()}"
    if lake.pins:  # the day's shared report stays the one of the version in validated/
        reports = f"{ctx.run_dir}/validation"
    report = lake.path(reports, f"{dataset}.json")
    validated = Lake.partition("validated", dataset, day)
    published = lake.exists(validated, MANIFEST) and lake.partition_manifest(validated)
    if published and published.sha256 == raw_manifest.sha256:
        cached = DatasetVerdict(
            success=True,
            status="cached",
            report=report,
            data_docs=None,
            evaluated=0,
            failed=0,
            warnings=_reported_warnings(lake, reports, dataset, raw_manifest.sha256),
        )
        return PartitionVerdict(raw=raw, verdict=cached)
    suite = load_suite(suite_path(settings.expectations_dir, dataset))
    parameters = suite_parameters(
        lake,
        dataset,
        day,
        settings,
        suite=suite,
        coverage=ctx.domain.coverage,
        ingested_at=raw_manifest.ingested_at,
        rows=raw_manifest.rows,
    )
    unapplied = unapplied_checks(lake, dataset, day, settings, suite)
    for line in unapplied:
        log.info("validate %s: not applied: %s", lake.path(raw), line)
    changes = schema_changes(ctx, raw, dataset, day)
    dropped = [c.column for c in changes if c.action == "dropped"]
    docs = None
    with temporary_docs_dir() as tmp_docs:
        rendered = settings.data_docs and engine.data_docs
        outcome = engine.validate(
            lake,
            raw,
            dataset,
            suite,
            parameters,
            dropped,
            data_docs_dir=tmp_docs if rendered else None,
            chunk_rows=settings.chunk_rows,
        )
        if rendered:
            docs = lake.path(reports, "data_docs", dataset)
            lake.remove(reports, "data_docs", dataset)
            if outcome.success and not any(c.action == "failed" for c in changes):
                slim_site(lake, Path(tmp_docs), f"{reports}/data_docs/{dataset}")
            lake.fs.put(f"{tmp_docs}/", docs, recursive=True)
    lake.write_json(
        {
            "partition": lake.path(raw),
            "sha256": raw_manifest.sha256,
            "parameters": parameters,
            "not_applied": unapplied,
            "failures": to_json(outcome.failures),
            "warnings": to_json(outcome.warnings),
            "schema_changes": to_json(changes),
            "result": outcome.result,
        },
        reports,
        f"{dataset}.json",
    )
    return _verdict(raw, lake.path(raw), outcome, report, docs, changes)


def _reported_warnings(lake: Lake, reports: str, dataset: str, sha256: str) -> list[str]:
    """The warnings the day's report recorded when it judged this content (a cached partition
    keeps them: a field that started to fill still warns in every run of that day)."""
    if not lake.exists(reports, f"{dataset}.json"):
        return []
    recorded = lake.read_json(reports, f"{dataset}.json")
    if recorded.get("sha256") != sha256:
        return []
    return [UnmetExpectation(**w).label for w in recorded.get("warnings", [])]


def schema_changes(ctx: RunContext, raw: str, dataset: str, day: date) -> list[SchemaChange]:
    """The partition's columns against the dataset's schema and the previous raw version (the
    one before it of the same date, else the latest of the day before), judged by the
    ``validation`` settings."""
    lake = ctx.lake
    previous = lake.previous_raw(dataset, day, lake.partition_manifest(raw).version)
    try:
        partition = lake.parquet_schema(raw)
        reference = lake.parquet_schema(previous) if previous else None
    except (pa.ArrowException, OSError) as exc:
        raise StepError(f"partition {lake.path(raw)} cannot be read: {exc}") from exc
    changes = judge(
        dataset, partition, ctx.domain.schemas.get(dataset), reference, ctx.settings.validation
    )
    for change in changes:
        if change.action != "kept" or change.against == "previous":
            log.warning("validate %s: %s", lake.path(raw), change.label)
    return changes


def _verdict(
    raw: str,
    partition: str,
    outcome: SuiteOutcome,
    report: str,
    docs: str | None,
    changes: list[SchemaChange],
) -> PartitionVerdict:
    log.info(
        "validate %s: %d expectations, %d failed, %d warnings",
        partition,
        outcome.evaluated,
        len(outcome.failures),
        len(outcome.warnings),
    )
    if outcome.warnings:
        log.warning("%s", describe(f"partition {partition}", outcome.warnings, "warned on"))
    refused = [c for c in changes if c.action == "failed"]
    verdict = DatasetVerdict(
        success=outcome.success and not refused,
        status="validated",
        report=report,
        data_docs=f"{docs}/index.html" if docs else None,
        evaluated=outcome.evaluated,
        failed=len(outcome.failures),
        warnings=[w.label for w in outcome.warnings],
        schema_changes=changes,
    )
    lines = [f"partition {partition} schema change: {c.label}" for c in refused]
    if outcome.failures:
        lines.append(describe(f"partition {partition}", outcome.failures))
    message = "\n".join(lines)
    return PartitionVerdict(raw=raw, verdict=verdict, message=message)


def raw_folder(ctx: RunContext, dataset: str, day: date) -> str:
    """The raw version this run ingested, else the latest one."""
    if ctx.lake.exists(ctx.run_dir, f"{IngestManifest.STEP}.json"):
        recorded = ctx.upstream(IngestManifest).datasets.get(dataset)
        if recorded is not None and recorded.date == day.isoformat():
            return Lake.raw_version(dataset, day, recorded.version)
    return ctx.lake.latest_raw(dataset, day)
