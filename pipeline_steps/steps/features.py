"""Features step: Feast apply, a point-in-time training set, materialisation, a frozen snapshot.

The window is the trailing ``features.window_days`` dates ending at the logical date D. Its
validated days before D form the training set; D itself is the holdout. The domain turns the
labelled dataset's rows into entity rows and writes the Feast offline sources; Feast joins the
domain's feature service to them point in time. The model's feature columns are the entity-row
features plus the service's fields.

Each run keeps its own Feast state, ``features/runs/<run>/`` (offline sources, registry, online
store): runs of different dates never write the same files, so a backfill may run them at once.
On an object-store lake (the production profile) the offline sources are written to a local
scratch folder for the step's own point-in-time join, and ``features.store_config`` names a
Feast config with a shared SQL registry and online store, where each run applies its
definitions as its own project (``<features.project>_<run hash>``).
Materialisation into the run's online store is incremental (``feature_store.materialize_online``): a
retry reads only what the online store lacks; a set rebuilt from other inputs reloads it.
The cache check comes before any write. A backfill run refuses a window with a missing day (an
earlier day of the same backfill not validated yet) rather than train on less than was known.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline_steps.core import feature_store
from pipeline_steps.core.context import RunContext
from pipeline_steps.core.domain import ValidatedPartitions, check_features, domain_options
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.feature_store import (
    materialize_online,
    open_store,
    write_entity_rows,
    write_sources,
)
from pipeline_steps.core.fingerprints import json_sha256
from pipeline_steps.core.lake import MANIFEST, Lake, PartitionWriter, safe_run_key
from pipeline_steps.core.manifests import (
    FeaturesManifest,
    FrozenSet,
    PartitionRef,
    PartitionRefs,
    TimeRange,
    TrainingSets,
    load_manifest,
)
from pipeline_steps.engines.base import Engine, open_engine

log = logging.getLogger(__name__)


def window(ctx: RunContext) -> tuple[list[date], list[date]]:
    """Validated training days and holdout days of this run's window: the holdout is the
    validated days among the last ``evaluate.holdout_days`` ending at D, D included."""
    day, size = ctx.logical_date, ctx.settings.features.window_days
    holdout_size = ctx.settings.evaluate.holdout_days
    if holdout_size >= size:
        raise StepError(
            f"evaluate.holdout_days={holdout_size} leaves no training day in a window of "
            f"features.window_days={size}; make the window longer than the holdout"
        )
    start = day - timedelta(days=size - 1)
    holdout_start = day - timedelta(days=holdout_size - 1)
    labelled = ctx.domain.labelled_dataset
    validated = set(ctx.lake.validated_dates(labelled))
    if day not in validated:
        raise StepError(
            f"{labelled} partition of {day} is not validated "
            f"({ctx.lake.path(Lake.partition('validated', labelled, day))} missing); "
            "run the validate step first"
        )
    train_days = sorted(d for d in validated if start <= d < holdout_start)
    holdout_days = sorted(d for d in validated if holdout_start <= d <= day)
    if ctx.trigger.kind == "backfill":
        known = min(validated)  # days before the first validated one were never loaded
        expected = [start + timedelta(days=n) for n in range(size - 1)]
        gaps = [d for d in expected if d >= known and d not in validated]
        if gaps:
            raise StepError(
                f"backfill of {day}: window day(s) {', '.join(map(str, gaps))} not validated "
                "(yet); a backfill trains only on complete windows so that its result does not "
                "depend on which runs finished first: load the range's history first, e.g. "
                f"`trainyard seed --start {start} --end {day}`"
            )
    needed = ctx.settings.features.min_train_days
    if len(train_days) < needed:
        raise StepError(
            f"the window {start}..{day} has {len(train_days)} validated day(s) before the "
            f"holdout ({holdout_start}..{day}), fewer than features.min_train_days={needed}; "
            f"ingest history first, e.g. `trainyard seed --start {start} --end "
            f"{day - timedelta(days=1)}`"
        )
    span = (holdout_start - start).days
    if len(train_days) * 2 < span:  # more than half the window missing: history not loaded?
        warn_of_missing_days(ctx, start, holdout_start, train_days)
    return train_days, holdout_days


def warn_of_missing_days(
    ctx: RunContext, start: date, holdout_start: date, train_days: list[date]
) -> None:
    """Warn when fewer than half the window's training days with rows are validated. Days the
    source has no row of, where the domain says that is ordinary (``domain.empty_days: skip``),
    are not counted as missing: only then is the source asked, once per missing day."""
    from pipeline_steps.steps.ingest import empty_day

    span = (holdout_start - start).days
    missing = [start + timedelta(days=n) for n in range(span)]
    missing = [d for d in missing if d not in train_days]
    empty = [d for d in missing if empty_day(ctx, d) is not None]
    expected = span - len(empty)
    if len(train_days) * 2 >= expected:
        return
    unloaded = [d for d in missing if d not in empty]
    empties = f"; {len(empty)} empty day(s) of the source not counted" if empty else ""
    log.warning(
        "the window %s..%s has %d of its %d training days with rows validated (missing %s..%s "
        "among others%s): training on fewer days than features.window_days asks; where the "
        "source has them, load them first: `trainyard seed --start %s --end %s`",
        start,
        ctx.logical_date,
        len(train_days),
        expected,
        unloaded[0],
        unloaded[-1],
        empties,
        unloaded[0],
        unloaded[-1],
    )


def feast_dir(run_id: str) -> str:
    """The run's own Feast folder in the lake: offline sources, registry and online store."""
    return f"features/runs/{safe_run_key(run_id)}"


def feast_project(ctx: RunContext) -> str:
    """The run's Feast project: its own, so runs sharing a SQL registry never see each other's
    offline sources."""
    return project_of_run(ctx.settings.features.project, ctx.run_id)


def project_of_run(project: str, run_id: str) -> str:
    """The Feast project of run ``run_id`` under ``features.project`` (the suffix of its keys
    in a shared online store)."""
    return f"{project}_{hashlib.sha256(run_id.encode()).hexdigest()[:12]}"


@contextmanager
def feast_workspace(ctx: RunContext) -> Iterator[str]:
    """The local folder Feast reads the run's offline sources from (``TRAINYARD_FEAST_DIR``):
    the run's folder in a local lake, a scratch folder removed afterwards on an object store."""
    if ctx.lake.is_local:
        folder = ctx.lake.url(feast_dir(ctx.run_id))
        ctx.lake.fs.makedirs(folder, exist_ok=True)
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="trainyard-feast-") as folder:
        yield folder


def partition_refs(lake: Lake, hashes: dict[str, dict[str, str]]) -> PartitionRefs:
    """The raw version behind each partition read (dataset → date → sha256 read)."""
    refs: PartitionRefs = {}
    for dataset, days in hashes.items():
        for day, digest in days.items():
            folder = lake.validated_partition(dataset, date.fromisoformat(day))
            if folder is None:
                raise StepError(f"{dataset} {day} was read but has no validated partition")
            version = lake.partition_manifest(folder).version
            refs.setdefault(dataset, {})[day] = PartitionRef(version=version, sha256=digest)
    return refs


@contextmanager
def run_store(
    ctx: RunContext, folder: str, engine: Engine, sources: str | None = None
) -> Iterator[Any]:
    """The run's Feast store over ``folder``: ``features.store_config`` of
    ``features.feature_repo``, as the run's own project, with the repository's definitions;
    its offline store the one the step's ``engine`` joins through, reading the offline sources
    written under ``sources`` (``folder`` when not given); the online store loaded by the
    engine's materialisation engine where its workers reach it."""
    settings = ctx.settings.features
    with open_store(
        settings,
        folder,
        project=feast_project(ctx),
        config=settings.store_config,
        offline=engine.feast_offline,
        sources=sources,
        materialization=engine.feast_materialization,
        domain=ctx.domain,
    ) as store:
        yield store


def _repo_fingerprint(repo: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted([*repo.glob("*.py"), *repo.glob("*.yaml")]):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def build_features(ctx: RunContext) -> FeaturesManifest:
    """Apply the Feast repo, build and freeze the point-in-time training set and holdout.

    Returns the step manifest: row counts, label rates, hashes and paths of the frozen sets.
    Reports ``cached`` when the same inputs and settings already produced this run's set.
    Memory holds one day's rows at a time: entity rows are written day by day, the join runs
    in DuckDB under ``features.join_memory_limit`` and its result streams into the sets.
    """
    lake, settings, domain = ctx.lake, ctx.settings.features, ctx.domain
    check_features(domain)  # a view left without a field stops here, before any data is read
    train_days, holdout_days = window(ctx)
    days = [*train_days, *holdout_days]
    _return_freed_memory()
    labelled = ValidatedPartitions(lake, domain.labelled_dataset, days)
    labelled_hashes = labelled.hashes()
    out_dir = Lake.training_set_dir(ctx.run_id)

    sources, source_hashes = domain.feature_sources(lake, days)
    inputs = {
        domain.labelled_dataset: labelled_hashes,
        **source_hashes,
        "settings": {
            k: v
            for k, v in ctx.settings.to_dict()["features"].items()
            if k not in ("feature_repo", "join_memory_limit")
        },
        "feature_repo": _repo_fingerprint(Path(settings.feature_repo)),
        "domain": domain_options(domain),
        # declared views: a column moved to LEFT_OUT changes them, and so the set
        **({"feature_views": repr(domain.feature_views)} if domain.feature_views else {}),
        "holdout_days": ctx.settings.evaluate.holdout_days,
    }
    input_hash = json_sha256(inputs)
    if lake.exists(out_dir, MANIFEST):
        where = lake.path(out_dir, MANIFEST)
        previous = load_manifest(FeaturesManifest, lake.read_json(out_dir, MANIFEST), where)
        if previous.input_sha256 == input_hash:
            log.info("training set of %s is cached: inputs unchanged", ctx.run_id)
            return ctx.record(replace(previous, status="cached"))

    rebuilt = lake.exists(out_dir, MANIFEST)  # from other inputs: the online store is stale
    with (
        feast_workspace(ctx) as folder,
        open_engine(ctx.settings.engine) as engine,
        engine.scratch("trainyard-join-") as scratch,
    ):
        sources_at = engine.sources_folder(folder, scratch)
        write_sources(sources_at, sources, domain)
        pieces = labelled.by_batch(feature_store.ENTITY_PIECE_ROWS)
        parts = ((day.isoformat(), rows) for day, rows in pieces)
        entity_files = write_entity_rows(scratch, domain, settings, parts)
        read = {domain.labelled_dataset: labelled_hashes, **source_hashes}
        with run_store(ctx, folder, engine, sources_at) as store:
            manifest = _build(
                ctx,
                store,
                (entity_files, scratch, engine),
                read,
                inputs,
                (train_days, holdout_days),
                out_dir,
                rebuilt,
            )
    return ctx.record(manifest)


def _return_freed_memory() -> None:
    """Arrow buffers from jemalloc, handed back to the system as soon as they are freed: the
    step streams a day at a time, and the default allocator keeps each day's pages."""
    with contextlib.suppress(NotImplementedError):
        pa.set_memory_pool(pa.jemalloc_memory_pool())
        pa.jemalloc_set_decay_ms(0)


@dataclass
class _SetWriter:
    """One frozen set being written: its file, row count, label sum and content hash."""

    writer: PartitionWriter
    label: str
    label_sum: float = 0.0

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            self.writer.write(_nan_under_nulls(batch))
            self.label_sum += float(pc.sum(batch.column(self.label).cast(pa.float64())).as_py())

    def close(self, path: str) -> FrozenSet:
        digest = self.writer.close()
        rows = self.writer.rows
        rate = round(self.label_sum / rows, 4) if rows else None
        return FrozenSet(path=path, rows=rows, positive_rate=rate, sha256=digest)


def _nan_under_nulls(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with NaN in the value slots under its floating columns' nulls, as a table
    converted from pandas has: the sets' sha256 hashes those slots too, so the same rows hash
    alike whichever engine joined them."""
    columns = []
    for column in batch.columns:
        if pa.types.is_floating(column.type) and column.null_count:
            filled = pc.fill_null(column, float("nan"))
            validity = column.buffers()[0] if column.offset == 0 else None
            if validity is None:  # a sliced column: recompute its bitmap at offset 0
                validity = pc.is_valid(column).buffers()[1]
            column = pa.Array.from_buffers(
                column.type, len(column), [validity, filled.buffers()[1]], column.null_count
            )
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


def _build(
    ctx: RunContext,
    store: Any,
    entities: tuple[list[str], str, Engine],
    read: dict[str, dict[str, str]],
    inputs: dict[str, Any],
    split: tuple[list[date], list[date]],
    out_dir: str,
    rebuilt: bool,
) -> FeaturesManifest:
    """Join, freeze and materialise the training set with the run's Feast ``store``;
    ``entities`` holds the entity-row files, the scratch folder the join may spill to and the
    engine that joins them,
    ``read`` the hashes of the partitions read (dataset → date → sha256), ``split`` the
    training days and the holdout days. ``rebuilt``: the run built a set from other inputs
    before, so every view is reloaded."""
    lake, settings, domain = ctx.lake, ctx.settings.features, ctx.domain
    train_days, holdout_days = split
    days = [*train_days, *holdout_days]
    entity_files, scratch, engine = entities
    holdout_dates = pa.array([d.isoformat() for d in holdout_days], pa.string())
    frozen: dict[str, FrozenSet] = {}
    with (
        engine.joined(store, domain, settings, entity_files, scratch) as (reader, columns),
        lake.staged_dir(out_dir) as tmp,
    ):
        schema = reader.schema
        sets = {
            name: _SetWriter(
                PartitionWriter(lake, f"{tmp}/{name}.parquet", schema, settings.row_group_rows),
                domain.label,
            )
            for name in ("train", "holdout")
        }
        for batch in reader:
            in_holdout = pc.is_in(batch.column(domain.date_column), value_set=holdout_dates)
            sets["holdout"].write(batch.filter(in_holdout))
            sets["train"].write(batch.filter(pc.invert(in_holdout)))
        for name, writer in sets.items():
            frozen[name] = writer.close(lake.path(out_dir, f"{name}.parquet"))
        manifest = FeaturesManifest(
            status="built",
            logical_date=ctx.logical_date.isoformat(),
            train_days=[d.isoformat() for d in train_days],
            holdout_day=ctx.logical_date.isoformat(),
            holdout_days=[d.isoformat() for d in holdout_days],
            categorical=columns.categorical,
            numeric=columns.numeric,
            label=domain.label,
            key=domain.key,
            task=domain.task,
            classes=list(domain.classes),
            sets=TrainingSets(train=frozen["train"], holdout=frozen["holdout"]),
            inputs=inputs,
            input_sha256=json_sha256(inputs),
            training_set_sha256=json_sha256({k: v.sha256 for k, v in frozen.items()}),
            partitions=partition_refs(lake, read),
            feast_dir=lake.path(feast_dir(ctx.run_id)) if lake.is_local else "",
        )
        lake.dump_json(manifest.to_json(), f"{tmp}/{MANIFEST}")

    service = store.get_feature_service(domain.feature_service)
    start = datetime.combine(days[0], datetime.min.time(), UTC)
    end = datetime.combine(ctx.logical_date + timedelta(days=1), datetime.min.time(), UTC)
    # Incremental: a retried step reads only what the online store lacks (nothing when the
    # first try got as far), so a retry neither re-reads nor rewrites the window.
    written = materialize_online(store, service, start, end, refresh=rebuilt)
    log.info("online store up to %s; written: %s", end.isoformat(), written or "nothing")
    materialized = TimeRange(start=start.isoformat(), end=end.isoformat())
    log.info(
        "training set: %d train rows, %d holdout rows", frozen["train"].rows, frozen["holdout"].rows
    )
    return replace(manifest, materialized=materialized)
