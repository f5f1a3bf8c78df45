"""The offline source of a feature view, as the engine running the features step reads it.

A feature repository declares each view's source with :func:`offline_source` instead of Feast's
``FileSource``: the same parquet file becomes a ``FileSource`` for the local engine (DuckDB) and
a ``SparkSource`` for the Spark engine, whose offline store reads only Spark sources. The
features step says which through ``$TRAINYARD_FEAST_OFFLINE`` while its store is open. Where
the step wrote the sources elsewhere than ``$TRAINYARD_FEAST_DIR/sources`` (an object store a
Spark cluster reads), ``$TRAINYARD_FEAST_SOURCES`` names that folder, and a source's path under
the first is read from the second (``s3://`` objects by Spark as ``s3a://``).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from pipeline_steps.core.feast_import import import_feast

FEAST_OFFLINE = "TRAINYARD_FEAST_OFFLINE"
FEAST_SOURCES = "TRAINYARD_FEAST_SOURCES"


def _placed(path: str) -> str:
    """``path`` in ``$TRAINYARD_FEAST_SOURCES`` when set and ``path`` is under
    ``$TRAINYARD_FEAST_DIR/sources``."""
    moved = os.environ.get(FEAST_SOURCES)
    home = os.environ.get("TRAINYARD_FEAST_DIR")
    if not moved or not home:
        return path
    local = os.path.join(home, "sources")
    relative = os.path.relpath(path, local)
    if relative.startswith(".."):
        return path
    where = f"{moved.rstrip('/')}/{relative}"
    return "s3a://" + where[len("s3://") :] if where.startswith("s3://") else where


def offline_source(name: str, path: str, timestamp_field: str = "event_timestamp") -> Any:
    """A parquet offline source named ``name`` at ``path``: a ``SparkSource`` when
    ``$TRAINYARD_FEAST_OFFLINE`` is ``spark``, else a ``FileSource``."""
    import_feast()
    path = _placed(str(path))
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
