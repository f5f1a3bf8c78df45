"""A narrow fix for Great Expectations 1.x, applied when suites are run.

``expect_column_quantile_values_to_be_between`` returns numpy booleans in its result details;
inside a Checkpoint the validation-results store serialises results with the standard JSON
encoder, which rejects them (``TypeError: Object of type bool is not JSON serializable``). The
patch converts numpy scalars in that expectation's result to Python values; nothing else changes.
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
