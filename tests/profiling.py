"""Where the suite's time goes: ``pytest --profile-tiers`` prints wall seconds per test module and
per tier at the end of the run (``make test-profile``), and ``--profile-json FILE`` writes them.

A test's time is its set-up, call and tear-down, so a session fixture's cost lands on the first
test that asks for it, where it is paid. Each test counts in one tier, its heaviest marker:
``containers`` over ``services`` over ``spark`` over ``gpu`` over ``slow``, and ``fast`` for the
rest (what ``make test-fast`` runs). The module and tier sums add up to the tests' total; the
difference to the session's wall time is collection and the terminal's own work.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

TIERS = ("containers", "services", "spark", "gpu", "slow")
"""The tiers, heaviest first; a test with none of these markers is in ``fast``."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("trainyard")
    group.addoption(
        "--profile-tiers",
        action="store_true",
        help="print wall seconds per test module and per marker tier at the end",
    )
    group.addoption(
        "--profile-json",
        metavar="FILE",
        help="also write the per-module and per-tier seconds to FILE as JSON",
    )


def tier_of(keywords: Any) -> str:
    """The heaviest tier among a test's markers (its item's or its report's keywords)."""
    return next((tier for tier in TIERS if tier in keywords), "fast")


class Profile:
    """Collects the seconds of every test phase, by module and by tier."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.tiers: dict[str, str] = {}
        self.seconds: dict[str, float] = defaultdict(float)
        self.outcomes: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # under pytest-xdist the reports come from the workers, with the markers in keywords
        self.tiers.setdefault(report.nodeid, tier_of(report.keywords))
        self.seconds[report.nodeid] += report.duration
        if report.when == "call" or report.outcome != "passed":
            self.outcomes[report.nodeid] = report.outcome

    def table(self) -> dict[str, Any]:
        """``{"wall_s", "modules": {path: row}, "tiers": {tier: row}}``; a row holds
        ``tests`` and ``seconds``."""
        modules: dict[str, dict[str, float]] = defaultdict(lambda: {"tests": 0, "seconds": 0.0})
        tiers: dict[str, dict[str, float]] = defaultdict(lambda: {"tests": 0, "seconds": 0.0})
        for nodeid, seconds in self.seconds.items():
            module = nodeid.split("::", 1)[0]  # xdist's loadgroup appends @group to the id
            tier = self.tiers.get(nodeid, "fast")
            for row in (modules[module], tiers[tier]):
                row["tests"] += 1
                row["seconds"] += seconds
        return {
            "wall_s": time.monotonic() - self.started,
            "modules": dict(sorted(modules.items(), key=lambda kv: -kv[1]["seconds"])),
            "tiers": {t: tiers[t] for t in (*TIERS, "fast") if t in tiers},
        }

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        table = self.table()
        write = terminalreporter.write_line
        terminalreporter.section("wall seconds per tier")
        for tier, row in table["tiers"].items():
            write(f"{tier:<12} {row['tests']:>5} tests {row['seconds']:>9.1f} s")
        total = sum(row["seconds"] for row in table["tiers"].values())
        write(f"{'tests':<12} {len(self.seconds):>5} tests {total:>9.1f} s")
        write(f"{'session':<12} {'':>11} {table['wall_s']:>9.1f} s (collection included)")
        terminalreporter.section("wall seconds per module")
        for module, row in table["modules"].items():
            write(f"{row['seconds']:>9.1f} s {row['tests']:>5}  {module}")
        path = config.getoption("profile_json")
        if path:
            write(f"written to {save(table, Path(path))}")


def save(table: dict[str, Any], path: Path) -> Path:
    """Write ``table`` to ``path``, keeping the modules this run did not measure from the file
    already there (a run of one tier updates that tier's modules only)."""
    try:
        modules = dict(json.loads(path.read_text()).get("modules", {}))
    except (OSError, ValueError, AttributeError):
        modules = {}
    modules.update(
        {
            m: {"tests": r["tests"], "seconds": round(r["seconds"], 1)}
            for m, r in table["modules"].items()
        }
    )
    merged = {
        "wall_s": round(table["wall_s"], 1),
        "tiers": {
            t: {"tests": r["tests"], "seconds": round(r["seconds"], 1)}
            for t, r in table["tiers"].items()
        },
        "modules": dict(sorted(modules.items(), key=lambda kv: -kv[1]["seconds"])),
    }
    path.write_text(json.dumps(merged, indent=1) + "\n")
    return path


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller sums the reports
        return
    if config.getoption("profile_tiers") or config.getoption("profile_json"):
        config.pluginmanager.register(Profile(), "trainyard-profile")
