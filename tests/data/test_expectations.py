"""The project's own GX expectations behave like core map expectations."""

import json
from pathlib import Path

import pandas as pd

from pipeline_steps.quality.suites import load_suite, run_suite


def _suite(tmp_path: Path, kind: str = "expect_column_values_to_be_valid_hhmm", **kwargs) -> Path:
    path = tmp_path / "one.json"
    path.write_text(
        json.dumps(
            {"name": "one", "expectations": [{"type": kind, "kwargs": {"column": "t", **kwargs}}]}
        )
    )
    return path


def test_valid_hhmm_flags_impossible_clock_times(tmp_path: Path) -> None:
    frame = pd.DataFrame({"t": [0, 5, 959, 1075, 2359, 2400, None]})
    outcome = run_suite("one", frame, load_suite(_suite(tmp_path)))
    [failure] = outcome.failures
    assert failure.unexpected_count == 2 and sorted(failure.examples) == [1075, 2400]
    midnight = run_suite("one", frame, load_suite(_suite(tmp_path, allow_2400=True)))
    assert [f.examples for f in midnight.failures] == [[1075]]


def test_airport_codes_are_three_capital_letters(tmp_path: Path) -> None:
    frame = pd.DataFrame({"t": ["JFK", "lax", "ORDX", "S1U", "BQN", None]}, dtype="string[pyarrow]")
    suite = load_suite(_suite(tmp_path, "expect_column_values_to_be_airport_codes"))
    [failure] = run_suite("one", frame, suite).failures
    assert failure.unexpected_count == 3 and failure.examples == ["lax", "ORDX", "S1U"]
    plain = frame.astype(object)  # the same verdict on plain Python strings
    assert run_suite("one", plain, suite).failures[0].unexpected_count == 3
