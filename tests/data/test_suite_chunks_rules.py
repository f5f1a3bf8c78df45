"""Guard: partitions above ``validation.chunk_rows`` are judged by suite_chunks' copy of GX rules.

It sums row-wise results across chunks and re-applies ``mostly`` and the percentages, and judges
the row count, compound-key uniqueness and quantiles from aggregates. Each rule runs here through
GX on one frame and through suite_chunks in chunks of the same rows, on the edge cases the rules
decide (missing values, an all-missing column, skipped key rows, strict and near bounds); a
difference names the rule, the GX version and the function to bring in line.
"""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline_steps.quality.suite_chunks import QUANTILES, ROW_COUNT, UNIQUE_KEY, run_suite_chunked
from pipeline_steps.quality.suites import as_frame, load_suite, run_suite

WHERE = {
    ROW_COUNT: "suite_chunks._judge_whole",
    UNIQUE_KEY: "suite_chunks._unique_key",
    QUANTILES: "suite_chunks._quantiles",
}
ROW_WISE = "suite_chunks._merge (_percentages, _mostly_met)"
COMPARED = (
    "observed_value",
    "details",
    "element_count",
    "missing_count",
    "unexpected_count",
    "unexpected_percent",
    "missing_percent",
    "unexpected_percent_total",
    "unexpected_percent_nonmissing",
    "partial_unexpected_list",
)
ROWS = 30
CHUNK_ROWS = 7  # five chunks; the last one short


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    delay = rng.normal(20, 40, ROWS).round(1)
    delay[[2, 9, 16, 23]] = np.nan
    carrier = np.array(["AA", "B6", "DL", "UA", "WN", "EV"] * 5, dtype=object)
    flight = np.arange(100, 100 + ROWS, dtype=float)
    carrier[[5, 20]], flight[[5, 20]] = None, np.nan  # keys all missing: skipped by default
    carrier[12] = None  # a key half missing
    carrier[25], flight[25] = carrier[3], flight[3]  # a key repeated in a later chunk
    return pd.DataFrame(
        {
            "dep_delay": delay,
            "arr_delay": delay + rng.normal(0, 15, ROWS).round(1),
            "cancelled": np.full(ROWS, np.nan),
            "carrier": carrier,
            "flight": flight,
            "distance": np.arange(1.0, ROWS + 1.0) * 100,
        }
    )


EXPECTATIONS: list[tuple[str, dict[str, Any]]] = [
    ("expect_column_values_to_not_be_null", {"column": "dep_delay", "mostly": 0.8}),
    (
        "expect_column_values_to_be_between",
        {"column": "dep_delay", "min_value": -10, "max_value": 60, "mostly": 0.7},
    ),
    ("expect_column_values_to_be_between", {"column": "cancelled", "min_value": 0}),
    (
        "expect_column_pair_values_a_to_be_greater_than_b",
        {
            "column_A": "arr_delay",
            "column_B": "dep_delay",
            "or_equal": True,
            "ignore_row_if": "either_value_is_missing",
            "mostly": 0.2,
        },
    ),
    (ROW_COUNT, {"min_value": ROWS, "max_value": ROWS}),
    (ROW_COUNT, {"max_value": ROWS, "strict_max": True}),
    (UNIQUE_KEY, {"column_list": ["carrier", "flight"]}),
    (
        UNIQUE_KEY,
        {"column_list": ["flight", "carrier"], "ignore_row_if": "any_value_is_missing"},
    ),
    (UNIQUE_KEY, {"column_list": ["flight", "cancelled"], "mostly": 0.9}),  # 26 of 28 unique
    (
        QUANTILES,
        {
            "column": "distance",
            # the median is 1500: 1500.1 is within GX's relative 1e-4 of it, 1600 is not
            "quantile_ranges": {
                "quantiles": [0.1, 0.5, 0.9],
                "value_ranges": [[None, 300], [1500.1, None], [1600, 3000]],
            },
        },
    ),
    (
        QUANTILES,
        {"column": "cancelled", "quantile_ranges": {"quantiles": [0.5], "value_ranges": [[0, 1]]}},
    ),
    (
        QUANTILES,
        {
            "column": "dep_delay",
            "allow_relative_error": "linear",
            "quantile_ranges": {"quantiles": [0.25, 0.75], "value_ranges": [[None, 0], [0, None]]},
        },
    ),
]


def _key(result: dict[str, Any]) -> str:
    config = result["expectation_config"]
    kwargs = {k: v for k, v in config["kwargs"].items() if k != "batch_id"}
    return f"{config['type']} {json.dumps(kwargs, sort_keys=True)}"


def _seen(result: dict[str, Any]) -> dict[str, Any]:
    detail = result.get("result") or {}
    return {"success": result["success"], **{k: detail[k] for k in COMPARED if k in detail}}


def test_chunked_rules_give_great_expectations_own_verdicts(tmp_path: Path) -> None:
    import great_expectations

    suite = tmp_path / "rules.json"
    suite.write_text(
        json.dumps(
            {"name": "rules", "expectations": [{"type": t, "kwargs": k} for t, k in EXPECTATIONS]}
        )
    )
    path = tmp_path / "partition.parquet"
    pq.write_table(pa.Table.from_pandas(_frame(), preserve_index=False), path, row_group_size=4)

    single = run_suite("rules", as_frame(pq.read_table(path)), load_suite(suite))
    chunked = run_suite_chunked(
        "rules", pq.ParquetFile(path), load_suite(suite), {}, None, CHUNK_ROWS
    )

    theirs = {_key(r): r for r in single.result["results"]}
    ours = {_key(r): r for r in chunked.result["results"]}
    assert ours.keys() == theirs.keys() and len(ours) == len(EXPECTATIONS)
    differences = [
        f"- {key}: great_expectations {great_expectations.__version__} says "
        f"{_seen(theirs[key])}, suite_chunks says {_seen(ours[key])} - bring "
        f"{WHERE.get(key.split()[0], ROW_WISE)} in line"
        for key in theirs
        if _seen(theirs[key]) != _seen(ours[key])
    ]
    assert not differences, (
        "suite_chunks no longer reproduces GX's verdicts (re-check it before widening the GX "
        "pin in pyproject.toml):\n" + "\n".join(differences)
    )
    assert chunked.result["statistics"] == single.result["statistics"]
    # the cases above decide something: each rule both passes and fails somewhere
    verdicts = {(key.split()[0], r["success"]) for key, r in theirs.items()}
    for kind in (ROW_COUNT, UNIQUE_KEY, QUANTILES):
        assert {(kind, True), (kind, False)} <= verdicts
