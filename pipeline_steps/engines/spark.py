"""The Spark engine: the step process is the Spark driver.

Validation runs the suite through Great Expectations' Spark datasource (no Data Docs); the
point-in-time join runs through Feast's Spark offline store
(:mod:`pipeline_steps.engines.spark_join`); a drift window's rows are scored and counted on the
executors (:mod:`pipeline_steps.engines.spark_drift`).

``engine.spark_master`` says where executors run (``local[*]`` in the step's own process, a
standalone cluster, or Kubernetes). On a cluster every file Spark reads or writes is on object
storage (:mod:`pipeline_steps.engines.spark_storage`): the lake, and ``engine.spark_dir``, an
``s3://`` folder under which each step writes its entity rows, offline sources and joined rows;
a path on the driver's own disk is refused, naming its setting. ``engine.spark_conf`` adds
properties over trainyard's own:
the session time zone and the driver's are UTC (Feast's Spark store compares its time bounds as
the driver's local times, so any other zone shifts the join), parquet timestamps are written as
microseconds with their zone (not INT96), and Spark's scratch files go to ``engine.spark_dir``
or a temporary folder, never the working directory.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.scoring import scorer
from pipeline_steps.core.settings import EngineSettings, FeatureSettings
from pipeline_steps.engines.base import Engine, JoinedRows
from pipeline_steps.engines.spark_storage import (
    check_cluster,
    cluster_properties,
    fsspec_url,
    is_cluster,
    is_object_url,
    s3a_properties,
    spark_url,
)

if TYPE_CHECKING:
    from great_expectations.core.expectation_suite import ExpectationSuite

    from pipeline_steps.core.domain import Domain
    from pipeline_steps.core.lake import Lake
    from pipeline_steps.engines.spark_drift import SparkWindow
    from pipeline_steps.quality.suites import SuiteOutcome

LOG_CONFIG = Path(__file__).with_name("log4j2.properties")


def spark_properties(settings: EngineSettings, scratch: str) -> dict[str, str]:
    """The session's properties: trainyard's, then ``engine.spark_conf`` over them."""
    java = (
        f"-Djava.io.tmpdir={scratch}/tmp -Dderby.system.home={scratch}/derby "
        f"-Dlog4j2.configurationFile=file:{LOG_CONFIG} -Duser.timezone=UTC"
    )
    return {
        "spark.master": settings.spark_master,
        "spark.app.name": "trainyard",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.local.dir": f"{scratch}/local",
        "spark.sql.warehouse.dir": f"{scratch}/warehouse",
        "spark.driver.extraJavaOptions": java,
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
        **s3a_properties(settings),
        **(cluster_properties() if is_cluster(settings.spark_master) else {}),
        **settings.spark_conf,
    }


@contextmanager
def utc_driver() -> Iterator[None]:
    """The process's local time zone UTC for the block (Feast's Spark store reads the entity
    rows' time bounds as local times), the previous one back afterwards."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = saved
        time.tzset()


@contextmanager
def spark_session(settings: EngineSettings) -> Iterator[Any]:
    """A Spark session for the block, with its scratch folder (``engine.spark_dir``, else a
    temporary one removed afterwards), stopped when the block ends. A session already running in
    the process on the same master (a notebook's, a test's) is used as it is and left running.
    Raises ``StepError`` when pyspark is not installed or Spark does not start."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise StepError(
            "engine.name is spark but pyspark is not installed: pip install 'trainyard[spark]'"
        ) from exc
    check_cluster(settings)
    active = SparkSession.getActiveSession()
    if active is not None:
        running = active.conf.get("spark.master")
        if running != settings.spark_master:
            raise StepError(
                f"engine.spark_master {settings.spark_master!r}: this process already runs a "
                f"Spark session on {running!r}"
            )
        with utc_driver():
            yield active
        return
    with _scratch(settings) as scratch, utc_driver():
        for folder in ("tmp", "derby", "local", "warehouse"):
            Path(scratch, folder).mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON") or _python())
        builder = SparkSession.builder
        for key, value in spark_properties(settings, scratch).items():
            builder = builder.config(key, value)
        try:
            spark = builder.getOrCreate()
        except Exception as exc:  # the JVM's own errors (no Java, a bad master URL)
            raise StepError(
                f"engine.spark_master {settings.spark_master!r}: Spark did not start: {exc}"
            ) from exc
        spark.sparkContext.setLogLevel("ERROR")
        try:
            yield spark
        finally:
            spark.stop()


def _python() -> str:
    import sys

    return sys.executable


@contextmanager
def _scratch(settings: EngineSettings) -> Iterator[str]:
    """The driver's own scratch folder (Java's temporary files, Spark's local directory)."""
    if settings.spark_dir and not is_object_url(settings.spark_dir):
        Path(settings.spark_dir).mkdir(parents=True, exist_ok=True)
        yield settings.spark_dir
        return
    with tempfile.TemporaryDirectory(prefix="trainyard-spark-") as folder:
        yield folder


@dataclass(frozen=True)
class SparkEngine:
    """:class:`~pipeline_steps.engines.base.Engine` on the Spark session ``spark``."""

    spark: Any
    settings: EngineSettings
    name: str = "spark"
    data_docs: bool = False
    feast_offline: str | None = "spark"

    @property
    def feast_materialization(self) -> dict[str, Any] | None:
        """Feast's Spark engine: the views' rows read, deduplicated and written to the online
        store by the executors, never pulled into the step."""
        return {"type": "spark.engine"}

    @property
    def cluster(self) -> bool:
        return is_cluster(self.settings.spark_master)

    def scratch(self, prefix: str) -> AbstractContextManager[str]:
        if is_object_url(self.settings.spark_dir):
            return _object_scratch(self.settings.spark_dir, prefix)
        return tempfile.TemporaryDirectory(prefix=prefix, dir=self.settings.spark_dir or None)

    def shared(self, path: str, setting: str) -> str:
        """``path`` as Spark reads it; on a cluster, a path on the driver's own disk is refused,
        naming the ``setting`` it came from."""
        if self.cluster and not is_object_url(path):
            raise StepError(
                f"{setting} {path}: a path on the driver's disk, which the executors of "
                f"{self.settings.spark_master} (engine.spark_master) do not share; use s3://"
            )
        return spark_url(path)

    def sources_folder(self, folder: str, scratch: str) -> str:
        return scratch if self.cluster else folder

    def validate(
        self,
        lake: Lake,
        raw: str,
        dataset: str,
        suite: ExpectationSuite,
        parameters: dict[str, Any],
        dropped: list[str],
        *,
        data_docs_dir: str | None,
        chunk_rows: int,
    ) -> SuiteOutcome:
        from pipeline_steps.quality.spark_suite import run_partition_suite_spark

        path = self.shared(lake.url(raw, "data.parquet"), "lake.root")
        return run_partition_suite_spark(self.spark, path, dataset, suite, parameters, dropped)

    def joined(
        self,
        store: Any,
        domain: Domain,
        settings: FeatureSettings,
        entity_files: list[str],
        scratch: str,
    ) -> AbstractContextManager[JoinedRows]:
        from pipeline_steps.engines.spark_join import spark_joined_rows

        files = [self.shared(f, "engine.spark_dir") for f in entity_files]
        return spark_joined_rows(self.spark, store, domain, files, spark_url(scratch))

    @contextmanager
    def window(
        self,
        store: Any,
        domain: Domain,
        settings: FeatureSettings,
        entity_files: list[str],
        scratch: str,
        *,
        reference_days: Sequence[date],
        current_days: Sequence[date],
        model_uri: str | None,
    ) -> Iterator[SparkWindow]:
        from pipeline_steps.engines.spark_drift import SparkWindow, with_prediction
        from pipeline_steps.engines.spark_join import joined_frame

        files = [self.shared(f, "engine.spark_dir") for f in entity_files]
        rows, columns = joined_frame(self.spark, store, domain, files, spark_url(scratch))
        features = [*columns.categorical, *columns.numeric]
        predict = None
        if model_uri is not None:
            rows = with_prediction(rows, model_uri, features, domain)
            predict = scorer(model_uri, features, domain)  # the driver's: the sample and day D
        rows = rows.cache()
        try:
            yield SparkWindow(rows, columns, domain, reference_days, current_days, predict)
        finally:
            rows.unpersist()


@contextmanager
def _object_scratch(root: str, prefix: str) -> Iterator[str]:
    """A folder of its own under the object store folder ``root``, removed afterwards."""
    import uuid

    import fsspec

    folder = f"{fsspec_url(root).rstrip('/')}/{prefix}{uuid.uuid4().hex[:12]}"
    fs, path = fsspec.core.url_to_fs(folder)
    try:
        yield folder
    finally:
        with suppress(FileNotFoundError):
            fs.rm(path, recursive=True)


@contextmanager
def open_engine(settings: EngineSettings) -> Iterator[Engine]:
    """The Spark engine on a session of ``engine.spark_master`` (:func:`spark_session`)."""
    with spark_session(settings) as spark:
        yield SparkEngine(spark, settings)
