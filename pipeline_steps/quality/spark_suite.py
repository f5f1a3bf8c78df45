"""A dataset's suite run on a parquet partition with Spark, giving the pandas path's verdicts.

:func:`run_partition_suite_spark` is the Spark counterpart of
:func:`pipeline_steps.quality.suite_chunks.run_partition_suite`: the partition is read as a Spark
DataFrame and validated through GX's Spark datasource, by the same Checkpoint, parameters and
outcome building as :func:`pipeline_steps.quality.suites.run_suite`. What differs between the
engines is bridged here and in :mod:`pipeline_steps.quality.spark_expectations`:

- Columns are given the types pandas sees (:func:`as_spark_frame`, the twin of
  :func:`~pipeline_steps.quality.suites.as_frame`): integers as 64-bit, or as double where a
  value is missing, and a float NaN as missing, which GX's Spark engine would count as a value.
- ``expect_column_values_to_be_in_type_list`` names pandas dtypes (``int64``); the Spark
  engine compares pyspark type names, so the lists are translated (:data:`SPARK_TYPES`).
- This project's expectations get Spark metrics on import of ``spark_expectations``, which
  also makes Spark's column quantiles interpolate as pandas' do.

GX's Spark datasource validates on the active session, which must be ``spark``.

Results keep each engine's own wording: a type is observed as ``LongType`` rather than
``int64`` (and the type lists of the Spark result name Spark types), a timestamp among the
examples is naive (the driver's zone, UTC in trainyard's session) rather than with ``+00:00``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from pipeline_steps.core.errors import StepError
from pipeline_steps.quality.suites import SuiteOutcome, run_suite

if TYPE_CHECKING:
    from great_expectations.core.expectation_suite import ExpectationSuite
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructField

T = TypeVar("T")
TYPE_LIST = "expect_column_values_to_be_in_type_list"
SPARK_TYPES: dict[str, str] = {
    **dict.fromkeys(("int8", "Int8"), "ByteType"),
    **dict.fromkeys(("int16", "Int16"), "ShortType"),
    **dict.fromkeys(("int32", "Int32"), "IntegerType"),
    **dict.fromkeys(("int64", "Int64", "int"), "LongType"),
    **dict.fromkeys(("float32", "Float32"), "FloatType"),
    **dict.fromkeys(("float64", "Float64", "float"), "DoubleType"),
    **dict.fromkeys(("bool", "boolean"), "BooleanType"),
    **dict.fromkeys(("str", "string"), "StringType"),
    **dict.fromkeys(("datetime64[ns]", "datetime64[us]"), "TimestampNTZType"),
    **dict.fromkeys(("datetime64[ns, UTC]", "datetime64[us, UTC]"), "TimestampType"),
}
"""pandas dtype names in type lists → the pyspark type that the same parquet column has in the
Spark frame of :func:`as_spark_frame`. Other names (pyspark's own among them) are kept."""


def run_partition_suite_spark(
    spark: SparkSession,
    path: str,
    dataset: str,
    suite: ExpectationSuite,
    parameters: dict[str, Any],
    dropped: list[str] | None = None,
) -> SuiteOutcome:
    """Validate the parquet partition at ``path`` (a file or folder, any URL ``spark`` reads)
    against ``suite`` with Spark, leaving out the ``dropped`` columns.

    The outcome is built as the pandas path builds it (failures and warnings by severity, the
    evaluated count, the JSON-able GX result) and its verdicts are the pandas path's. The
    partition is cached in ``spark`` while GX computes its metrics, and released afterwards.
    No Data Docs are rendered on Spark. Raises ``StepError`` when the partition cannot be read.
    """
    import pipeline_steps.quality.spark_expectations  # noqa: F401  (registers the Spark metrics)

    partition = _read(spark, path, dropped or []).persist()
    try:
        frame = _readable(path, lambda: as_spark_frame(partition))
        return run_suite(dataset, frame, spark_suite(suite), parameters, engine="spark")
    finally:
        partition.unpersist()


def _read(spark: SparkSession, path: str, dropped: list[str]) -> DataFrame:
    from pipeline_steps.quality.spark_expectations import quoted

    frame = _readable(path, lambda: spark.read.parquet(path))
    return frame.select(*[quoted(c) for c in frame.columns if c not in dropped])


def _readable(path: str, action: Callable[[], T]) -> T:
    """``action()``, its Spark errors (a missing path, a corrupt file) as a ``StepError``."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    try:
        return action()
    except (PySparkException, Py4JJavaError) as exc:
        raise StepError(f"partition {path} cannot be read: {spark_error(exc)}") from exc


def spark_error(exc: BaseException) -> str:
    """The first line of a Spark error, with the Java exception beneath a Py4J call's."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    java = getattr(exc, "java_exception", None)
    if java is not None:
        cause = java
        while cause.getCause() is not None:
            cause = cause.getCause()
        first = f"{first} {cause.toString()}"
    return first


def as_spark_frame(frame: DataFrame) -> DataFrame:
    """``frame`` with the column types the pandas path's frame has (``as_frame``): integers
    as 64-bit, or as double where values are missing (pandas' float64); NaN as missing.

    Which integer columns have missing values is counted in one Spark job; it loads a cached
    frame, and fails (rather than a metric of the suite) when the partition cannot be read."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegralType

    from pipeline_steps.quality.spark_expectations import quoted

    integers = [
        f.name for f in frame.schema.fields if isinstance(f.dataType, IntegralType) and f.nullable
    ]
    counts = frame.select(
        F.count(F.lit(1)),  # the rows: a job even without integer columns
        *[F.count(F.when(quoted(name).isNull(), 1)) for name in integers],
    ).first()
    assert counts is not None  # an aggregate without grouping has one row
    missing = {name for name, count in zip(integers, counts[1:], strict=True) if count}
    return frame.select(*[_as_pandas_sees(f, f.name in missing) for f in frame.schema.fields])


def _as_pandas_sees(field: StructField, has_missing: bool) -> Column:
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, FloatType, IntegralType

    from pipeline_steps.quality.spark_expectations import quoted

    column = quoted(field.name)
    if isinstance(field.dataType, IntegralType):
        column = column.cast("double" if has_missing else "long")
    elif isinstance(field.dataType, FloatType | DoubleType):
        column = F.nanvl(column, F.lit(None).cast(field.dataType))
    return column.alias(field.name)


def spark_suite(suite: ExpectationSuite) -> ExpectationSuite:
    """A copy of ``suite`` for the Spark engine: its type lists name pyspark types."""
    from great_expectations.core.expectation_suite import ExpectationSuite

    expectations = []
    for expectation in suite.expectations:
        config = expectation.configuration
        config.id = None  # type: ignore[assignment]  # a new id in the new suite (GX's setter takes None)
        types = config.kwargs.get("type_list")
        if config.type == TYPE_LIST and isinstance(types, list):
            config.kwargs = {**config.kwargs, "type_list": spark_type_names(types)}
        expectations.append(config.to_domain_obj())
    return ExpectationSuite(name=suite.name, expectations=expectations)


def spark_type_names(type_list: list[str]) -> list[str]:
    """The pyspark type names for a type list written with pandas dtype names."""
    names = [SPARK_TYPES.get(name, name) for name in type_list]
    return list(dict.fromkeys(names))  # int64 and Int64 both mean LongType
