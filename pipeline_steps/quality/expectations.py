"""Expectations of this project's own, registered with Great Expectations on import.

``expect_column_values_to_be_valid_hhmm``: integer clock times written HHMM (0..2359, minutes
below 60), optionally allowing 2400 for midnight at the end of a day as some schedules write it.

``expect_column_values_to_be_airport_codes``: three capital letters, the form of IATA/FAA airport
codes. Matched by pyarrow on the string columns suites see, where GX's length and regex
expectations first convert every value to a Python string.

``expect_column_values_to_not_be_after``: timestamps at or before an instant (the ingest time:
nothing is dated in the future of its arrival).

``expect_date_parts_to_be_between``: the date written by year, month and day columns lies in a
range (the source's declared coverage).

``expect_timestamp_to_match_date_parts``: a timestamp read in a time zone has the year, month,
day and hour its parts columns say.

``expect_rows_to_satisfy``: a row-wise pandas expression over some columns holds (relations
between columns: ``origin != dest``, a delay equals the difference of its clock times).

``expect_column_top_value_share_to_be_between``: the share of the most common value among the
values present (a day holding one airport's or one carrier's rows alone). A column aggregate: its
bounds usually come from the trailing days (:mod:`pipeline_steps.quality.history`).

The map expectations are vectorised on pandas; they report unexpected counts and examples like
any core one, and chunked validation sums them like any row-wise expectation.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pandas as pd
from great_expectations.core.suite_parameters import SuiteParameterDict
from great_expectations.execution_engine import PandasExecutionEngine
from great_expectations.expectations.expectation import (
    ColumnAggregateExpectation,
    ColumnMapExpectation,
    MulticolumnMapExpectation,
)
from great_expectations.expectations.metrics import map_metric_provider
from great_expectations.expectations.metrics.column_aggregate_metric_provider import (
    ColumnAggregateMetricProvider,
    column_aggregate_value,
)
from great_expectations.expectations.metrics.map_metric_provider import (
    ColumnMapMetricProvider,
    MulticolumnMapMetricProvider,
)
from pandas.api.types import is_numeric_dtype

# The package re-exports each decorator under its module's name, which mypy takes for the module.
column_condition_partial: Any = map_metric_provider.column_condition_partial
multicolumn_condition_partial: Any = map_metric_provider.multicolumn_condition_partial
MULTICOLUMN_DOMAIN_KEYS = (
    "batch_id",
    "table",
    "column_list",
    "row_condition",
    "condition_parser",
    "ignore_row_if",
)


class ColumnValuesValidHhmm(ColumnMapMetricProvider):
    condition_metric_name = "column_values.valid_hhmm"
    condition_value_keys = ("allow_2400",)

    @column_condition_partial(engine=PandasExecutionEngine)
    def _pandas(cls, column: Any, allow_2400: bool = False, **kwargs: Any) -> Any:
        whole = column == column.round()
        valid = whole & (column >= 0) & (column // 100 < 24) & (column % 100 < 60)
        if allow_2400:
            valid |= column == 2400
        return valid


class ExpectColumnValuesToBeValidHhmm(ColumnMapExpectation):
    """Expect integer clock times in HHMM form (0..2359; 2400 too when ``allow_2400``)."""

    allow_2400: bool = False
    map_metric = "column_values.valid_hhmm"
    success_keys = ("allow_2400", "mostly")
    library_metadata: ClassVar[dict[str, Any]] = {"tags": ["trainyard"], "contributors": []}


AIRPORT_CODE = r"[A-Z]{3}"


class ColumnValuesAirportCodes(ColumnMapMetricProvider):
    condition_metric_name = "column_values.airport_codes"

    @column_condition_partial(engine=PandasExecutionEngine)
    def _pandas(cls, column: Any, **kwargs: Any) -> Any:
        return column.astype("string[pyarrow]").str.fullmatch(AIRPORT_CODE).fillna(False)


class ExpectColumnValuesToBeAirportCodes(ColumnMapExpectation):
    """Expect airport codes: three capital letters (IATA/FAA location identifiers)."""

    map_metric = "column_values.airport_codes"
    success_keys = ("mostly",)
    library_metadata: ClassVar[dict[str, Any]] = {"tags": ["trainyard"], "contributors": []}


class ColumnValuesNotAfter(ColumnMapMetricProvider):
    condition_metric_name = "column_values.not_after"
    condition_value_keys = ("latest",)

    @column_condition_partial(engine=PandasExecutionEngine)
    def _pandas(cls, column: Any, latest: str, **kwargs: Any) -> Any:
        return pd.to_datetime(column, utc=True) <= pd.Timestamp(latest)


class ExpectColumnValuesToNotBeAfter(ColumnMapExpectation):
    """Expect timestamps at or before ``latest`` (an ISO instant with its offset)."""

    latest: str | SuiteParameterDict
    map_metric = "column_values.not_after"
    success_keys = ("latest", "mostly")
    library_metadata: ClassVar[dict[str, Any]] = {"tags": ["trainyard"], "contributors": []}


class DatePartsBetween(MulticolumnMapMetricProvider):
    condition_metric_name = "multicolumn_values.date_parts_between"
    condition_domain_keys = MULTICOLUMN_DOMAIN_KEYS
    condition_value_keys = ("first", "last")

    @multicolumn_condition_partial(engine=PandasExecutionEngine)
    def _pandas(cls, column_list: Any, first: str, last: str, **kwargs: Any) -> Any:
        year, month, day = (column_list.iloc[:, i] for i in range(3))
        number = year * 10_000 + month * 100 + day  # YYYYMMDD orders like the date
        return number.between(_yyyymmdd(first), _yyyymmdd(last))


def _yyyymmdd(iso: str) -> int:
    return int(iso[:10].replace("-", ""))


class ExpectDatePartsToBeBetween(MulticolumnMapExpectation):
    """Expect the date written by year, month and day columns (``column_list`` in that order)
    to lie in ``first``..``last`` (ISO dates, both included)."""

    first: str | SuiteParameterDict
    last: str | SuiteParameterDict
    map_metric = "multicolumn_values.date_parts_between"
    success_keys = ("first", "last", "mostly")
    library_metadata: ClassVar[dict[str, Any]] = {"tags": ["trainyard"], "contributors": []}


class TimestampMatchesDateParts(MulticolumnMapMetricProvider):
    condition_metric_name = "multicolumn_values.timestamp_matches_date_parts"
    condition_domain_keys = MULTICOLUMN_DOMAIN_KEYS
    condition_value_keys = ("timezone",)

    @multicolumn_condition_partial(engine=PandasExecutionEngine)
    def _pandas(cls, column_list: Any, timezone: str, **kwargs: Any) -> Any:
        local = pd.to_datetime(column_list.iloc[:, 0], utc=True).dt.tz_convert(timezone)
        parts = (local.dt.year, local.dt.month, local.dt.day, local.dt.hour)
        matches = pd.Series(True, index=column_list.index)
        for i, part in enumerate(parts[: column_list.shape[1] - 1], start=1):
            matches &= part == column_list.iloc[:, i]
        return matches


class ExpectTimestampToMatchDateParts(MulticolumnMapExpectation):
    """Expect a timestamp (first of ``column_list``), read in ``timezone``, to have the year,
    month, day and hour written in the columns that follow it (a prefix of those four)."""

    timezone: str
    map_metric = "multicolumn_values.timestamp_matches_date_parts"
    success_keys = ("timezone", "mostly")
    library_metadata: ClassVar[dict[str, Any]] = {"tags": ["trainyard"], "contributors": []}


class RowsSatisfy(MulticolumnMapMetricProvider):
    condition_metric_name = "multicolumn_values.satisfy"
    condition_domain_keys = MULTICOLUMN_DOMAIN_KEYS
    condition_value_keys = ("condition",)

    @multicolumn_condition_partial(engine=PandasExecutionEngine)
    def _pandas(cls, column_list: Any, condition: str, **kwargs: Any) -> Any:
        # Nullable extension dtypes make comparisons NA, not False; numbers are compared as floats.
        frame = column_list.apply(
            lambda c: c.astype("float64") if is_numeric_dtype(c) else c.astype(object)
        )
        return pd.Series(frame.eval(condition, engine="python"), index=frame.index).fillna(False)


class ExpectRowsToSatisfy(MulticolumnMapExpectation):
    """Expect each row to satisfy ``condition``, a pandas expression over ``column_list``
    (e.g. ``origin != dest``). Rows with a missing value are skipped with
    ``ignore_row_if: any_value_is_missing``."""

    condition: str
    map_metric = "multicolumn_values.satisfy"
    success_keys = ("condition", "mostly")
    library_metadata: ClassVar[dict[str, Any]] = {"tags": ["trainyard"], "contributors": []}


class ColumnTopValueShare(ColumnAggregateMetricProvider):
    metric_name = "column.top_value_share"

    @column_aggregate_value(engine=PandasExecutionEngine)
    def _pandas(cls, column: Any, **kwargs: Any) -> Any:
        counts = column.dropna().value_counts()
        return float(counts.iloc[0] / counts.sum()) if len(counts) else None


class ExpectColumnTopValueShareToBeBetween(ColumnAggregateExpectation):
    """Expect the share of the most common value among the values present to lie in
    ``min_value``..``max_value`` (either may be None: open)."""

    min_value: float | SuiteParameterDict | None = None
    max_value: float | SuiteParameterDict | None = None
    strict_min: bool = False
    strict_max: bool = False
    metric_dependencies = ("column.top_value_share",)
    success_keys = ("min_value", "strict_min", "max_value", "strict_max")
    library_metadata: ClassVar[dict[str, Any]] = {"tags": ["trainyard"], "contributors": []}

    def _validate(
        self,
        metrics: dict[str, Any],
        runtime_configuration: dict[str, Any] | None = None,
        execution_engine: Any = None,
    ) -> Any:
        return self._validate_metric_value_between(
            metric_name="column.top_value_share",
            metrics=metrics,
            runtime_configuration=runtime_configuration,
            execution_engine=execution_engine,
        )
