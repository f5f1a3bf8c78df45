import hashlib
import importlib
import inspect
import json

import numpy as np
import pandas as pd
import pytest

from pipeline_steps.quality.gx_compat import (
    domain_columns,
    patch_column_domains,
    patch_expectation_kwargs,
    patch_quantile_expectation,
    skip_batch_fingerprint,
    to_builtin,
)


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


# Guards: gx_compat patches Great Expectations internals of the pinned minor version
# (pyproject.toml). When an upgrade moves one of them, these fail and name what to re-check.


def _gx_says(symbol: str, what: str) -> str:
    import great_expectations

    return (
        f"great_expectations {great_expectations.__version__}: {symbol} {what}; "
        "pipeline_steps/quality/gx_compat.py patches it - re-check the patch against this "
        "version before widening the pin in pyproject.toml"
    )


@pytest.mark.parametrize(
    ("owner", "name", "parameters"),
    [
        (
            "great_expectations.execution_engine:PandasExecutionEngine",
            "get_domain_records",
            ["self", "domain_kwargs"],
        ),
        (
            "great_expectations.expectations:ExpectColumnQuantileValuesToBeBetween",
            "_validate",
            ["self", "metrics", "runtime_configuration", "execution_engine"],
        ),
        ("great_expectations.expectations:Expectation", "_get_domain_kwargs", ["self"]),
        ("great_expectations.expectations:Expectation", "_get_success_kwargs", ["self"]),
    ],
)
def test_patched_methods_keep_their_names_and_signatures(
    owner: str, name: str, parameters: list[str]
) -> None:
    module, cls = owner.split(":")
    target = getattr(importlib.import_module(module), cls)
    symbol = f"{module}.{cls}.{name}"
    assert hasattr(target, name), _gx_says(symbol, "no longer exists")
    original = inspect.unwrap(getattr(target, name))
    found = list(inspect.signature(original).parameters)
    assert found == parameters, _gx_says(symbol, f"now takes {found}, not {parameters}")


# sha256 of GX's own get_domain_records source: patch_column_domains (and DROP_MISSING) mirror
# how it filters rows for each domain kind, so any change to it needs a reading.
GET_DOMAIN_RECORDS_SHA256 = "4691281d9a24f31f802390bdb751e118f7fc4c3a35555177f9939679f1cf5528"


def test_the_row_filtering_the_narrowed_domains_mirror_is_unchanged() -> None:
    from great_expectations.execution_engine import PandasExecutionEngine

    source = inspect.getsource(inspect.unwrap(PandasExecutionEngine.get_domain_records))
    assert hashlib.sha256(source.encode()).hexdigest() == GET_DOMAIN_RECORDS_SHA256, _gx_says(
        "PandasExecutionEngine.get_domain_records",
        "has changed (source hash differs); patch_column_domains mirrors its row filtering by "
        "domain kind and ignore_row_if - read the new source, align the patch, then record "
        "the new hash in GET_DOMAIN_RECORDS_SHA256",
    )


FRAME = pd.DataFrame(
    {
        "a": [1.0, None, 2.0, None, 5.0],
        "b": [1.0, None, None, 3.0, 5.0],
        "c": ["x", "y", None, "z", "x"],
        "other": [0, 1, 2, 3, 4],
    }
)
DOMAINS = [
    {"column": "a"},
    {"column_A": "a", "column_B": "b", "ignore_row_if": "neither"},
    {"column_A": "a", "column_B": "b", "ignore_row_if": "both_values_are_missing"},
    {"column_A": "a", "column_B": "b", "ignore_row_if": "either_value_is_missing"},
    {"column_list": ["a", "b", "c"], "ignore_row_if": "never"},
    {"column_list": ["a", "b", "c"], "ignore_row_if": "all_values_are_missing"},
    {"column_list": ["a", "b", "c"], "ignore_row_if": "any_value_is_missing"},
]


@pytest.mark.parametrize("domain", DOMAINS, ids=lambda d: "-".join(map(str, d.values())))
def test_narrowed_domain_records_are_great_expectations_own_rows(domain: dict) -> None:
    """The patched engine returns GX's own rows for the domain, only fewer columns."""
    from great_expectations.execution_engine import PandasExecutionEngine

    patch_column_domains()
    engine = PandasExecutionEngine()
    engine.load_batch_data("partition", FRAME)
    kwargs = {"batch_id": "partition", **domain}
    theirs = inspect.unwrap(PandasExecutionEngine.get_domain_records)(engine, dict(kwargs))
    narrowed = PandasExecutionEngine.get_domain_records(engine, dict(kwargs))
    columns = domain_columns(domain)
    assert list(narrowed.columns) == columns
    try:
        pd.testing.assert_frame_equal(narrowed, theirs[columns])
    except AssertionError as exc:
        raise AssertionError(
            _gx_says("PandasExecutionEngine.get_domain_records", f"returns other rows for {domain}")
        ) from exc


def test_the_size_cut_off_still_decides_whether_a_batch_is_fingerprinted(monkeypatch) -> None:
    from great_expectations.core.batch_spec import RuntimeDataBatchSpec
    from great_expectations.execution_engine import PandasExecutionEngine, pandas_execution_engine

    symbol = "great_expectations.execution_engine.pandas_execution_engine.HASH_THRESHOLD"
    assert hasattr(pandas_execution_engine, "HASH_THRESHOLD"), _gx_says(symbol, "is gone")
    engine = PandasExecutionEngine()
    monkeypatch.setattr(pandas_execution_engine, "HASH_THRESHOLD", 1e9)  # GX's own value
    _, markers = engine.get_batch_data_and_markers(RuntimeDataBatchSpec(batch_data=FRAME))
    assert "pandas_data_fingerprint" in markers, _gx_says(symbol, "no longer gates hashing")
    skip_batch_fingerprint()
    _, markers = engine.get_batch_data_and_markers(RuntimeDataBatchSpec(batch_data=FRAME))
    assert "pandas_data_fingerprint" not in markers, _gx_says(symbol, "no longer gates hashing")


def test_quantile_results_are_json_safe_after_the_patch() -> None:
    from great_expectations.expectations import ExpectColumnQuantileValuesToBeBetween

    patch_quantile_expectation()
    expectation = ExpectColumnQuantileValuesToBeBetween(
        column="a", quantile_ranges={"quantiles": [0.5], "value_ranges": [[0, 2]]}
    )
    result = expectation._validate(metrics={"column.quantile_values": [1.0]})
    assert json.loads(json.dumps(result)) == {
        "success": True,
        "result": {
            "observed_value": {"quantiles": [0.5], "values": [1.0]},
            "details": {"success_details": [True]},
        },
    }, _gx_says("ExpectColumnQuantileValuesToBeBetween._validate", "returns another result")


# sha256 of GX's own kwargs lookups: patch_expectation_kwargs returns what they return, reading
# the configuration once.
KWARGS_SHA256 = {
    "_get_domain_kwargs": "91ad2a0670ff463ad99457f1e5c351b7fbd64cac8f6c200a18a437552f2adfd0",
    "_get_success_kwargs": "fe376905e18bc525a128d251281e7f48309e82f820f23c8e1d93d85e2739b26f",
}


@pytest.mark.parametrize("name", sorted(KWARGS_SHA256))
def test_the_kwargs_lookups_the_patch_mirrors_are_unchanged(name: str) -> None:
    from great_expectations.expectations.expectation import Expectation

    source = inspect.getsource(inspect.unwrap(getattr(Expectation, name)))
    assert hashlib.sha256(source.encode()).hexdigest() == KWARGS_SHA256[name], _gx_says(
        f"Expectation.{name}",
        "has changed (source hash differs); patch_expectation_kwargs returns what it returns - "
        "read the new source, align the patch, then record the new hash in KWARGS_SHA256",
    )


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("ExpectColumnValuesToBeBetween", {"column": "a", "min_value": 0, "mostly": 0.9}),
        ("ExpectColumnPairValuesToBeEqual", {"column_A": "a", "column_B": "b"}),
        ("ExpectCompoundColumnsToBeUnique", {"column_list": ["a", "b"]}),
        ("ExpectTableRowCountToBeBetween", {"min_value": 1, "max_value": {"$PARAMETER": "x"}}),
    ],
)
def test_patched_kwargs_lookups_return_great_expectations_own_values(name, kwargs) -> None:
    import great_expectations.expectations as gxe
    from great_expectations.expectations.expectation import Expectation

    patch_expectation_kwargs()
    expectation = getattr(gxe, name)(**kwargs)
    for lookup in ("_get_domain_kwargs", "_get_success_kwargs"):
        theirs = inspect.unwrap(getattr(Expectation, lookup))(expectation)
        assert getattr(expectation, lookup)() == theirs, _gx_says(
            f"Expectation.{lookup}", f"returns other kwargs for {name}"
        )
