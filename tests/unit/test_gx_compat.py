import json

import numpy as np

from pipeline_steps.gx_compat import patch_quantile_expectation, to_builtin


def test_numpy_values_become_json_serialisable() -> None:
    value = {
        "details": {"success_details": [np.bool_(True), np.bool_(False)]},
        "observed": (np.float64(1.5), np.array([1, 2])),
    }
    assert json.dumps(to_builtin(value)) == (
        '{"details": {"success_details": [true, false]}, "observed": [1.5, [1, 2]]}'
    )


def test_patch_is_idempotent() -> None:
    from great_expectations.expectations import ExpectColumnQuantileValuesToBeBetween

    patch_quantile_expectation()
    first = ExpectColumnQuantileValuesToBeBetween._validate
    patch_quantile_expectation()
    assert ExpectColumnQuantileValuesToBeBetween._validate is first
