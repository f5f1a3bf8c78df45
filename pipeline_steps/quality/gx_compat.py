"""Narrow fixes for Great Expectations 1.x, applied when suites are run.

``expect_column_quantile_values_to_be_between`` returns numpy booleans in its result details;
inside a Checkpoint the validation-results store serialises results with the standard JSON
encoder, which rejects them (``TypeError: Object of type bool is not JSON serializable``). The
patch converts numpy scalars in that expectation's result to Python values; nothing else changes.

The pandas engine hands every column metric the whole batch frame, and its map metrics filter
that frame by a boolean mask (``df[df[column].notnull()]``): each of a suite's ~200 metrics then
copies every column of the partition. ``patch_column_domains`` narrows a column, column-pair or
multi-column domain to the columns it names before that happens; the metrics read only those
columns, so their values are unchanged.

The pandas engine also fingerprints every batch below 1 GB by hashing all of it (about a sixth
of a suite's time); ``skip_batch_fingerprint`` uses GX's own cut-off to skip that. A partition
is already identified by the sha256 its ingest recorded.

All three reach into internals of the GX minor version pinned in ``pyproject.toml``;
``tests/unit/test_gx_compat.py`` fails, naming the GX symbol, when an upgrade moves one of them.
"""

from __future__ import annotations

from functools import wraps
from typing import Any

import numpy as np


def to_builtin(value: Any) -> Any:
    """Numpy scalars and arrays (nested in dicts, lists, tuples) → plain Python values."""
    if isinstance(value, dict):
        return {k: to_builtin(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(to_builtin(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def patch_quantile_expectation() -> None:
    """Make the quantile expectation's results JSON-safe (idempotent)."""
    from great_expectations.expectations import ExpectColumnQuantileValuesToBeBetween as Quantile

    original = Quantile._validate
    if getattr(original, "_trainyard_json_safe", False):
        return

    @wraps(original)
    def _validate(self: Any, *args: Any, **kwargs: Any) -> Any:
        return to_builtin(original(self, *args, **kwargs))

    _validate._trainyard_json_safe = True  # type: ignore[attr-defined]
    Quantile._validate = _validate  # type: ignore[method-assign]


TABLE_KEYS = ("batch_id", "table")
# GX's ``ignore_row_if`` values → the rows its pandas engine drops before a pair/multi-column metric
DROP_MISSING: dict[str, str | None] = {
    "neither": None,
    "never": None,
    "both_values_are_missing": "all",
    "all_values_are_missing": "all",
    "either_value_is_missing": "any",
    "any_value_is_missing": "any",
}


def patch_column_domains() -> None:
    """Give column-domain metrics of the pandas engine only their own columns (idempotent)."""
    from great_expectations.execution_engine import PandasExecutionEngine

    original = PandasExecutionEngine.get_domain_records
    if getattr(original, "_trainyard_narrowed", False):
        return

    @wraps(original)
    def get_domain_records(self: Any, domain_kwargs: dict[str, Any]) -> Any:
        columns = domain_columns(domain_kwargs)
        how = DROP_MISSING.get(domain_kwargs.get("ignore_row_if", "neither"), "invalid")
        if not columns or domain_kwargs.get("row_condition") or how == "invalid":
            return original(self, domain_kwargs)
        table = original(self, {k: v for k, v in domain_kwargs.items() if k in TABLE_KEYS})
        if not set(columns) <= set(table.columns) or len(columns) == table.shape[1]:
            return original(self, domain_kwargs)
        narrowed = table[columns]
        return narrowed.dropna(how=how, subset=columns) if how else narrowed

    get_domain_records._trainyard_narrowed = True  # type: ignore[attr-defined]
    PandasExecutionEngine.get_domain_records = get_domain_records  # type: ignore[method-assign]


def domain_columns(domain_kwargs: dict[str, Any]) -> list[str]:
    """The columns a metric domain names; empty for a table domain."""
    if "column" in domain_kwargs:
        return [domain_kwargs["column"]]
    if "column_A" in domain_kwargs and "column_B" in domain_kwargs:
        return [domain_kwargs["column_A"], domain_kwargs["column_B"]]
    return list(domain_kwargs.get("column_list") or [])


def skip_batch_fingerprint() -> None:
    """Set GX's size cut-off for hashing pandas batches to zero, so none are hashed."""
    from great_expectations.execution_engine import pandas_execution_engine

    pandas_execution_engine.HASH_THRESHOLD = 0


def patch_expectation_kwargs() -> None:
    """Build an expectation's configuration once per kwargs lookup, not once per key
    (idempotent).

    GX's ``Expectation._get_domain_kwargs`` and ``_get_success_kwargs`` read
    ``self.configuration`` inside a comprehension over the keys, and that property rebuilds the
    whole configuration (a pydantic ``dict()`` and a deep copy) on every read: about a third of a
    suite's time on a day's partition. The patched methods read it once and return the same
    values."""
    from great_expectations.expectations.expectation import Expectation

    if getattr(Expectation._get_success_kwargs, "_trainyard_once", False):
        return

    @wraps(Expectation._get_domain_kwargs)
    def _get_domain_kwargs(self: Any) -> dict[str, Any]:
        # GX then checks for missing domain keys, which cannot be: the dict has every one
        kwargs = self.configuration.kwargs
        return {key: kwargs.get(key, self._get_default_value(key)) for key in self.domain_keys}

    @wraps(Expectation._get_success_kwargs)
    def _get_success_kwargs(self: Any) -> dict[str, Any]:
        domain = self._get_domain_kwargs()
        kwargs = self.configuration.kwargs
        success = {key: kwargs.get(key, self._get_default_value(key)) for key in self.success_keys}
        success.update(domain)
        return success

    _get_domain_kwargs._trainyard_once = True  # type: ignore[attr-defined]
    _get_success_kwargs._trainyard_once = True  # type: ignore[attr-defined]
    Expectation._get_domain_kwargs = _get_domain_kwargs  # type: ignore[method-assign]
    Expectation._get_success_kwargs = _get_success_kwargs  # type: ignore[method-assign]
