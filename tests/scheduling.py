"""The suite on every core: the units of work pytest-xdist hands out, and their order.

``make test`` runs ``pytest -n auto --dist loadscope``; :func:`pytest_xdist_make_scheduler`
replaces xdist's scopes (a module) with units (:func:`unit_of`): each test module is one unit,
so its module fixtures are built once, on one worker, except where several modules share one
costly thing and are one unit together (``UNITS``): the deployments (the container tier, its
images built once, and the production profile's processes; side by side they took 2.4 times as
long, each a dozen processes on health checks and timeouts) run one after the other, and the
Spark tests run around the run's one Spark session (the tests that do not use it first: a
Spark that cannot start is tested where none runs yet). The standalone cluster's test is a unit
of its own: its drivers are step processes, so it shares no session with them, and on its own
worker it runs beside the local session's tests instead of after them.

The deployments go out first; while they run, the other workers take the modules that run in
their own process (the ``fast`` tier), which compete least with them; then the modules that
start processes of their own (training ranks, DAG runs, Spark), longest first, so the workers
finish together instead of one waiting on a long module picked up last. The lengths are the
seconds last measured (``tests/durations.json``, written by ``make test-profile``); a module
never measured counts as its tier's typical length. Without ``-n``, only the order changes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.profiling import tier_of

DURATIONS = Path(__file__).with_name("durations.json")
"""Seconds per test module, as ``make test-profile`` last measured them."""
TYPICAL_S = {"containers": 600.0, "services": 120.0, "spark": 60.0, "slow": 60.0}
"""What a module not yet measured is taken to cost, by its heaviest tier; else 5 s."""
UNITS = {
    "tests/containers/": "deployments",
    "tests/integration/test_production_profile.py": "deployments",
    "tests/engines/test_spark_engine.py": "spark",
    "tests/data/test_spark_validation.py": "spark",
    "tests/engines/test_spark_cluster.py": "spark-cluster",
}
"""Modules (or folders) that run as one unit with others; ``tests/unit/test_scheduling.py``
checks that every module marked ``containers``, ``deployment`` or ``spark`` is here."""


def measured_seconds(path: Path = DURATIONS) -> dict[str, float]:
    """``{module path: seconds}``; empty when the file is missing or unreadable."""
    try:
        modules = json.loads(path.read_text())["modules"]
        return {module: float(row["seconds"]) for module, row in modules.items()}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def unit_of(nodeid: str) -> str:
    """The unit of work of a test (by its node id): its shared unit, else its module."""
    module = nodeid.split("::", 1)[0]
    return next((unit for prefix, unit in UNITS.items() if module.startswith(prefix)), module)


def longest_first(items: list[pytest.Item], seconds: dict[str, float]) -> list[pytest.Item]:
    """The items regrouped by unit: the deployments, then the units all of whose tests are in
    the ``fast`` tier, then the rest, each longest first. The order within a unit is kept, but
    for the tests that ask for no shared Spark session, which go first."""
    units: dict[str, list[pytest.Item]] = {}
    cost: dict[str, float] = {}
    in_process: dict[str, bool] = {}
    counted: set[str] = set()
    for item in items:
        unit = unit_of(item.nodeid)
        module = item.nodeid.split("::", 1)[0]
        tier = tier_of(item.keywords)
        in_process[unit] = in_process.get(unit, True) and tier in ("fast", "gpu")
        if module not in counted:  # each module counted once, towards its unit
            counted.add(module)
            cost[unit] = cost.get(unit, 0.0) + seconds.get(module, TYPICAL_S.get(tier, 5.0))
        units.setdefault(unit, []).append(item)
    for tests in units.values():
        tests.sort(key=lambda item: "spark" in getattr(item, "fixturenames", ()))
    ordered = sorted(
        units, key=lambda unit: (unit != "deployments", not in_process[unit], -cost[unit])
    )
    return [item for unit in ordered for item in units[unit]]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items[:] = longest_first(items, measured_seconds())


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadscope``, a scope is a unit (:func:`unit_of`), in collection order."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return UnitScheduling(config, log)


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
