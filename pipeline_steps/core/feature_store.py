"""The one adapter to Feast: the repository's definitions, the offline sources a store reads, the
store itself, point-in-time joins and online materialisation.

The feature repository's config and definitions find a store's folder in
``$TRAINYARD_FEAST_DIR`` (sources, registry file, SQLite online store) and a shared registry's
project in ``$TRAINYARD_FEAST_PROJECT``. :func:`open_store` sets both for as long as its store is
open and restores them when it closes, so no store leaves the process environment changed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline_steps.core.domain import Domain, FeatureColumns, cast_features, feature_columns
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.manifests import TimeRange
from pipeline_steps.core.settings import FeatureSettings

FEAST_DIR = "TRAINYARD_FEAST_DIR"
FEAST_PROJECT = "TRAINYARD_FEAST_PROJECT"
DEFAULT_CONFIG = "feature_store.yaml"


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


def write_sources(folder: str | Path, sources: Mapping[str, pd.DataFrame]) -> None:
    """Write the domain's offline sources (name → frame) as ``<folder>/sources/<name>.parquet``."""
    os.makedirs(f"{folder}/sources", exist_ok=True)
    for name, frame in sources.items():
        table = pa.Table.from_pandas(frame, preserve_index=False)
        pq.write_table(table, f"{folder}/sources/{name}.parquet")


@contextmanager
def feast_environment(folder: str, project: str | None = None) -> Iterator[None]:
    """``$TRAINYARD_FEAST_DIR`` (and ``$TRAINYARD_FEAST_PROJECT`` when given) set for the block,
    the previous values back afterwards."""
    saved = {key: os.environ.get(key) for key in (FEAST_DIR, FEAST_PROJECT)}
    os.environ[FEAST_DIR] = folder
    if project:
        os.environ[FEAST_PROJECT] = project
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def open_store(
    settings: FeatureSettings,
    folder: str,
    *,
    project: str | None = None,
    config: str = DEFAULT_CONFIG,
) -> Iterator[Any]:
    """The Feast store of ``settings.feature_repo`` over ``folder`` with ``config`` (a file of
    the repository) and the repository's definitions applied."""
    from feast import FeatureStore

    repo = Path(settings.feature_repo)
    if not (repo / config).is_file():
        setting = "features.store_config" if config != DEFAULT_CONFIG else "features.feature_repo"
        raise StepError(f"{setting}: Feast repository {repo} has no {config}")
    with feast_environment(folder, project):
        store = FeatureStore(repo_path=str(repo), fs_yaml_file=repo / config)
        store.apply(load_definitions(repo))
        yield store


@contextmanager
def scratch_store(settings: FeatureSettings, sources: Mapping[str, pd.DataFrame]) -> Iterator[Any]:
    """A store of its own over ``sources``, in a scratch folder removed afterwards (the
    repository's ``feature_store.yaml``: a registry file and a SQLite online store); nothing a
    training run reads is written."""
    with tempfile.TemporaryDirectory(prefix="trainyard-feast-") as folder:
        write_sources(folder, sources)
        with open_store(settings, folder) as store:
            yield store


def join_features(
    domain: Domain,
    settings: FeatureSettings,
    labelled: pd.DataFrame,
    sources: Mapping[str, pd.DataFrame],
) -> tuple[pd.DataFrame, FeatureColumns]:
    """The model's feature rows for ``labelled`` rows: the domain's entity rows joined point in
    time with its Feast feature service over ``sources`` in a scratch store, with the column
    types training uses (numeric float64, categorical strings with ``<missing>``)."""
    with scratch_store(settings, sources) as store:
        service = store.get_feature_service(domain.feature_service)
        columns = feature_columns(domain, service)
        entity_rows = domain.entity_rows(labelled, settings)
        joined = store.get_historical_features(entity_df=entity_rows, features=service).to_df()
    cast_features(joined, columns)
    return joined.sort_values(domain.key).reset_index(drop=True), columns


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
    from feast.utils import make_tzaware

    views = [store.get_feature_view(p.name) for p in service.feature_view_projections]
    fresh, behind = [], []
    for view in views:
        last = view.most_recent_end_time
        if refresh or last is None:
            fresh.append(view.name)
        elif make_tzaware(last) < end:
            behind.append((view.name, make_tzaware(last)))
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
