import json

import numpy as np
import pandas as pd

from pipeline_steps.quality.gx_compat import domain_columns, patch_quantile_expectation, to_builtin


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


def test_domain_columns_of_each_domain_kind() -> None:
    assert domain_columns({"column": "a", "batch_id": "b"}) == ["a"]
    assert domain_columns({"column_A": "a", "column_B": "b"}) == ["a", "b"]
    assert domain_columns({"column_list": ["a", "b", "c"]}) == ["a", "b", "c"]
    assert domain_columns({"batch_id": "b"}) == []


def test_narrowed_domains_keep_row_conditions_and_missing_rules(tmp_path) -> None:
    """Expectations that look beyond their column still see the whole frame."""
    from pipeline_steps.quality.suites import load_suite, run_suite

    frame = pd.DataFrame(
        {
            "delay": [5.0, 90.0, 120.0, 3.0, None],
            "late": [False, True, True, False, True],
            "a": [1.0, None, 2.0, 2.0, None],
            "b": [1.0, None, 3.0, 3.0, None],
        }
    )
    suite = tmp_path / "s.json"
    suite.write_text(
        json.dumps(
            {
                "name": "s",
                "expectations": [
                    {
                        "type": "expect_column_values_to_be_between",
                        "kwargs": {
                            "column": "delay",
                            "min_value": 100,
                            "row_condition": "late == True",
                            "condition_parser": "pandas",
                        },
                    },
                    {
                        "type": "expect_compound_columns_to_be_unique",
                        "kwargs": {
                            "column_list": ["a", "b"],
                            "ignore_row_if": "any_value_is_missing",
                        },
                    },
                ],
            }
        )
    )
    outcome = run_suite("s", frame, load_suite(suite))
    found = {f.expectation: f for f in outcome.failures}
    # only late rows are judged: 90 is below 100 (120 passes, the missing one is skipped)
    assert found["expect_column_values_to_be_between"].examples == [90.0]
    # the all-missing pair is dropped before uniqueness; (2, 3) repeats
    assert found["expect_compound_columns_to_be_unique"].unexpected_count == 2
