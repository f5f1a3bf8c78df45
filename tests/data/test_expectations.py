"""The project's own GX expectation behaves like a core map expectation."""

import json
from pathlib import Path

import pandas as pd

from pipeline_steps.suites import load_suite, run_suite


def _suite(tmp_path: Path, **kwargs) -> Path:
    path = tmp_path / "clock.json"
    path.write_text(
        json.dumps(
            {
                "name": "clock",
                "expectations": [
                    {
                        "type": "expect_column_values_to_be_valid_hhmm",
                        "kwargs": {"column": "t", **kwargs},
                    }
                ],
            }
        )
    )
    return path


def test_valid_hhmm_flags_impossible_clock_times(tmp_path: Path) -> None:
    frame = pd.DataFrame({"t": [0, 5, 959, 1075, 2359, 2400, None]})
    outcome = run_suite("clock", frame, load_suite(_suite(tmp_path)))
    [failure] = outcome.failures
    assert failure["unexpected_count"] == 2 and sorted(failure["examples"]) == [1075, 2400]
    midnight = run_suite("clock", frame, load_suite(_suite(tmp_path, allow_2400=True)))
    assert [f["examples"] for f in midnight.failures] == [[1075]]
