"""A suite that cries wolf is as bad as one that misses: 30 days spread over 2013 pass.

Warnings are allowed only on the days docs/data.md names (storms with mass cancellations);
``benchmarks/suite_false_alarms.py`` runs all 365 days.
"""

from datetime import date, timedelta

import pytest

from benchmarks.suite_false_alarms import judge

DAYS = [date(2013, 1, 1) + timedelta(days=12 * n + 3) for n in range(30)]
KNOWN_WARNINGS = {date(2013, 2, 8), date(2013, 2, 9)}  # the blizzard


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["flights", "weather"])
def test_real_days_of_2013_raise_no_false_alarm(dataset: str) -> None:
    alarms = judge(dataset, DAYS)
    assert dict(alarms.critical) == {}
    if dataset == "flights":
        warned = {d for days in alarms.warning.values() for d in days}
        assert warned <= KNOWN_WARNINGS
