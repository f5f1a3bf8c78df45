"""Ingest step: one logical date's raw partitions, streamed from the source with a manifest.

Each partition is a version folder ``raw/<dataset>/date=D/version=N``. Ingesting a date whose
source content is unchanged writes nothing (``cached``); changed content becomes a new version
beside the old ones (latest wins unless ``ingest.pin_version`` pins one, or ``ingest.pins``
pins each dataset's version, as a replay does).
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from datetime import UTC, date, datetime

from pipeline_steps import __version__
from pipeline_steps.core.context import RunContext
from pipeline_steps.core.domain import Source
from pipeline_steps.core.errors import EmptyDay, StepError
from pipeline_steps.core.lake import MANIFEST, Discard, Lake, PartitionWriter, schema_fingerprint
from pipeline_steps.core.manifests import (
    IngestedPartition,
    IngestManifest,
    IngestStatus,
    RawPartition,
    to_json,
)
from pipeline_steps.domain.sources import open_source

log = logging.getLogger(__name__)


def ingest(ctx: RunContext) -> IngestManifest:
    """Write (or reuse) the raw partition of every configured dataset for the logical date.

    Returns the step manifest: per dataset the version, row count, sha256 and status
    (``written``, ``new_version``, ``cached`` or ``pinned``). Raises ``StepError`` when the
    labelled dataset has no rows for the date, or a pinned version does not exist.
    """
    day, settings, domain = ctx.logical_date, ctx.settings.ingest, ctx.domain
    if domain.labelled_dataset not in ctx.datasets:
        raise StepError(
            f"ingest.datasets {list(ctx.datasets)} lacks {domain.labelled_dataset!r}, the "
            f"{domain.name} domain's labelled dataset"
        )
    source = open_source(settings, domain)
    datasets: dict[str, IngestedPartition] = {}
    for dataset in ctx.datasets:
        if ctx.lake.pins:  # a pinned view (a replay): the recorded version, nothing ingested
            version = ctx.lake.pinned_version(dataset, day)
            if version is None:
                raise StepError(f"ingest.pins names no version of {dataset} {day}")
            setting = f"ingest.pins[{dataset}/{day}]={version}"
            datasets[dataset] = pinned(ctx.lake, dataset, day, version, setting)
        elif settings.pin_version:
            setting = f"ingest.pin_version={settings.pin_version}"
            datasets[dataset] = pinned(ctx.lake, dataset, day, settings.pin_version, setting)
        else:
            datasets[dataset] = write_partition(ctx, source, dataset, day)
        partition = datasets[dataset]
        log.info("ingest %s %s: %s (version %s)", dataset, day, partition.status, partition.version)
    manifest = IngestManifest(
        logical_date=day.isoformat(), rows=datasets[domain.labelled_dataset].rows, datasets=datasets
    )
    return ctx.record(manifest)


def empty_day(ctx: RunContext, day: date | None = None) -> str | None:
    """Why ``day`` (the logical date by default) is an ordinary empty day, or None when it is
    not one: the domain allows them (``domain.empty_days: skip``), the lake holds no raw
    partition of the labelled dataset for it, and the source has no row of it. Reads the source
    until its first row of the day, so the later steps ask only once they cannot go on; None
    too when the source cannot be read now."""
    day = ctx.logical_date if day is None else day
    labelled = ctx.domain.labelled_dataset
    if ctx.settings.domain.empty_days != "skip" or ctx.lake.raw_versions(labelled, day):
        return None
    try:
        source = open_source(ctx.settings.ingest, ctx.domain)
        if any(batch.num_rows for batch in source.batches(labelled, day)):
            return None
    except (StepError, OSError) as exc:
        log.debug("the source cannot say whether %s is empty: %s", day, exc)
        return None
    return ctx.domain.empty_message(day, source.name)


def pinned(lake: Lake, dataset: str, day: date, version: int, setting: str) -> IngestedPartition:
    """The pinned raw version as this run's ingest; an error naming ``setting`` when it is gone."""
    folder = Lake.raw_version(dataset, day, version)
    if not lake.exists(folder, MANIFEST):
        raise StepError(
            f"{setting}: {lake.path(folder)} does not exist; "
            f"versions of {dataset} {day}: {lake.raw_versions(dataset, day)}"
        )
    return ingested(lake.partition_manifest(folder), "pinned", lake.path(folder))


def ingested(raw: RawPartition, status: IngestStatus, path: str) -> IngestedPartition:
    """A raw partition's manifest as this run's ingest left it."""
    return IngestedPartition(**asdict(raw), status=status, path=path)


def write_partition(ctx: RunContext, source: Source, dataset: str, day: date) -> IngestedPartition:
    """Stream the source into a new version; keep it only if its content is new. Writers of
    the same partition take turns (``Lake.writer_lock``)."""
    with ctx.lake.writer_lock(Lake.partition("raw", dataset, day)):
        return _write_version(ctx, source, dataset, day)


def _write_version(ctx: RunContext, source: Source, dataset: str, day: date) -> IngestedPartition:
    lake = ctx.lake
    versions = lake.raw_versions(dataset, day)
    latest = (
        lake.partition_manifest(Lake.raw_version(dataset, day, versions[-1])) if versions else None
    )
    version = (versions[-1] if versions else 0) + 1
    outcome: tuple[RawPartition, IngestStatus] | None = None
    with lake.staged_dir(Lake.raw_version(dataset, day, version)) as tmp:
        writer: PartitionWriter | None = None
        for batch in source.batches(dataset, day):
            if writer is None:
                writer = PartitionWriter(lake, f"{tmp}/data.parquet", batch.schema)
            try:
                writer.write(batch)
            except ValueError as exc:
                raise StepError(f"source {source.name}: {dataset} {day}: {exc}") from exc
        schemas = ctx.domain.schemas
        if writer is None:  # no rows at all: an empty partition of the known schema
            if dataset not in schemas:
                raise StepError(f"source {source.name} returned nothing for {dataset} {day}")
            writer = PartitionWriter(lake, f"{tmp}/data.parquet", schemas[dataset])
        digest = writer.close()
        if dataset == ctx.domain.labelled_dataset and writer.rows == 0:
            # raised inside the staged folder: nothing stays behind
            message = ctx.domain.empty_message(day, source.name)
            if ctx.settings.domain.empty_days == "skip":
                raise EmptyDay(f"{message}; an ordinary day of this domain (domain.empty_days)")
            raise StepError(
                f"{message}; days without rows are refused here (domain.empty_days: fail): "
                "where they are ordinary, set domain.empty_days: skip (docs/teams.md, "
                "'Days without data')"
            )
        if latest is not None and latest.sha256 == digest:
            outcome = (latest, "cached")
            raise Discard
        manifest = RawPartition(
            dataset=dataset,
            date=day.isoformat(),
            version=version,
            rows=writer.rows,
            schema_fingerprint=schema_fingerprint(writer.schema),
            sha256=digest,
            source=source.name,
            ingested_at=datetime.now(UTC).isoformat(timespec="seconds"),
            code_version=__version__,
            run_id=ctx.run_id,
        )
        lake.dump_json(to_json(manifest), f"{tmp}/{MANIFEST}")
        outcome = (manifest, "new_version" if latest else "written")
    assert outcome is not None  # set on both ways out of the staged folder
    raw, status = outcome
    return ingested(raw, status, lake.path(Lake.raw_version(dataset, day, raw.version)))
