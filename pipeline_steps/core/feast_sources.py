"""The offline source of a feature view, as the engine running the features step reads it.

A feature repository declares each view's source with :func:`offline_source` instead of Feast's
``FileSource``: the same parquet file becomes a ``FileSource`` for the local engine (DuckDB) and
a ``SparkSource`` for the Spark engine, whose offline store reads only Spark sources. The
features step says which through ``$TRAINYARD_FEAST_OFFLINE`` while its store is open.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from pipeline_steps.core.feast_import import import_feast

FEAST_OFFLINE = "TRAINYARD_FEAST_OFFLINE"


def offline_source(name: str, path: str, timestamp_field: str = "event_timestamp") -> Any:
    """A parquet offline source named ``name`` at ``path``: a ``SparkSource`` when
    ``$TRAINYARD_FEAST_OFFLINE`` is ``spark``, else a ``FileSource``."""
    import_feast()
    if os.environ.get(FEAST_OFFLINE) == "spark":
        from feast.infra.offline_stores.contrib.spark_offline_store.spark_source import (
            SparkSource,
        )

        with warnings.catch_warnings():  # Feast calls its Spark source experimental, each time
            warnings.filterwarnings("ignore", "The spark data source API", RuntimeWarning)
            return SparkSource(
                name=name, path=path, file_format="parquet", timestamp_field=timestamp_field
            )
    from feast import FileSource

    return FileSource(name=name, path=path, timestamp_field=timestamp_field)
