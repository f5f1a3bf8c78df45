"""The point-in-time join on Spark, through Feast's Spark offline store.

The entity rows (one parquet file per validated day, as the local engine writes them) are read
by Spark, deduplicated on the key (the first day's row kept, as the local engine keeps it) and
handed to Feast's ``get_historical_features`` as a Spark DataFrame: they never pass through
pandas. The joined rows are typed as training reads them (numeric as double, categorical as
strings with ``MISSING_CATEGORY``), sorted by the key across the cluster and written as parquet
part files, which the driver then reads back in order into the frozen sets.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import fsspec
import pyarrow as pa

from pipeline_steps.core.domain import MISSING_CATEGORY, Domain, FeatureColumns, feature_columns
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.point_in_time import ENTITY_TIMESTAMP, nullable_columns, read_in_order
from pipeline_steps.engines.spark_storage import fsspec_url


def first_of_each_key(entities: Any, key: str) -> Any:
    """Entity rows with one row per key: the one of the first file (day), first in its file."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ordered = entities.withColumn("__file", F.input_file_name()).withColumn(
        "__pos", F.monotonically_increasing_id()
    )
    first = Window.partitionBy(key).orderBy("__file", "__pos")
    return (
        ordered.withColumn("__n", F.row_number().over(first))
        .where(F.col("__n") == 1)
        .drop("__file", "__pos", "__n")
    )


def typed_rows(joined: Any, domain: Domain, columns: FeatureColumns) -> Any:
    """The frozen sets' columns, in order and typed as training reads them."""
    from pyspark.sql import functions as F

    return joined.select(
        F.col(domain.key),
        F.col(domain.date_column),
        F.col(ENTITY_TIMESTAMP).cast("timestamp").alias(ENTITY_TIMESTAMP),
        *[
            F.coalesce(F.col(c).cast("string"), F.lit(MISSING_CATEGORY)).alias(c)
            for c in columns.categorical
        ],
        *[F.col(c).cast("double").alias(c) for c in columns.numeric],
        F.col(domain.label),
    )


JOINED_ROW_GROUP_BYTES = 16 * 2**20
"""The joined part files' row groups (Parquet's ``parquet.block.size``; Spark's default 128 MiB
makes a part file one row group): the driver streams the part files a row group at a time, so
this bounds what it holds while it freezes the sets, whatever the window's size."""


def _write_joined(
    spark: Any,
    store: Any,
    service: Any,
    domain: Domain,
    columns: FeatureColumns,
    entity_files: Sequence[str],
    scratch: str,
) -> str:
    """Join, type and sort the entity rows on Spark into parquet part files; their folder."""
    if not entity_files:
        raise StepError("no entity rows to join: the window has no labelled rows")
    entities = first_of_each_key(spark.read.parquet(*entity_files), domain.key)
    out = f"{scratch}/joined"
    try:
        joined = store.get_historical_features(entity_df=entities, features=service)
        rows = typed_rows(joined.to_spark_df(), domain, columns).orderBy(domain.key)
        rows.write.mode("overwrite").option("parquet.block.size", JOINED_ROW_GROUP_BYTES).parquet(
            out
        )
    except Exception as exc:  # Spark's analysis and execution errors arrive as Py4J/pyspark's
        raise StepError(f"point-in-time join on Spark failed: {exc}") from exc
    return out


def joined_frame(
    spark: Any, store: Any, domain: Domain, entity_files: Sequence[str], scratch: str
) -> tuple[Any, FeatureColumns]:
    """The joined rows as a Spark DataFrame read back from their part files (so that its
    aggregates do not join again), and the model's feature columns."""
    service = store.get_feature_service(domain.feature_service)
    columns = feature_columns(domain, service)
    out = _write_joined(spark, store, service, domain, columns, entity_files, scratch)
    return spark.read.parquet(out), columns


@contextmanager
def spark_joined_rows(
    spark: Any,
    store: Any,
    domain: Domain,
    entity_files: Sequence[str],
    scratch: str,
    batch_rows: int = 65_536,
) -> Iterator[tuple[pa.RecordBatchReader, FeatureColumns]]:
    """As ``core.feature_store.joined_rows``, on Spark: the joined rows ordered by the key as a
    stream of record batches read while the block runs (Spark writes them under ``scratch``, a
    folder the driver and executors share: an object store's on a cluster), and the model's
    feature columns."""
    service = store.get_feature_service(domain.feature_service)
    columns = feature_columns(domain, service)
    out = _write_joined(spark, store, service, domain, columns, entity_files, scratch)
    fs, folder = fsspec.core.url_to_fs(fsspec_url(out))
    parts = sorted(fs.glob(f"{folder}/part-*.parquet"))
    if not parts:
        raise StepError(f"point-in-time join on Spark wrote no rows under {out}")
    yield nullable_columns(read_in_order(parts, batch_rows, filesystem=fs)), columns
