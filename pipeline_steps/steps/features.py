"""Features step: Feast apply, a point-in-time training set, materialisation, a frozen snapshot.

The window is the trailing ``features.window_days`` dates ending at the logical date D. Its
validated days before D form the training set; D itself is the holdout. The domain turns the
labelled dataset's rows into entity rows and writes the Feast offline sources; Feast joins the
domain's feature service to them point in time. The model's feature columns are the entity-row
features plus the service's fields.

Each run keeps its own Feast state, ``features/runs/<run>/`` (offline sources, registry, online
store): runs of different dates never write the same files, so a backfill may run them at once.
The cache check comes before any write. A backfill run refuses a window with a missing day (an
earlier day of the same backfill not validated yet) rather than train on less than was known.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
import pyarrow as pa

from pipeline_steps.context import RunContext
from pipeline_steps.domain import feature_columns, read_validated
from pipeline_steps.errors import StepError
from pipeline_steps.fingerprints import json_sha256
from pipeline_steps.lake import MANIFEST, Lake, safe_run_key, table_sha256
from pipeline_steps.manifests import (
    FeaturesManifest,
    FrozenSet,
    PartitionRef,
    PartitionRefs,
    TimeRange,
    TrainingSets,
    load_manifest,
)

log = logging.getLogger(__name__)


def window(ctx: RunContext) -> tuple[list[date], list[date]]:
    """Validated training days and the holdout day of this run's window."""
    day, size = ctx.logical_date, ctx.settings.features.window_days
    start = day - timedelta(days=size - 1)
    labelled = ctx.domain.labelled_dataset
    validated = set(ctx.lake.validated_dates(labelled))
    if day not in validated:
        raise StepError(
            f"{labelled} partition of {day} is not validated "
            f"({ctx.lake.path(Lake.partition('validated', labelled, day))} missing); "
            "run the validate step first"
        )
    train_days = sorted(d for d in validated if start <= d < day)
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
            f"the window {start}..{day} has {len(train_days)} validated day(s) before {day}, "
            f"fewer than features.min_train_days={needed}; ingest history first, e.g. "
            f"`trainyard seed --start {start} --end {day - timedelta(days=1)}`"
        )
    return train_days, [day]


def feast_dir(run_id: str) -> str:
    """The run's own Feast folder in the lake: offline sources, registry and online store."""
    return f"features/runs/{safe_run_key(run_id)}"


def write_sources(ctx: RunContext, sources: dict[str, pd.DataFrame]) -> None:
    """Write the domain's Feast offline sources into this run's Feast folder."""
    for name, frame in sources.items():
        table = pa.Table.from_pandas(frame, preserve_index=False)
        ctx.lake.write_table(table, feast_dir(ctx.run_id), "sources", f"{name}.parquet")


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


def load_definitions(repo: Path) -> list[Any]:
    """Every Feast object defined in the repository's Python files, as ``feast apply`` sees."""
    from feast import Entity, FeatureService, FeatureView

    objects: list[Any] = []
    for path in sorted(repo.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"feature_repo_{path.stem}", path)
        if spec is None or spec.loader is None:
            continue
        module: ModuleType = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        objects += [
            v for v in vars(module).values() if isinstance(v, Entity | FeatureView | FeatureService)
        ]
    return objects


def feature_store(ctx: RunContext) -> Any:
    """The Feast store of this run (``feast_dir``), with the repository's definitions applied."""
    from feast import FeatureStore

    repo = Path(ctx.settings.features.feature_repo)
    if not (repo / "feature_store.yaml").is_file():
        raise StepError(f"Feast repository {repo} has no feature_store.yaml")
    folder = feast_dir(ctx.run_id)
    os.environ["TRAINYARD_FEAST_DIR"] = ctx.lake.url(folder)
    ctx.lake.fs.makedirs(ctx.lake.path(folder), exist_ok=True)
    store = FeatureStore(repo_path=str(repo))
    store.apply(load_definitions(repo))
    return store


def _repo_fingerprint(repo: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted([*repo.glob("*.py"), *repo.glob("*.yaml")]):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def build_features(ctx: RunContext) -> FeaturesManifest:
    """Apply the Feast repo, build and freeze the point-in-time training set and holdout.

    Returns the step manifest: row counts, label rates, hashes and paths of the frozen sets.
    Reports ``cached`` when the same inputs and settings already produced this run's set.
    """
    lake, settings, domain = ctx.lake, ctx.settings.features, ctx.domain
    train_days, holdout_days = window(ctx)
    days = [*train_days, *holdout_days]
    labelled, labelled_hashes = read_validated(lake, domain.labelled_dataset, days)
    out_dir = Lake.training_set_dir(ctx.run_id)

    sources, source_hashes = domain.feature_sources(lake, days)
    inputs = {
        domain.labelled_dataset: labelled_hashes,
        **source_hashes,
        "settings": {
            k: v
            for k, v in ctx.settings.to_dict()["features"].items()
            if k not in ("feature_repo",)
        },
        "feature_repo": _repo_fingerprint(Path(settings.feature_repo)),
    }
    input_hash = json_sha256(inputs)
    if lake.exists(out_dir, MANIFEST):
        where = lake.path(out_dir, MANIFEST)
        previous = load_manifest(FeaturesManifest, lake.read_json(out_dir, MANIFEST), where)
        if previous.input_sha256 == input_hash:
            log.info("training set of %s is cached: inputs unchanged", ctx.run_id)
            return ctx.record(replace(previous, status="cached"))

    write_sources(ctx, sources)
    store = feature_store(ctx)
    service = store.get_feature_service(domain.feature_service)
    columns = feature_columns(domain, service)
    entity_rows = domain.entity_rows(labelled, settings)
    joined = store.get_historical_features(entity_df=entity_rows, features=service).to_df()
    wanted = [*columns.categorical, *columns.numeric, domain.label]
    missing = [c for c in wanted if c not in joined.columns]
    if missing:
        raise StepError(f"Feast returned no column(s) {missing}; check {settings.feature_repo}")
    order = [domain.key, domain.date_column, "event_timestamp", *wanted]
    joined = joined[order].sort_values(domain.key).reset_index(drop=True)
    joined["event_timestamp"] = joined["event_timestamp"].astype("datetime64[us, UTC]")
    for column in columns.numeric:
        joined[column] = joined[column].astype("float64")
    for column in columns.categorical:
        joined[column] = joined[column].astype("string").fillna("<missing>").astype(object)

    holdout_mask = joined[domain.date_column] == holdout_days[0].isoformat()
    frozen: dict[str, FrozenSet] = {}
    with lake.staged_dir(out_dir) as tmp:
        for name, frame in {
            "train": joined[~holdout_mask],
            "holdout": joined[holdout_mask],
        }.items():
            table = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
            lake.write_parquet(table, tmp, f"{name}.parquet", settings.row_group_rows)
            frozen[name] = FrozenSet(
                path=lake.path(out_dir, f"{name}.parquet"),
                rows=len(frame),
                positive_rate=round(float(frame[domain.label].mean()), 4) if len(frame) else None,
                sha256=table_sha256(table),
            )
        manifest = FeaturesManifest(
            status="built",
            logical_date=ctx.logical_date.isoformat(),
            train_days=[d.isoformat() for d in train_days],
            holdout_day=holdout_days[0].isoformat(),
            categorical=columns.categorical,
            numeric=columns.numeric,
            label=domain.label,
            key=domain.key,
            sets=TrainingSets(train=frozen["train"], holdout=frozen["holdout"]),
            inputs=inputs,
            input_sha256=input_hash,
            training_set_sha256=json_sha256({k: v.sha256 for k, v in frozen.items()}),
            partitions=partition_refs(
                lake, {domain.labelled_dataset: labelled_hashes, **source_hashes}
            ),
            feast_dir=lake.path(feast_dir(ctx.run_id)),
        )
        lake.dump_json(manifest.to_json(), f"{tmp}/{MANIFEST}")

    start = datetime.combine(days[0], datetime.min.time(), UTC)
    end = datetime.combine(ctx.logical_date + timedelta(days=1), datetime.min.time(), UTC)
    store.materialize(start, end)
    materialized = TimeRange(start=start.isoformat(), end=end.isoformat())
    log.info(
        "training set: %d train rows, %d holdout rows", frozen["train"].rows, frozen["holdout"].rows
    )
    return ctx.record(replace(manifest, materialized=materialized))
