"""The suite on both cores: the order and grouping pytest-xdist's ``loadgroup`` works with.

Each test module is one unit of work, so a module's fixtures are built once, on one worker; the
deployments (the container tier and the production profile's processes) are one unit, run one
after the other, and so are the Spark tests, around the run's one Spark session (the tests that
do not use it first: a Spark that cannot start is tested where none runs yet).
The units go out longest first (their seconds as last measured,
``tests/durations.json``), so the two workers finish together instead of one waiting on a long
module picked up last. ``make test-profile`` writes those seconds; a module it has never
measured counts as its tier's typical length.

Without ``-n``, the order is the same and no group is added: a plain ``pytest`` run is unchanged
but for running the long modules first.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.profiling import tier_of

DURATIONS = Path(__file__).with_name("durations.json")
"""Seconds per test module, as ``make test-profile`` last measured them."""
TYPICAL_S = {"containers": 600.0, "services": 120.0, "spark": 60.0, "slow": 60.0}
"""What a module not yet measured is taken to cost, by its heaviest tier; else 5 s."""
SHARED = {"containers": "deployments", "deployment": "deployments", "spark": "spark"}
"""Markers whose tests run as one unit across modules: the container tier (its images built
once) with the production profile's processes (the two deployments, each a dozen processes on
health checks and timeouts, run one after the other: side by side they took 2.4 times as long);
the Spark tests around the run's one Spark session."""


def measured_seconds(path: Path = DURATIONS) -> dict[str, float]:
    """``{module path: seconds}``; empty when the file is missing or unreadable."""
    try:
        modules = json.loads(path.read_text())["modules"]
        return {module: float(row["seconds"]) for module, row in modules.items()}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def unit_of(item: pytest.Item) -> str:
    """The unit of work a test belongs to: the container tier, or its module."""
    for marker, unit in SHARED.items():
        if item.get_closest_marker(marker):
            return unit
    return item.nodeid.split("::", 1)[0]


def longest_first(items: list[pytest.Item], seconds: dict[str, float]) -> list[pytest.Item]:
    """The items regrouped by unit, the longest unit first; the order within a unit is kept."""
    units: dict[str, list[pytest.Item]] = {}
    cost: dict[str, float] = {}
    counted: set[str] = set()
    for item in items:
        unit = unit_of(item)
        module = item.nodeid.split("::", 1)[0]
        if module not in counted:  # each module counted once, towards its unit
            counted.add(module)
            typical = TYPICAL_S.get(tier_of(item.keywords), 5.0)
            cost[unit] = cost.get(unit, 0.0) + seconds.get(module, typical)
        units.setdefault(unit, []).append(item)
    for tests in units.values():  # a unit's tests that need no shared session go first
        tests.sort(key=lambda item: "spark" in getattr(item, "fixturenames", ()))
    ordered = sorted(units, key=lambda unit: -cost[unit])
    return [item for unit in ordered for item in units[unit]]


@pytest.hookimpl(tryfirst=True)  # before xdist turns the groups into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items[:] = longest_first(items, measured_seconds())
    if config.pluginmanager.hasplugin("xdist") and config.getoption("dist", "no") == "loadgroup":
        for item in items:
            item.add_marker(pytest.mark.xdist_group(unit_of(item)))


def pytest_configure(config: pytest.Config) -> None:
    main = sys.modules["__main__"]
    if hasattr(config, "workerinput") and getattr(main, "__spec__", None) is None:
        # A pytest-xdist worker's __main__ has neither a spec nor a file, which pyspark's connect
        # package takes for a doctest run and exits from, when Great Expectations imports it
        # without the connect client's dependencies. Elsewhere that import fails with an
        # ImportError, which Great Expectations expects: fail it the same way here.
        try:
            from pyspark.testing.connectutils import should_test_connect
        except ImportError:
            return
        if not should_test_connect:
            sys.modules["pyspark.sql.connect"] = None  # type: ignore[assignment]
