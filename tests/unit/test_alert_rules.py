"""The alert rules Prometheus evaluates (``containers/prometheus/alerts.yml``), checked and unit
tested by Prometheus' own ``promtool``: each alert fires on the series it is about, at the time
it should, and stays quiet on ordinary ones (a training stepping along, one finished long ago,
a step that succeeded again, a drift event of last week)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
RULES = HERE.parents[1] / "containers" / "prometheus" / "alerts.yml"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        why = "no promtool (scripts/prometheus.sh installs Debian's prometheus)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"the alert rules must be tested in CI: {why}")
        pytest.skip(why)
    return found


def test_the_rules_load() -> None:
    done = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True
    )
    assert done.returncode == 0 and "SUCCESS: 8 rules found" in done.stdout, (
        done.stdout + done.stderr
    )


def test_each_alert_fires_when_it_should_and_only_then() -> None:
    done = subprocess.run(
        [promtool(), "test", "rules", "test_alert_rules.yml"],
        cwd=HERE,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
