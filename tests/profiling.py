"""Where the suite's time goes: ``pytest --profile-tiers`` prints wall seconds per test module and
per tier at the end of the run (``make test-profile``), and ``--profile-json FILE`` writes them.

Beside each module's wall seconds, its CPU seconds: the test process's own and those of the
processes it started and waited for (steps, ranks, services it stopped). On a machine with
fewer cores than workers, wall seconds grow with whatever else runs; CPU seconds say what a
module costs the suite. Containers' CPU is not counted (the engine's processes are not the
test's children), nor that of processes nobody waits for (a Spark worker's executors): the
session's line ``machine`` is every core's busy time while the suite ran, every process
included, which is what the run's wall time on so many cores comes from.

A test's time is its set-up, call and tear-down, so a session fixture's cost lands on the first
test that asks for it, where it is paid. Each test counts in one tier, its heaviest marker:
``containers`` over ``services`` over ``spark`` over ``gpu`` over ``slow``, and ``fast`` for the
rest (what ``make test-fast`` runs). The module and tier sums add up to the tests' total; the
difference to the session's wall time is collection and the terminal's own work.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TIERS = ("containers", "services", "spark", "gpu", "slow")
"""The tiers, heaviest first; a test with none of these markers is in ``fast``."""
CPU_KEY = "cpu_s"
"""The user property by which a test report carries its phase's CPU seconds."""
_PHASE_CPU = pytest.StashKey[float]()
PROC_STAT = Path("/proc/stat")
"""Linux's counters of the time every core spent in each state since the machine started."""


def cpu_seconds() -> float:
    """User and system CPU seconds of this process and of its children that were waited for."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def machine_cpu_seconds(stat: Path = PROC_STAT) -> float | None:
    """Busy CPU seconds of the whole machine since it started, every process counted (user,
    nice, system, irq and softirq time of all cores, from ``/proc/stat``); ``None`` where the
    file is missing or not of that form."""
    try:
        fields = stat.read_text().split("\n", 1)[0].split()
        user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[1:8])
    except (OSError, ValueError):
        return None
    if fields[0] != "cpu":
        return None
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


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
        self.machine_started = machine_cpu_seconds()
        self.tiers: dict[str, str] = {}
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.outcomes: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # under pytest-xdist the reports come from the workers, with the markers in keywords
        self.tiers.setdefault(report.nodeid, tier_of(report.keywords))
        self.seconds[report.nodeid] += report.duration
        self.cpu[report.nodeid] += sum(v for k, v in report.user_properties if k == CPU_KEY)
        if report.when == "call" or report.outcome != "passed":
            self.outcomes[report.nodeid] = report.outcome

    def table(self) -> dict[str, Any]:
        """``{"wall_s", "machine_cpu_s", "modules": {path: row}, "tiers": {tier: row}}``; a
        row holds ``tests``, ``seconds`` (wall) and ``cpu_s``; ``machine_cpu_s`` is the
        machine's busy CPU seconds since the session started (``None`` off Linux)."""

        def row() -> dict[str, float]:
            return {"tests": 0, "seconds": 0.0, CPU_KEY: 0.0}

        modules: dict[str, dict[str, float]] = defaultdict(row)
        tiers: dict[str, dict[str, float]] = defaultdict(row)
        for nodeid, seconds in self.seconds.items():
            module = nodeid.split("::", 1)[0]  # xdist's loadgroup appends @group to the id
            tier = self.tiers.get(nodeid, "fast")
            for counted in (modules[module], tiers[tier]):
                counted["tests"] += 1
                counted["seconds"] += seconds
                counted[CPU_KEY] += self.cpu.get(nodeid, 0.0)
        now, then = machine_cpu_seconds(), self.machine_started
        machine = None if now is None or then is None else now - then
        return {
            "wall_s": time.monotonic() - self.started,
            "machine_cpu_s": machine,
            "modules": dict(sorted(modules.items(), key=lambda kv: -kv[1]["seconds"])),
            "tiers": {t: tiers[t] for t in (*TIERS, "fast") if t in tiers},
        }

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        table = self.table()
        write = terminalreporter.write_line
        terminalreporter.section("wall and CPU seconds per tier")
        for tier, row in table["tiers"].items():
            seconds, cpu = row["seconds"], row[CPU_KEY]
            write(f"{tier:<12} {row['tests']:>5} tests {seconds:>9.1f} s {cpu:>9.1f} cpu")
        total = sum(row["seconds"] for row in table["tiers"].values())
        cpu = sum(row[CPU_KEY] for row in table["tiers"].values())
        write(f"{'tests':<12} {len(self.seconds):>5} tests {total:>9.1f} s {cpu:>9.1f} cpu")
        write(f"{'session':<12} {'':>11} {table['wall_s']:>9.1f} s (collection included)")
        if (machine := table["machine_cpu_s"]) is not None:
            cores = machine / max(table["wall_s"], 1e-9)
            write(
                f"{'machine':<12} {'':>11} {'':>11} {machine:>9.1f} cpu, {cores:.2f} cores busy "
                "on average (every process: containers, executors no test waits for)"
            )
        terminalreporter.section("wall and CPU seconds per module")
        for module, row in table["modules"].items():
            write(f"{row['seconds']:>9.1f} s {row[CPU_KEY]:>9.1f} cpu {row['tests']:>5}  {module}")
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

    def rounded(row: dict[str, float]) -> dict[str, float]:
        return {"tests": row["tests"], **{k: round(row[k], 1) for k in ("seconds", CPU_KEY)}}

    modules.update({m: rounded(r) for m, r in table["modules"].items()})
    machine = table.get("machine_cpu_s")
    merged = {
        "wall_s": round(table["wall_s"], 1),
        **({"machine_cpu_s": round(machine, 1)} if machine is not None else {}),
        "tiers": {t: rounded(r) for t, r in table["tiers"].items()},
        "modules": dict(sorted(modules.items(), key=lambda kv: -kv[1]["seconds"])),
    }
    path.write_text(json.dumps(merged, indent=1) + "\n")
    return path


def _timed(item: pytest.Item) -> Iterator[None]:
    item.stash[_PHASE_CPU] = cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    yield from _timed(item)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield from _timed(item)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield from _timed(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    started = item.stash.get(_PHASE_CPU, None)
    if started is not None and profiling(item.config):
        report = outcome.get_result()
        report.user_properties.append((CPU_KEY, round(cpu_seconds() - started, 3)))


def profiling(config: pytest.Config) -> bool:
    return bool(config.getoption("profile_tiers") or config.getoption("profile_json"))


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller sums the reports
        return
    if profiling(config):
        config.pluginmanager.register(Profile(), "trainyard-profile")
