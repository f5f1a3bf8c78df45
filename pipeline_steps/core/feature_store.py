"""The one adapter to Feast: the repository's definitions, the offline sources a store reads, the
store itself, point-in-time joins and online materialisation.

The feature repository's config and definitions find a store's folder in
``$TRAINYARD_FEAST_DIR`` (sources, registry file, SQLite online store) and a shared registry's
project in ``$TRAINYARD_FEAST_PROJECT``. :func:`open_store` sets both for as long as its store is
open and restores them when it closes, so no store leaves the process environment changed. The
sources may live elsewhere than the registry (an object store a Spark cluster reads while the
registry and online store stay with the step): ``$TRAINYARD_FEAST_SOURCES`` then names their
folder (:func:`pipeline_steps.core.feast_sources.offline_source`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from pipeline_steps.core.domain import (
    Domain,
    FeatureColumns,
    SourceRows,
    check_features,
    declared_definitions,
    declared_source_columns,
    domain_module,
    feature_columns,
)
from pipeline_steps.core.environment import environment
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.feast_import import import_feast
from pipeline_steps.core.feast_sources import FEAST_OFFLINE, FEAST_SOURCES
from pipeline_steps.core.manifests import TimeRange
from pipeline_steps.core.point_in_time import ENTITY_TIMESTAMP, joined_batches, view_joins
from pipeline_steps.core.settings import FeatureSettings

log = logging.getLogger(__name__)

FEAST_DIR = "TRAINYARD_FEAST_DIR"
FEAST_PROJECT = "TRAINYARD_FEAST_PROJECT"
DEFAULT_CONFIG = "feature_store.yaml"
FILE_ONLINE_STORES = frozenset({"sqlite"})
"""Online stores kept in a file on the step's disk: an engine's workers may not see it, so Feast's
local engine loads them from the step (:func:`online_reachable`)."""


def load_definitions(repo: Path) -> list[Any]:
    """Every Feast object defined in the repository's Python files, as ``feast apply`` sees."""
    import_feast()
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


def write_sources(
    folder: str | Path, sources: Mapping[str, SourceRows], domain: Domain | None = None
) -> None:
    """Write the domain's offline sources (name → rows) as ``<folder>/sources/<name>.parquet``
    (``folder`` local or an object store URL); a stream is written piece by piece, each piece
    cast to the first one's column types. A source a view of ``domain`` declares is written
    with exactly the views' keys, event time and fields; one of them missing from its rows is
    a ``StepError`` naming the domain module and the column."""
    _makedirs(f"{folder}/sources")
    declared = declared_source_columns(domain) if domain is not None else {}
    for name, rows in sources.items():
        pieces = [rows] if isinstance(rows, pd.DataFrame | pa.Table) else rows
        what = f"offline source {name}"
        if name in declared and domain is not None:
            pieces = _declared(pieces, declared[name], f"{domain_module(domain)}: {what}")
        _write_pieces(f"{folder}/sources/{name}.parquet", pieces, what)


def _declared(
    pieces: Iterable[pd.DataFrame | pa.Table], columns: list[str], what: str
) -> Iterator[pd.DataFrame | pa.Table]:
    """Each piece with exactly ``columns``, in their order; a missing one is an error."""
    for piece in pieces:
        names = list(piece.columns) if isinstance(piece, pd.DataFrame) else piece.column_names
        missing = [c for c in columns if c not in names]
        if missing:
            raise StepError(
                f"{what} has no column(s) {', '.join(map(repr, missing))} that its feature "
                f"view declares (its columns: {', '.join(map(str, names))}); the domain's "
                "feature_sources must give every field of the view"
            )
        yield piece[columns] if isinstance(piece, pd.DataFrame) else piece.select(columns)


def _write_pieces(
    path: str, pieces: Iterable[pd.DataFrame | pa.Table], what: str
) -> pa.Schema | None:
    """Write frames or tables one after another into one parquet file; its schema (None when
    there was no piece)."""
    writer: pq.ParquetWriter | None = None
    try:
        for piece in pieces:
            table = piece if isinstance(piece, pa.Table) else _table(piece)
            table = table.replace_schema_metadata(None)
            if writer is None:
                writer = _parquet_writer(path, table.schema)
            elif not table.schema.equals(writer.schema):
                table = _conform(table, writer.schema, what)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()
    return writer.schema if writer is not None else None


def _makedirs(folder: str) -> None:
    if "://" not in folder:  # an object store has no folders to make
        os.makedirs(folder, exist_ok=True)


def _parquet_writer(path: str, schema: pa.Schema) -> pq.ParquetWriter:
    if "://" in path:
        import fsspec

        fs, where = fsspec.core.url_to_fs(path)
        return pq.ParquetWriter(where, schema, filesystem=fs)
    return pq.ParquetWriter(path, schema)


def _table(frame: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(frame, preserve_index=False)


def _conform(table: pa.Table, schema: pa.Schema, what: str) -> pa.Table:
    """``table`` with ``schema``'s columns and types; an error naming the column otherwise."""
    if set(table.schema.names) != set(schema.names):
        raise StepError(
            f"{what}: a day's rows have columns {sorted(table.schema.names)}, the first day's "
            f"{sorted(schema.names)}"
        )
    columns = []
    for target in schema:
        column = table[target.name]
        try:
            columns.append(column.cast(target.type) if column.type != target.type else column)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise StepError(
                f"{what}: column {target.name!r} is {column.type} on one day and "
                f"{target.type} on the first: {exc}"
            ) from exc
    return pa.Table.from_arrays(columns, schema=schema)


ENTITY_DIR = "entities"
ENTITY_PIECE_ROWS = 16_384
"""Rows of a validated day turned into entity rows at once (``ValidatedPartitions.by_batch``)."""


def write_entity_rows(
    folder: str,
    domain: Domain,
    settings: FeatureSettings,
    parts: Iterable[tuple[str, pd.DataFrame]],
) -> list[str]:
    """The domain's entity rows of each labelled part (name → rows: a validated day, or a piece
    of one), written as ``<folder>/entities/<name>.parquet`` in the parts' order, consecutive
    parts of one name into one file; the files written. An entity row lacking a column the
    join needs is an error naming it. ``folder`` is local or an object store URL."""
    _makedirs(f"{folder}/{ENTITY_DIR}")
    needed = [
        domain.key,
        domain.date_column,
        ENTITY_TIMESTAMP,
        domain.label,
        *domain.row_features.categorical,
        *domain.row_features.numeric,
    ]

    def entity_tables(name: str, pieces: Iterable[pd.DataFrame]) -> Iterator[pa.Table]:
        for labelled in pieces:
            rows = domain.entity_rows(labelled, settings)
            missing = [c for c in needed if c not in rows.columns]
            if missing:
                raise StepError(
                    f"domain {domain.name}: entity_rows gave no column(s) {missing} for {name}"
                )
            if not rows.empty:
                yield _table(rows)

    files = []
    for name, group in itertools.groupby(parts, key=lambda part: part[0]):
        path = f"{folder}/{ENTITY_DIR}/{name}.parquet"
        pieces = (rows for _, rows in group)
        if _write_pieces(path, entity_tables(name, pieces), f"entity rows of {name}"):
            files.append(path)
    if not files:
        raise StepError(f"domain {domain.name}: the window has no entity rows to train on")
    return files


@contextmanager
def joined_rows(
    store: Any,
    domain: Domain,
    settings: FeatureSettings,
    entity_files: list[str],
    scratch: str,
) -> Iterator[tuple[pa.RecordBatchReader, FeatureColumns]]:
    """The entity rows joined point in time with the domain's feature service of ``store`` in
    DuckDB (:mod:`pipeline_steps.core.point_in_time`), ordered by the key, as a stream of
    batches, and the model's feature columns."""
    service = store.get_feature_service(domain.feature_service)
    columns = feature_columns(domain, service)
    joins = view_joins(store, service)
    with joined_batches(
        domain,
        entity_files,
        joins,
        columns,
        scratch=scratch,
        memory_limit=settings.join_memory_limit,
    ) as reader:
        yield reader, columns


@contextmanager
def feast_environment(
    folder: str,
    project: str | None = None,
    offline: str | None = None,
    sources: str | None = None,
) -> Iterator[None]:
    """``$TRAINYARD_FEAST_DIR`` (and ``$TRAINYARD_FEAST_PROJECT``, ``$TRAINYARD_FEAST_OFFLINE``,
    ``$TRAINYARD_FEAST_SOURCES`` when given) set for the block, the previous values back
    afterwards."""
    values = {FEAST_DIR: folder}
    if project:
        values[FEAST_PROJECT] = project
    if offline:
        values[FEAST_OFFLINE] = offline
    if sources and sources != folder:
        values[FEAST_SOURCES] = f"{sources}/sources"
    with environment(values):
        yield


def online_reachable(raw: Mapping[str, Any]) -> bool:
    """Whether the online store of the Feast config ``raw`` is a service an engine's workers can
    write to (Redis, PostgreSQL, ...), not a file on the step's disk."""
    online = raw.get("online_store", "sqlite")
    kind = online.get("type", "sqlite") if isinstance(online, Mapping) else online
    return str(kind) not in FILE_ONLINE_STORES


@contextmanager
def open_store(
    settings: FeatureSettings,
    folder: str,
    *,
    project: str | None = None,
    config: str = DEFAULT_CONFIG,
    offline: str | None = None,
    sources: str | None = None,
    materialization: Mapping[str, Any] | None = None,
    domain: Domain | None = None,
) -> Iterator[Any]:
    """The Feast store of ``settings.feature_repo`` over ``folder`` with ``config`` (a file of
    the repository) and the repository's definitions applied. ``offline``: the offline store's
    type instead of the config's (``spark``: Feast's Spark store on the process's active Spark
    session, the views' offline sources Spark sources, see
    :func:`pipeline_steps.core.feast_sources.offline_source`); registry and online store stay
    the config's. ``sources``: the folder the offline sources were written to, when not
    ``folder``. ``materialization``: the ``batch_engine`` that loads the online store when the
    config's online store is a service (:func:`online_reachable`); a file online store keeps
    Feast's local engine. ``domain``: the domain whose declared feature views
    (``Domain.feature_views``) are applied; when it declares none, or is not given, the
    repository's ``*.py`` definitions are. A declared view without a field is a ``StepError``
    naming the domain module, before Feast sees it."""
    import_feast()
    from feast import FeatureStore
    from feast.repo_config import RepoConfig

    repo = Path(settings.feature_repo)
    if domain is not None:
        check_features(domain)
    if not (repo / config).is_file():
        setting = "features.store_config" if config != DEFAULT_CONFIG else "features.feature_repo"
        raise StepError(f"{setting}: Feast repository {repo} has no {config}")
    with feast_environment(folder, project, offline, sources):
        if offline or materialization:
            raw = yaml.safe_load(os.path.expandvars((repo / config).read_text()))
            if offline:
                raw["offline_store"] = {"type": offline}
            if materialization and online_reachable(raw):
                raw["batch_engine"] = dict(materialization)
            repo_config = RepoConfig(**raw)
            repo_config.repo_path = repo
            store = FeatureStore(repo_path=str(repo), config=repo_config)
        else:
            store = FeatureStore(repo_path=str(repo), fs_yaml_file=repo / config)
        # built here: a declared view's source path reads $TRAINYARD_FEAST_DIR, set just now
        declared = declared_definitions(domain) if domain is not None else None
        store.apply(declared if declared is not None else load_definitions(repo))
        yield store


@contextmanager
def scratch_store(
    settings: FeatureSettings,
    sources: Mapping[str, SourceRows],
    *,
    offline: str | None = None,
    place: Callable[[str], str] | None = None,
    domain: Domain | None = None,
) -> Iterator[Any]:
    """A store of its own over ``sources``, in a scratch folder removed afterwards (the
    repository's ``feature_store.yaml``: a registry file and a SQLite online store, with the
    ``offline`` store type when given, see :func:`open_store`); the sources are written where
    ``place`` puts them given that folder (an engine's ``sources_folder``), else in it. Nothing a
    training run reads is written. ``domain``: whose declared views are applied and shape the
    sources (:func:`open_store`, :func:`write_sources`)."""
    with tempfile.TemporaryDirectory(prefix="trainyard-feast-") as folder:
        at = place(folder) if place else folder
        write_sources(at, sources, domain)
        with open_store(settings, folder, offline=offline, sources=at, domain=domain) as store:
            yield store


def join_features(
    domain: Domain,
    settings: FeatureSettings,
    labelled: pd.DataFrame | Iterable[tuple[str, pd.DataFrame]],
    sources: Mapping[str, SourceRows],
) -> tuple[pd.DataFrame, FeatureColumns]:
    """The model's feature rows for ``labelled`` rows (one frame, or (day, rows) pieces such as
    ``ValidatedPartitions.by_batch(ENTITY_PIECE_ROWS)`` gives, turned into entity rows one at a
    time): the domain's entity rows joined point in time with its Feast feature service over
    ``sources`` in a scratch store, ordered by the key, with the column types training uses
    (numeric float64, categorical strings with ``<missing>``)."""
    parts = [("rows", labelled)] if isinstance(labelled, pd.DataFrame) else labelled
    with scratch_store(settings, sources, domain=domain) as store:
        folder = os.environ[FEAST_DIR]
        named = ((str(name), rows) for name, rows in parts)
        files = write_entity_rows(folder, domain, settings, named)
        with joined_rows(store, domain, settings, files, folder) as (reader, columns):
            joined = reader.read_all().to_pandas()
    return joined, columns


def earliest_event(store: Any, service: Any) -> datetime:
    """The earliest event time in the offline sources of the service's feature views (read from
    the event-time column alone)."""
    first = []
    for join in view_joins(store, service):
        times = pq.read_table(join.path, columns=[join.timestamp_field])[join.timestamp_field]
        if len(times) and times.null_count < len(times):
            first.append(pd.Timestamp(pc.min(times).as_py()))
    if not first:
        raise StepError(f"feature service {service.name}: its offline sources hold no rows")
    return min(first).to_pydatetime()


def materialize_online(
    store: Any, service: Any, start: datetime, end: datetime, *, refresh: bool = False
) -> TimeRange | None:
    """Bring the online copy of the feature service's views up to ``end`` (inclusive).

    A view materialised before goes on from where it ended (``materialize_incremental``); a view
    never materialised is loaded from ``start`` (Feast's own first start, now - ttl, would miss
    every historical row); a view already at ``end`` is not read again, so a second call is a
    no-op. ``refresh`` reloads every view over ``[start, end]`` (its sources were rewritten).

    Returns the event-time range written, or None when every view was already at ``end``.
    """
    import_feast()
    from feast.utils import make_tzaware

    views = [store.get_feature_view(p.name) for p in service.feature_view_projections]
    fresh, behind = [], []
    for view in views:
        last = view.most_recent_end_time
        if refresh or last is None:
            fresh.append(view.name)
        elif make_tzaware(last) < end:
            behind.append((view.name, make_tzaware(last)))
    if fresh or behind:
        online, engine = store.config.online_store.type, store.config.batch_engine.type
        log.info("online store %s loaded by Feast's materialisation engine %s", online, engine)
    # Feast narrates materialisation on stdout, where ``trainyard predict`` prints its rows.
    with contextlib.redirect_stdout(sys.stderr):
        if fresh:
            store.materialize(start, end, feature_views=fresh)
        if behind:
            store.materialize_incremental(end, feature_views=[name for name, _ in behind])
    if not fresh and not behind:
        return None
    first = start if fresh else min(last for _, last in behind)
    return TimeRange(start=first.isoformat(), end=end.isoformat())
