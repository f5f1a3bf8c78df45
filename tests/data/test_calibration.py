"""``trainyard calibrate`` sets a suite's history checks on real days: each allowance just above
the largest deviation of those days, so none of them would have warned, and the checks it writes
are the ones the validate step then applies."""

from __future__ import annotations

import json
import shutil
from datetime import date
from pathlib import Path

import pytest

from pipeline_steps.commands.calibrate import calibrate_suite
from pipeline_steps.core.errors import StepError
from pipeline_steps.quality.history import history_checks
from pipeline_steps.quality.suites import load_suite

START, END = date(2013, 3, 1), date(2013, 4, 15)


@pytest.fixture
def suites(tmp_path: Path) -> Path:
    """A copy of the shipped suites without their history checks."""
    folder = tmp_path / "expectations"
    shutil.copytree(
        Path(__file__).parents[2] / "examples" / "flight_delay" / "expectations", folder
    )
    for path in folder.glob("*.json"):
        suite = json.loads(path.read_text())
        suite["expectations"] = [
            e for e in suite["expectations"] if "history" not in (e.get("meta") or {})
        ]
        path.write_text(json.dumps(suite))
    return folder


def test_calibrating_named_columns_writes_checks_no_calibration_day_would_fail(
    suites: Path, make_settings
) -> None:
    settings = make_settings(f"validation.expectations_dir={suites}")
    found = calibrate_suite(
        settings, "flights", START, END, columns=["distance", "origin"], source="domain", write=True
    )
    assert found.days == (END - START).days + 1
    judged = {(c.candidate.column, c.candidate.statistic): c for c in found.calibrated}
    assert set(judged) == {
        ("distance", "mean"),
        ("distance", "stdev"),
        ("origin", "distinct"),
        ("origin", "top_share"),
    }
    for item in judged.values():  # the warning sits above every calibration day's deviation
        assert item.warning >= max(5.0, item.largest) and item.critical == 1.5 * item.warning
    assert judged["distance", "mean"].candidate.log  # distances are positive: a log scale

    checks = history_checks(load_suite(suites / "flights.json"))
    assert len(checks) == 8 and {c.severity for c in checks} == {"warning", "critical"}
    again = calibrate_suite(settings, "flights", START, END, source="domain")
    assert [c.warning for c in again.calibrated] == [c.warning for c in found.calibrated]
    assert "written to" in found.render() and "| mean of `distance` | log |" in found.render()


def test_calibration_errors_name_the_option(suites: Path, make_settings) -> None:
    settings = make_settings(f"validation.expectations_dir={suites}")
    with pytest.raises(StepError, match="declares no history checks: name them with --columns"):
        calibrate_suite(settings, "flights", START, END, source="domain")
    with pytest.raises(StepError, match=r"--columns: \['altitude'\] not in the flights schema"):
        calibrate_suite(settings, "flights", START, END, columns=["altitude"], source="domain")
    with pytest.raises(StepError, match="column 'time_hour' is timestamp"):
        calibrate_suite(settings, "flights", START, END, columns=["time_hour"], source="domain")
    with pytest.raises(StepError, match=r"more than validation\.history_min_days=7 are needed"):
        calibrate_suite(settings, "flights", START, START, columns=["distance"], source="domain")
