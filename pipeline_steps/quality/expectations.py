"""Expectations of this project's own, registered with Great Expectations on import.

``expect_column_values_to_be_valid_hhmm``: integer clock times written HHMM (0..2359, minutes
below 60), optionally allowing 2400 for midnight at the end of a day as the flights data does.

``expect_column_values_to_be_airport_codes``: three capital letters, the form of IATA/FAA airport
codes. Matched by pyarrow on the string columns suites see, where GX's length and regex
expectations first convert every value to a Python string.

Both are vectorised on pandas; as map expectations they report unexpected counts and examples
like any core one.
"""

from __future__ import annotations

from typing import Any, ClassVar

from great_expectations.execution_engine import PandasExecutionEngine
from great_expectations.expectations.expectation import ColumnMapExpectation
from great_expectations.expectations.metrics import (
    ColumnMapMetricProvider,
    column_condition_partial,
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
