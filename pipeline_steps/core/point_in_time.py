"""Point-in-time joins of entity rows with a Feast feature service, inside DuckDB over parquet.

Feast's own ``get_historical_features`` takes the entity rows as one pandas frame and returns the
joined rows as another: memory grows with the window. Here the entity rows are parquet files
(one per validated day), each feature view's offline source is its parquet file, and the join is
one DuckDB query whose result is read as a stream of Arrow record batches. DuckDB sorts and
joins under ``features.join_memory_limit`` and spills the rest to a scratch folder, so the
step's memory stays flat however long the window is.

The semantics are Feast's (``feast.infra.offline_stores.ibis.point_in_time_join``): for each
entity row and feature view, the view's row with the same join keys and the latest event time
at or before the entity row's, no older than the view's ``ttl`` (a zero ttl never expires), the
created timestamp breaking ties; no such row gives missing features. Feature columns come out
typed as training reads them (numeric as DOUBLE, categorical as VARCHAR with
``MISSING_CATEGORY``), rows deduplicated on the key (first day first) and ordered by it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline_steps.core.domain import MISSING_CATEGORY, Domain, FeatureColumns
from pipeline_steps.core.errors import StepError

ENTITY_TIMESTAMP = "event_timestamp"


@dataclass(frozen=True, kw_only=True, slots=True)
class ViewJoin:
    """What the join needs of one feature view of the service."""

    name: str
    path: str
    """The offline source's parquet file (or folder of parquet files)."""
    join_keys: dict[str, str]
    """Source column → entity-row column."""
    timestamp_field: str
    created_timestamp_field: str
    ttl: timedelta | None
    features: dict[str, str]
    """Output feature name → source column."""


def view_joins(store: Any, service: Any) -> list[ViewJoin]:
    """The service's feature views as joins over their file sources; a view whose source is not
    a parquet file is refused by name."""
    joins = []
    for projection in service.feature_view_projections:
        view = store.get_feature_view(projection.name)
        source = view.batch_source
        path = getattr(source, "path", None)
        if not path:
            raise StepError(
                f"feature view {view.name}: its source {source.name!r} is not a file source; "
                "the features step joins parquet offline sources"
            )
        mapping = {target: column for column, target in (source.field_mapping or {}).items()}
        keys = {}
        for column in view.join_keys:
            keys[mapping.get(column, column)] = projection.join_key_map.get(column, column)
        ttl = view.ttl if view.ttl and view.ttl > timedelta(0) else None
        joins.append(
            ViewJoin(
                name=view.name,
                path=path,
                join_keys=keys,
                timestamp_field=source.timestamp_field,
                created_timestamp_field=source.created_timestamp_column or "",
                ttl=ttl,
                features={f.name: mapping.get(f.name, f.name) for f in projection.features},
            )
        )
    return joins


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _source(join: ViewJoin) -> str:
    path = join.path
    if Path(path).is_dir():
        path = f"{path.rstrip('/')}/*.parquet"
    return f"read_parquet({_literal(path)})"


def join_sql(
    domain: Domain,
    entity_file: str,
    joins: Sequence[ViewJoin],
    columns: FeatureColumns,
) -> str:
    """The query over one entity file: its rows deduplicated on the key (the first kept), each
    view as-of joined, typed, ordered by the key."""
    key = _ident(domain.key)
    parts = [
        "WITH entities AS (",
        f"  SELECT * FROM read_parquet({_literal(entity_file)}, file_row_number = true)",
        f"  QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY file_row_number) = 1",
        ")",
    ]
    joined = []
    for n, join in enumerate(joins):
        alias = f"v{n}"
        keys = [f"{_ident(column)} AS {_ident(f'k{i}')}" for i, column in enumerate(join.join_keys)]
        order = [f"{_ident(join.timestamp_field)} DESC"]
        if join.created_timestamp_field:
            order.append(f"{_ident(join.created_timestamp_field)} DESC")
        features = [
            f"{_ident(column)} AS {_ident(f'f_{name}')}" for name, column in join.features.items()
        ]
        by = ", ".join(_ident(c) for c in [*join.join_keys, join.timestamp_field])
        parts.append(
            f", {alias} AS (SELECT {', '.join(keys)}, "
            f"{_ident(join.timestamp_field)}::TIMESTAMPTZ AS __ts, {', '.join(features)} "
            f"FROM {_source(join)} "
            f"QUALIFY row_number() OVER (PARTITION BY {by} ORDER BY {', '.join(order)}) = 1)"
        )
        on = [
            f"e.{_ident(entity)} = {alias}.{_ident(f'k{i}')}"
            for i, entity in enumerate(join.join_keys.values())
        ]
        on.append(f"e.{_ident(ENTITY_TIMESTAMP)}::TIMESTAMPTZ >= {alias}.__ts")
        joined.append(f"ASOF LEFT JOIN {alias} ON {' AND '.join(on)}")

    def feature(name: str) -> str:
        for n, join in enumerate(joins):
            if name in join.features:
                value = f"v{n}.{_ident(f'f_{name}')}"
                if join.ttl is not None:
                    seconds = int(join.ttl.total_seconds())
                    expired = (
                        f"v{n}.__ts + INTERVAL {seconds} SECOND "
                        f"< e.{_ident(ENTITY_TIMESTAMP)}::TIMESTAMPTZ"
                    )
                    value = f"CASE WHEN {expired} THEN NULL ELSE {value} END"
                return value
        return f"e.{_ident(name)}"

    select = [
        f"e.{key}",
        f"e.{_ident(domain.date_column)}",
        f"e.{_ident(ENTITY_TIMESTAMP)}::TIMESTAMPTZ AS {_ident(ENTITY_TIMESTAMP)}",
    ]
    for name in columns.categorical:
        select.append(
            f"coalesce(CAST({feature(name)} AS VARCHAR), {_literal(MISSING_CATEGORY)}) "
            f"AS {_ident(name)}"
        )
    for name in columns.numeric:
        select.append(f"CAST({feature(name)} AS DOUBLE) AS {_ident(name)}")
    select.append(f"e.{_ident(domain.label)}")
    parts.append(f"SELECT {', '.join(select)} FROM entities e")
    parts.extend(joined)
    parts.append(f"ORDER BY e.{key}")
    return "\n".join(parts)


@contextmanager
def joined_batches(
    domain: Domain,
    entity_files: Sequence[str],
    joins: Sequence[ViewJoin],
    columns: FeatureColumns,
    *,
    scratch: str,
    memory_limit: str,
    batch_rows: int = 65_536,
) -> Iterator[pa.RecordBatchReader]:
    """The joined rows as a stream of record batches, read while the block runs.

    Each entity file (a day) is joined on its own and written to ``scratch``, so a join holds
    one day. When the days' keys follow one another (each day's first key after the previous
    day's last, as with keys that start with the date) the days are read back in order;
    otherwise DuckDB deduplicates and sorts them all, spilling to ``scratch`` beyond
    ``memory_limit``."""
    import duckdb

    if not entity_files:
        raise StepError("no entity rows to join: the window has no labelled rows")
    con = duckdb.connect(config={"memory_limit": memory_limit, "temp_directory": scratch})
    try:
        con.execute("SET TimeZone = 'UTC'")
        Path(scratch, "joined").mkdir(parents=True, exist_ok=True)
        days: list[str] = []
        ranges: list[tuple[str, str]] = []
        try:
            for n, entities in enumerate(entity_files):
                day = f"{scratch}/joined/{n:06d}.parquet"
                query = join_sql(domain, entities, joins, columns)
                con.execute(
                    f"COPY ({query}) TO {_literal(day)} "
                    f"(FORMAT parquet, ROW_GROUP_SIZE {batch_rows})"
                )
                key = _ident(domain.key)
                bounds = con.execute(
                    f"SELECT min({key})::VARCHAR, max({key})::VARCHAR "
                    f"FROM read_parquet({_literal(day)})"
                ).fetchall()
                first, last = bounds[0] if bounds else (None, None)
                if first is not None:
                    days.append(day)
                    ranges.append((first, last))
            ordered = all(a[1] < b[0] for a, b in itertools.pairwise(ranges))
            if ordered:
                reader = read_in_order(days, batch_rows)
            else:
                reader = con.sql(_sorted_sql(domain, days)).to_arrow_reader(batch_rows)
            reader = nullable_columns(reader)
        except duckdb.Error as exc:
            raise StepError(f"point-in-time join failed: {exc}") from exc
        yield reader
    finally:
        con.close()


def nullable_columns(reader: pa.RecordBatchReader) -> pa.RecordBatchReader:
    """``reader`` with every column nullable, as the frozen sets' schema has them."""
    schema = pa.schema([f.with_nullable(True) for f in reader.schema])
    if schema.equals(reader.schema):
        return reader
    return pa.RecordBatchReader.from_batches(schema, (b.cast(schema) for b in reader))


def read_in_order(
    files: Sequence[str], batch_rows: int, filesystem: Any = None
) -> pa.RecordBatchReader:
    """The parquet files' rows one file after another, as one stream (``files`` on
    ``filesystem`` when given, an fsspec or Arrow file system)."""
    import pyarrow.parquet as pq

    schema = pq.read_schema(files[0], filesystem=filesystem) if files else None

    def batches() -> Iterator[pa.RecordBatch]:
        for path in files:
            source = pq.ParquetFile(path, filesystem=filesystem)
            for batch in source.iter_batches(batch_size=batch_rows):
                yield batch.cast(schema) if not batch.schema.equals(schema) else batch
            pa.default_memory_pool().release_unused()  # a day read: give its buffers back

    if schema is None:
        raise StepError("no entity rows to join: the window has no labelled rows")
    return pa.RecordBatchReader.from_batches(schema, batches())


def _sorted_sql(domain: Domain, files: Sequence[str]) -> str:
    """The joined days deduplicated on the key (the first day's row kept) and ordered by it."""
    key = _ident(domain.key)
    listed = ", ".join(_literal(f) for f in files)
    return (
        f"SELECT * EXCLUDE (filename, file_row_number) FROM read_parquet([{listed}], "
        "filename = true, file_row_number = true) "
        f"QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY filename, file_row_number) = 1 "
        f"ORDER BY {key}"
    )
