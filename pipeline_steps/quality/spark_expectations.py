"""Spark implementations of this project's own expectations, registered with GX on import.

:mod:`pipeline_steps.quality.expectations` defines the expectations and their pandas metrics;
this module adds a ``SparkDFExecutionEngine`` provider for each of their metrics (GX keys
providers by metric name and engine, so the pandas ones stay registered). Each Spark partial
gives the verdict its pandas twin gives on the frame the pandas path validates
(:func:`pipeline_steps.quality.suites.as_frame`), where integers with missing values are floats:

- ``column_values.valid_hhmm``, ``column_values.airport_codes``, ``column_values.not_after``:
  column conditions; GX leaves null values out before them, as it does on pandas.
- ``multicolumn_values.date_parts_between`` and ``…timestamp_matches_date_parts``: a row with
  a missing part is unexpected (pandas compares NaN as unequal to everything).
- ``column.top_value_share``: one grouped count.
- ``multicolumn_values.satisfy``: the pandas expression of ``expect_rows_to_satisfy`` is
  translated into a Spark column by :func:`pandas_condition`, with pandas' float semantics.

One core metric is replaced for Spark: ``column.quantile_values`` (of
``expect_column_quantile_values_to_be_between``). GX's Spark provider takes the value of rank
``ceil(q * n)``, where pandas interpolates at ``q * (n - 1)`` (``nearest`` unless
``allow_relative_error`` names another interpolation), so the two engines observed different
quantiles; :class:`SparkColumnQuantileValues` computes pandas' from exact order statistics.

Importing this module needs pyspark.
"""

from __future__ import annotations

import ast
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import numpy as np
from great_expectations.core.metric_domain_types import MetricDomainTypes
from great_expectations.execution_engine import SparkDFExecutionEngine
from great_expectations.expectations.metrics import map_metric_provider
from great_expectations.expectations.metrics.column_aggregate_metric_provider import (
    ColumnAggregateMetricProvider,
)
from great_expectations.expectations.metrics.column_aggregate_metrics import ColumnQuantileValues
from great_expectations.expectations.metrics.map_metric_provider import (
    ColumnMapMetricProvider,
    MulticolumnMapMetricProvider,
)
from great_expectations.expectations.metrics.metric_provider import metric_value
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    DoubleType,
    FloatType,
    IntegralType,
    NumericType,
    TimestampNTZType,
)

from pipeline_steps.quality.expectations import (
    AIRPORT_CODE,
    MULTICOLUMN_DOMAIN_KEYS,
    _yyyymmdd,
)

# The package re-exports each decorator under its module's name, which mypy takes for the module.
column_condition_partial: Any = map_metric_provider.column_condition_partial
multicolumn_condition_partial: Any = map_metric_provider.multicolumn_condition_partial


def missing() -> Column:
    """A missing number, pandas' NaN (Spark's own NaN is ordered above every number)."""
    return F.lit(None).cast("double")


def quoted(name: str) -> Column:
    """The column ``name``, quoted so that dots and spaces in it are taken literally."""
    return F.col("`" + name.replace("`", "``") + "`")


def column_type(table: DataFrame, name: str) -> DataType:
    """The Spark type of column ``name`` of ``table``."""
    return table.schema[name].dataType


class SparkColumnValuesValidHhmm(ColumnMapMetricProvider):
    """``column_values.valid_hhmm`` on Spark: HHMM clock times, as floats like pandas reads them."""

    condition_metric_name = "column_values.valid_hhmm"
    condition_value_keys = ("allow_2400",)

    @column_condition_partial(engine=SparkDFExecutionEngine)
    def _spark(cls, column: Column, allow_2400: bool = False, **kwargs: Any) -> Column:
        value = column.cast("double")
        hours = F.floor(value / 100)
        minutes = value - hours * 100  # pandas' ``%`` for the values >= 0 that can be valid
        valid = (value == F.rint(value)) & (value >= 0) & (hours < 24) & (minutes < 60)
        return valid | (value == 2400) if allow_2400 else valid


class SparkColumnValuesAirportCodes(ColumnMapMetricProvider):
    """``column_values.airport_codes`` on Spark: the whole value matches ``AIRPORT_CODE``."""

    condition_metric_name = "column_values.airport_codes"

    @column_condition_partial(engine=SparkDFExecutionEngine)
    def _spark(cls, column: Column, **kwargs: Any) -> Column:
        # Java's ``$`` would also match before a final line break; ``\z`` is the very end.
        return column.cast("string").rlike(rf"\A(?:{AIRPORT_CODE})\z")


def utc_instant(iso: str) -> datetime:
    """An ISO instant with its offset, in UTC; pandas refuses to compare a naive one with the
    UTC timestamps of a partition, and so does this."""
    instant = datetime.fromisoformat(iso)
    if instant.tzinfo is None:
        raise ValueError(f"latest must be an ISO instant with its UTC offset, got {iso!r}")
    return instant.astimezone(UTC)


class SparkColumnValuesNotAfter(ColumnMapMetricProvider):
    """``column_values.not_after`` on Spark. A timestamp without time zone (``TIMESTAMP_NTZ``)
    is read as UTC, as ``pd.to_datetime(..., utc=True)`` reads a naive one."""

    condition_metric_name = "column_values.not_after"
    condition_value_keys = ("latest",)

    @column_condition_partial(engine=SparkDFExecutionEngine)
    def _spark(
        cls,
        column: Column,
        latest: str,
        _table: DataFrame,
        _accessor_domain_kwargs: dict[str, Any],
        **kwargs: Any,
    ) -> Column:
        instant = utc_instant(latest)
        if isinstance(column_type(_table, _accessor_domain_kwargs["column"]), TimestampNTZType):
            wall_clock = instant.replace(tzinfo=None).isoformat(sep=" ")
            return column <= F.lit(wall_clock).cast("timestamp_ntz")
        return column <= F.lit(instant)  # pyspark sends an aware datetime as its instant


class SparkDatePartsBetween(MulticolumnMapMetricProvider):
    """``multicolumn_values.date_parts_between`` on Spark: YYYYMMDD computed as a float, as
    pandas computes it from float parts; a row with a missing part is unexpected."""

    condition_metric_name = "multicolumn_values.date_parts_between"
    condition_domain_keys = MULTICOLUMN_DOMAIN_KEYS
    condition_value_keys = ("first", "last")

    @multicolumn_condition_partial(engine=SparkDFExecutionEngine)
    def _spark(cls, column_list: DataFrame, first: str, last: str, **kwargs: Any) -> Column:
        year, month, day = (quoted(name).cast("double") for name in column_list.columns[:3])
        number = year * 10_000 + month * 100 + day
        return F.coalesce(number.between(_yyyymmdd(first), _yyyymmdd(last)), F.lit(False))


MICROS_PER_HOUR = 3_600_000_000
MICROS_PER_DAY = 24 * MICROS_PER_HOUR


def wall_clock_fields(stamp: Column, naive: bool, timezone: str) -> tuple[Column, ...]:
    """Year, month, day and hour of ``stamp`` on the clocks of ``timezone``, computed without
    the session time zone (Spark reads a TIMESTAMP's fields in it). A ``TIMESTAMP_NTZ``
    (``naive``) is read as UTC, as ``pd.to_datetime(..., utc=True)`` reads a naive one."""
    if naive:
        local = F.convert_timezone(F.lit("UTC"), F.lit(timezone), stamp)  # a TIMESTAMP_NTZ
        return F.year(local), F.month(local), F.dayofmonth(local), F.hour(local)
    # from_utc_timestamp shifts the instant by the zone's offset at that instant; its epoch
    # microseconds are then the wall clock's, and a DATE has the same fields in every zone.
    micros = F.unix_micros(F.from_utc_timestamp(stamp, timezone))
    day = F.date_from_unix_date(F.floor(micros / MICROS_PER_DAY))
    hour = F.floor(F.pmod(micros, F.lit(MICROS_PER_DAY)) / MICROS_PER_HOUR)
    return F.year(day), F.month(day), F.dayofmonth(day), hour


class SparkTimestampMatchesDateParts(MulticolumnMapMetricProvider):
    """``multicolumn_values.timestamp_matches_date_parts`` on Spark: the timestamp's wall clock
    in ``timezone`` (:func:`wall_clock_fields`), whatever the session time zone."""

    condition_metric_name = "multicolumn_values.timestamp_matches_date_parts"
    condition_domain_keys = MULTICOLUMN_DOMAIN_KEYS
    condition_value_keys = ("timezone",)

    @multicolumn_condition_partial(engine=SparkDFExecutionEngine)
    def _spark(cls, column_list: DataFrame, timezone: str, **kwargs: Any) -> Column:
        stamp, *parts = column_list.columns
        naive = isinstance(column_type(column_list, stamp), TimestampNTZType)
        fields = wall_clock_fields(quoted(stamp), naive, timezone)
        matches = F.lit(True)
        for field, name in zip(fields, parts, strict=False):
            matches = matches & (field == quoted(name).cast("double"))
        return F.coalesce(matches, F.lit(False))


class SparkRowsSatisfy(MulticolumnMapMetricProvider):
    """``multicolumn_values.satisfy`` on Spark: the pandas condition through
    :func:`pandas_condition`, numeric columns as floats like the pandas partial casts them."""

    condition_metric_name = "multicolumn_values.satisfy"
    condition_domain_keys = MULTICOLUMN_DOMAIN_KEYS
    condition_value_keys = ("condition",)

    @multicolumn_condition_partial(engine=SparkDFExecutionEngine)
    def _spark(cls, column_list: DataFrame, condition: str, **kwargs: Any) -> Column:
        numeric = {f.name for f in column_list.schema.fields if isinstance(f.dataType, NumericType)}
        return pandas_condition(condition, column_list.columns, numeric)


def pandas_condition(condition: str, columns: list[str], numeric: set[str]) -> Column:
    """A Spark column that holds where ``DataFrame.eval(condition)`` of the pandas partial is
    true (numeric ``columns`` as float64, the rest as objects, missing results false).

    Supported: column names, numbers, strings, booleans, ``None``; ``+ - * / // % **``, unary
    ``-``/``+``; comparisons (chained too), ``in``/``not in`` a list of constants;
    ``and``/``or``/``not``/``&``/``|``/``~``; ``.isna()``, ``.isnull()``, ``.notna()``,
    ``.notnull()``, ``abs()``, ``exp()`` and ``sqrt()``. Anything else raises ``ValueError``,
    which GX reports as the expectation's error."""
    try:
        tree = ast.parse(" ".join(condition.split()), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"condition {condition!r} is not an expression: {exc}") from exc
    return F.coalesce(_PandasCondition(condition, columns, numeric).visit(tree), F.lit(False))


class _PandasCondition(ast.NodeVisitor):
    """Translates a parsed pandas condition into a Spark column with pandas' semantics.

    Numbers follow numpy float64 rules: a missing value (pandas' NaN, here a null) makes
    arithmetic missing, comparisons false except ``!=``, which is true; division by zero gives
    ±inf or a missing value; ``//`` and ``%`` take the sign of the divisor. Spark's own NaN is
    turned into a null after each operation, since Spark orders NaN above every number and
    calls it equal to itself."""

    COMPARISONS: dict[type[ast.cmpop], Callable[[Column, Column], Column]] = {
        ast.Eq: lambda a, b: a == b,
        ast.NotEq: lambda a, b: a != b,
        ast.Lt: lambda a, b: a < b,
        ast.LtE: lambda a, b: a <= b,
        ast.Gt: lambda a, b: a > b,
        ast.GtE: lambda a, b: a >= b,
    }

    def __init__(self, condition: str, columns: list[str], numeric: set[str]) -> None:
        self.condition = condition
        self.columns = set(columns)
        self.numeric = numeric

    def unsupported(self, node: ast.AST) -> ValueError:
        return ValueError(
            f"condition {self.condition!r}: {ast.unparse(node)!r} is not supported on Spark"
        )

    def generic_visit(self, node: ast.AST) -> Any:
        raise self.unsupported(node)

    def visit_Expression(self, node: ast.Expression) -> Column:
        return self.visit(node.body)

    def visit_Name(self, node: ast.Name) -> Column:
        if node.id not in self.columns:
            raise ValueError(f"condition {self.condition!r}: no column {node.id!r} in its list")
        column = quoted(node.id)
        return column.cast("double") if node.id in self.numeric else column

    def visit_Constant(self, node: ast.Constant) -> Column:
        return F.lit(self.constant(node))

    def constant(self, node: ast.expr) -> Any:
        """A constant's value, numbers as floats (pandas compares float64 columns)."""
        if not isinstance(node, ast.Constant):
            raise self.unsupported(node)
        value = node.value
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return value
        if isinstance(value, int | float):
            return float(value)
        raise self.unsupported(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Column:
        operand = self.visit(node.operand)
        if isinstance(node.op, ast.USub):
            return -operand
        if isinstance(node.op, ast.UAdd):
            return operand
        return ~operand  # ``not`` and ``~``: pandas negates booleans elementwise

    def visit_BinOp(self, node: ast.BinOp) -> Column:
        a, b = self.visit(node.left), self.visit(node.right)
        match node.op:
            case ast.BitAnd():
                return a & b
            case ast.BitOr():
                return a | b
            case ast.Add():
                result = a + b
            case ast.Sub():
                result = a - b
            case ast.Mult():
                result = a * b
            case ast.Pow():
                result = F.pow(a, b)
            case ast.Div():
                result = divide(a, b)
            case ast.FloorDiv():
                result = floor_divide(a, b)
            case ast.Mod():
                result = remainder(a, b)
            case _:
                raise self.unsupported(node)
        return F.nanvl(result, missing())

    def visit_BoolOp(self, node: ast.BoolOp) -> Column:
        values = [self.visit(v) for v in node.values]
        combined = values[0]
        for value in values[1:]:
            combined = combined & value if isinstance(node.op, ast.And) else combined | value
        return combined

    def visit_Compare(self, node: ast.Compare) -> Column:
        left = self.visit(node.left)
        combined: Column | None = None
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            negated = isinstance(op, ast.NotEq | ast.NotIn)
            if isinstance(op, ast.In | ast.NotIn):
                right = None
                held = left.isin(self.constants(comparator))
                held = ~held if negated else held
            elif type(op) in self.COMPARISONS:
                right = self.visit(comparator)
                held = self.COMPARISONS[type(op)](left, right)
            else:
                raise self.unsupported(node)
            term = F.coalesce(held, F.lit(negated))  # NaN != x holds; NaN == x does not
            combined = term if combined is None else combined & term
            left = right if right is not None else left
        assert combined is not None  # a comparison has at least one operator
        return combined

    def constants(self, node: ast.expr) -> list[Any]:
        """The values of a list, tuple or set of constants (the right side of ``in``)."""
        if not isinstance(node, ast.List | ast.Tuple | ast.Set):
            raise self.unsupported(node)
        return [self.constant(element) for element in node.elts]

    def visit_Call(self, node: ast.Call) -> Column:
        if node.keywords:
            raise self.unsupported(node)
        func = node.func
        if isinstance(func, ast.Name) and func.id in MATH and len(node.args) == 1:
            return MATH[func.id](self.visit(node.args[0]))
        if isinstance(func, ast.Attribute) and not node.args:
            target = self.visit(func.value)
            if func.attr in ("isna", "isnull"):
                return target.isNull()
            if func.attr in ("notna", "notnull"):
                return target.isNotNull()
        raise self.unsupported(node)


MATH: dict[str, Callable[[Column], Column]] = {"abs": F.abs, "exp": F.exp, "sqrt": F.sqrt}
"""Functions of one argument a condition may call, as pandas' ``eval`` knows them."""


def divide(a: Column, b: Column) -> Column:
    """``a / b`` as numpy divides floats: by zero, ±inf for a non-zero ``a``, else missing.
    (A zero divisor counts as positive: numpy's ``-0.0``, rare in data, is not told apart.)"""
    by_zero = F.when(a > 0, F.lit(float("inf"))).when(a < 0, F.lit(float("-inf")))
    return F.when(b == 0, by_zero.otherwise(missing())).otherwise(F.try_divide(a, b))


def remainder(a: Column, b: Column) -> Column:
    """``a % b`` as numpy computes it for floats: the sign of ``b``, missing when ``b`` is 0.
    (Spark's ``%`` takes the sign of ``a``, and its ``pmod`` is never negative.)"""
    truncated = F.try_mod(a, b)
    flip = (truncated != 0) & ((truncated < 0) != (b < 0))
    return F.when(b == 0, missing()).otherwise(F.when(flip, truncated + b).otherwise(truncated))


def floor_divide(a: Column, b: Column) -> Column:
    """``a // b`` as numpy computes it for floats: ``(a - a % b) / b`` rounded, so that it
    agrees with ``%`` (``1 // 0.1`` is 9); by zero as :func:`divide`."""
    quotient = F.rint(F.try_divide(a - remainder(a, b), b))
    return F.when(b == 0, divide(a, b)).otherwise(quotient)


INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")
"""The values of ``allow_relative_error`` that GX's pandas quantile metric accepts."""
ROUNDINGS: dict[str, Callable[[Any], Any]] = {
    "lower": np.floor,
    "higher": np.ceil,
    "nearest": np.around,
}


def pandas_quantiles(
    count: int,
    quantiles: Sequence[float],
    interpolation: str,
    order_statistics: Callable[[list[int]], dict[int, float]],
) -> list[float]:
    """The quantiles ``Series.quantile(quantiles, interpolation=...)`` gives for ``count``
    values, from the order statistics it needs (0-based ranks → values).

    pandas calls ``np.percentile`` with the quantiles times 100; the virtual indexes, the
    rounding and the interpolation below are numpy's, so the results agree to the last bit."""
    q = np.true_divide(np.asarray(quantiles, dtype=float) * 100.0, 100)
    last = count - 1
    virtual = last * q
    if interpolation in ROUNDINGS:
        indexes = ROUNDINGS[interpolation](virtual).astype(np.intp).tolist()
        values = order_statistics(sorted(set(indexes)))
        return [values[i] for i in indexes]
    midpoint = interpolation == "midpoint"
    if midpoint:
        virtual = 0.5 * (np.floor(virtual) + np.ceil(virtual))
    previous = np.minimum(np.floor(virtual), last).astype(np.intp)  # past the end: the last
    following = np.minimum(previous + 1, last)
    weight = np.where(virtual % 1 == 0, 0.0, 0.5) if midpoint else virtual - previous
    values = order_statistics(sorted(set(previous.tolist()) | set(following.tolist())))
    a = np.array([values[i] for i in previous.tolist()], dtype=float)
    b = np.array([values[i] for i in following.tolist()], dtype=float)
    difference = b - a  # numpy's _lerp: from the nearer end, for accuracy
    interpolated = np.where(weight >= 0.5, b - difference * (1 - weight), a + difference * weight)
    return [float(v) for v in interpolated]


def spark_order_statistics(values: DataFrame, count: int, ranks: list[int]) -> dict[int, float]:
    """The values at 0-based ``ranks`` of the single, non-null column ``values`` (``count``
    rows) in ascending order, exactly: Spark's ``approxQuantile`` with no error returns the
    value of rank ``ceil(p * count)`` (1-based), and ``p = (rank + 0.5) / count`` puts that
    rank half a row away from any float rounding."""
    probabilities = [(rank + 0.5) / count for rank in ranks]
    found = values.approxQuantile(values.columns[0], probabilities, 0.0)
    return dict(zip(ranks, found, strict=True))


@contextmanager
def _replacing_provider() -> Iterator[None]:
    """Registering a provider GX already has logs a warning; this replacement is deliberate."""
    registry = logging.getLogger("great_expectations.expectations.registry")
    level = registry.level
    registry.setLevel(logging.ERROR)
    try:
        yield
    finally:
        registry.setLevel(level)


with _replacing_provider():

    class SparkColumnQuantileValues(ColumnAggregateMetricProvider):
        """``column.quantile_values`` on Spark, as GX's pandas provider computes it: pandas'
        interpolation (``allow_relative_error``: one of :data:`INTERPOLATIONS`, ``nearest``
        when unset) over the present values, from exact order statistics (a count and one
        ``approxQuantile`` pass). A float ``allow_relative_error`` keeps GX's Spark meaning,
        ``approxQuantile`` with that relative error (the pandas provider refuses a float)."""

        metric_name = ColumnQuantileValues.metric_name  # registered after GX's own, replacing it
        value_keys = ColumnQuantileValues.value_keys

        @metric_value(engine=SparkDFExecutionEngine)
        def _spark(
            cls,
            execution_engine: SparkDFExecutionEngine,
            metric_domain_kwargs: dict,
            metric_value_kwargs: dict,
            metrics: dict[str, Any],
            runtime_configuration: dict,
        ) -> list[Any]:
            frame, _, accessor_domain_kwargs = execution_engine.get_compute_domain(
                metric_domain_kwargs, domain_type=MetricDomainTypes.COLUMN
            )
            name = accessor_domain_kwargs["column"]
            quantiles = list(metric_value_kwargs["quantiles"])
            interpolation = metric_value_kwargs.get("allow_relative_error") or "nearest"
            if isinstance(interpolation, float):
                found = frame.approxQuantile(name, quantiles, interpolation)
                return found or [None] * len(quantiles)
            if interpolation not in INTERPOLATIONS:
                raise ValueError(
                    f"allow_relative_error must be one of {INTERPOLATIONS} (pandas' "
                    f"interpolations) or a float, got {interpolation!r}"
                )
            kind = column_type(frame, name)
            present = quoted(name).isNotNull()
            if isinstance(kind, FloatType | DoubleType):
                present &= ~F.isnan(quoted(name))
            values = frame.select(quoted(name)).where(present)
            count = values.count()
            if count == 0:
                return [None] * len(quantiles)
            found = pandas_quantiles(
                count,
                quantiles,
                interpolation,
                lambda ranks: spark_order_statistics(values, count, ranks),
            )
            if isinstance(kind, IntegralType) and interpolation in ROUNDINGS:
                return [int(v) for v in found]  # pandas keeps the integer type of a value
            return found


class SparkColumnTopValueShare(ColumnAggregateMetricProvider):
    """``column.top_value_share`` on Spark: the most common value's count over the count of
    values present, in one grouped pass."""

    metric_name = "column.top_value_share"

    @metric_value(engine=SparkDFExecutionEngine)
    def _spark(
        cls,
        execution_engine: SparkDFExecutionEngine,
        metric_domain_kwargs: dict,
        metric_value_kwargs: dict,
        metrics: dict[str, Any],
        runtime_configuration: dict,
    ) -> float | None:
        frame, _, accessor_domain_kwargs = execution_engine.get_compute_domain(
            metric_domain_kwargs, domain_type=MetricDomainTypes.COLUMN
        )
        name = accessor_domain_kwargs["column"]
        counts = frame.where(quoted(name).isNotNull()).groupBy(quoted(name)).count()
        found = counts.agg(F.max("count").alias("top"), F.sum("count").alias("total")).first()
        if found is None or not found["total"]:
            return None
        return float(found["top"] / found["total"])
