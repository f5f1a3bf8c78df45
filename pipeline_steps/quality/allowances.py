"""Allowances of the history checks, calibrated on real days (``trainyard calibrate``).

For each checked statistic (the mean and standard deviation of a numeric column, the distinct
count and top-value share of a categorical one) every day's value is compared with its trailing
``validation.trailing_days`` days as the validate step compares it
(:mod:`pipeline_steps.quality.history`): its deviation is the number of robust spreads it lies
from the trailing median. The warning allowance is the largest deviation of the days calibrated
on, rounded up (at least ``MIN_ALLOWANCE``), so none of them would have warned; the critical one
is ``CRITICAL_FACTOR`` times it. A statistic whose largest deviation is beyond
``MAX_ALLOWANCE`` (zero on most days, or constant then not) has no stable center to judge a day
by and is left out, with the reason. Calibrated on the first half of the days alone, the alarms
of the second half say how the allowances hold on days they did not see.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline_steps.core.settings import ValidationSettings
from pipeline_steps.quality.history import (
    STATISTICS,
    DayStatistics,
    Statistic,
    band,
    statistics_key,
)

MIN_ALLOWANCE = 5.0
"""The least warning allowance: a statistic constant over the days (a registry snapshot, three
airports every day) is judged by its floor, and five floors (10%) is news."""
CRITICAL_FACTOR = 1.5
MAX_ALLOWANCE = 100.0

WHY: dict[str, str] = {
    "mean": "the day's mean against the trailing days': a unit or scale changed upstream moves "
    "it while every value stays in range",
    "stdev": "the day's spread against the trailing days': a unit changed upstream rescales it",
    "distinct": "how many different values the day holds against the trailing days: a partial "
    "export or a code collapsed upstream shrinks it",
    "top_share": "the share of the most common value against the trailing days: one site's, "
    "one carrier's or one kind's rows alone push it up",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """A column's statistic to check, and whether it is judged on the log scale."""

    column: str
    statistic: Statistic
    log: bool


def candidates_for(schema: pa.Schema, columns: Iterable[str]) -> list[Candidate]:
    """Mean and spread of each numeric column, distinct values and top share of each string
    one (means on the log scale for now: :func:`settle_scales` decides from the days)."""
    found = []
    for name in columns:
        kind = schema.field(name).type
        if pa.types.is_integer(kind) or pa.types.is_floating(kind):
            found += [Candidate(column=name, statistic=s, log=True) for s in ("mean", "stdev")]
        elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
            found += [Candidate(column=name, statistic="distinct", log=True)]
            found += [Candidate(column=name, statistic="top_share", log=False)]
        else:
            raise ValueError(f"column {name!r} is {kind}: neither numeric nor a string")
    return found


def settle_scales(
    candidates: list[Candidate], days: Mapping[date, DayStatistics]
) -> list[Candidate]:
    """Means stay on the log scale only where every day's mean is positive."""
    settled = []
    for c in candidates:
        if c.statistic == "mean" and c.log:
            values = [d.get(statistics_key(c.column, "mean")) for d in days.values()]
            positive = all(v is None or v > 0 for v in values)
            c = Candidate(column=c.column, statistic=c.statistic, log=positive)
        settled.append(c)
    return settled


def deviations(
    candidate: Candidate,
    history: Mapping[date, DayStatistics],
    values: Mapping[date, DayStatistics],
    settings: ValidationSettings,
) -> dict[date, float]:
    """|deviation| of each day's value from the band of its trailing days in ``history``."""
    key = statistics_key(candidate.column, candidate.statistic)
    found: dict[date, float] = {}
    for day, stats in values.items():
        window = [
            history.get(day - timedelta(days=n)) for n in range(settings.trailing_days, 0, -1)
        ]
        trailing = [w.get(key) for w in window if w is not None]
        value = stats.get(key)
        if len([t for t in trailing if t is not None]) < settings.history_min_days:
            continue
        fitted = band(trailing, settings.history_floor, candidate.log)
        if fitted is not None and value is not None:
            found[day] = abs(fitted.deviation(value))
    return found


def allowance(largest: float) -> float:
    """The warning allowance for a largest deviation (infinite: none)."""
    if not math.isfinite(largest) or largest > MAX_ALLOWANCE:
        return math.inf
    return max(MIN_ALLOWANCE, float(math.ceil(largest * 1.05)))


@dataclass(kw_only=True)
class Calibrated:
    """One candidate's allowances, the deviation that set them, and the later half's alarms."""

    candidate: Candidate
    warning: float
    critical: float
    largest: float
    largest_day: date | None
    out_of_sample: list[date] = field(default_factory=list)
    """Days of the later half above the warning allowance the first half alone would set."""

    @property
    def judged(self) -> bool:
        return math.isfinite(self.warning)


def calibrate(
    days: Mapping[date, DayStatistics],
    candidates: list[Candidate],
    settings: ValidationSettings,
) -> list[Calibrated]:
    """Allowances per candidate from the days' statistics (see the module's docstring)."""
    ordered = sorted(days)
    middle = ordered[len(ordered) // 2] if ordered else None
    calibrated = []
    for candidate in candidates:
        seen = deviations(candidate, days, days, settings)
        largest_day = max(seen, key=seen.__getitem__) if seen else None
        largest = seen[largest_day] if largest_day else 0.0
        warning = allowance(largest)
        early = allowance(max((v for d, v in seen.items() if middle and d < middle), default=0))
        late = sorted(d for d, v in seen.items() if middle and d >= middle and v > early)
        calibrated.append(
            Calibrated(
                candidate=candidate,
                warning=warning,
                critical=warning * CRITICAL_FACTOR,
                largest=largest,
                largest_day=largest_day,
                out_of_sample=late,
            )
        )
    return calibrated


def history_expectations(calibrated: Iterable[Calibrated]) -> list[dict[str, Any]]:
    """The suite entries of the judged candidates: per check a warning and a critical one."""
    kinds = {s: k for k, s in STATISTICS.items()}
    entries = []
    for item in (i for i in calibrated if i.judged):
        c = item.candidate
        for severity, level, suffix in (
            ("warning", item.warning, "_usual"),
            ("critical", item.critical, ""),
        ):
            name = f"{c.column}_{c.statistic}{suffix}"
            history: dict[str, object] = {"allowance": int(level) if level.is_integer() else level}
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
                    "meta": {"why": WHY[c.statistic], "history": history},
                }
            )
    return entries


def rewrite_suite(path: Path, calibrated: list[Calibrated]) -> None:
    """Replace the suite file's history checks by ``calibrated`` ones (others untouched)."""
    suite = json.loads(path.read_text())
    kept = [e for e in suite["expectations"] if "history" not in (e.get("meta") or {})]
    suite["expectations"] = kept + history_expectations(calibrated)
    path.write_text(suite_json(suite))


def report(calibrated: list[Calibrated]) -> str:
    """Markdown: per candidate its scale, allowances, largest deviation and later alarms."""
    lines = [
        "| check | scale | warning | critical | largest deviation | later half over first |",
        "|---|---|---|---|---|---|",
    ]
    for item in calibrated:
        c = item.candidate
        when = item.largest_day.isoformat() if item.largest_day else "-"
        if not item.judged:
            lines.append(
                f"| {c.statistic} of `{c.column}` | - | left out | - | {item.largest:.3g} "
                f"({when}): no stable center | - |"
            )
            continue
        late = ", ".join(d.isoformat() for d in item.out_of_sample[:4])
        late += " …" if len(item.out_of_sample) > 4 else ""
        lines.append(
            f"| {c.statistic} of `{c.column}` | {'log' if c.log else 'linear'} | "
            f"{item.warning:g} | {item.critical:g} | {item.largest:.1f} ({when}) | "
            f"{len(item.out_of_sample)}{': ' + late if late else ''} |"
        )
    return "\n".join(lines)


def suite_json(suite: dict[str, Any]) -> str:
    """A suite as the files are written: two-space indents, lists of plain values on one line."""
    return _dump(suite, 0) + "\n"


def _dump(value: object, depth: int) -> str:
    flat = json.dumps(value, ensure_ascii=False)
    if not isinstance(value, dict | list):
        return flat
    children = value.values() if isinstance(value, dict) else value
    if isinstance(value, list) and not any(isinstance(v, dict | list) for v in children):
        return flat
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, list):
        return "[\n" + ",\n".join(inner + _dump(v, depth + 1) for v in value) + f"\n{pad}]"
    items = (f"{inner}{json.dumps(k)}: {_dump(v, depth + 1)}" for k, v in value.items())
    return "{\n" + ",\n".join(items) + f"\n{pad}}}"
