"""A first validation suite drafted from a sample's profile (``trainyard init-domain``).

The suite has the shipped suites' format (``expectations/*.json``): the column set and the day's
row count, then per column its type, its missing share, and its values (a range, a value set or
string lengths), the key's uniqueness and the label's rules for its task. Every rule's
``meta.why`` gives the sample's figure and the margin added to it (:class:`Margins`; their
defaults are measured on real data in docs/benchmarks.md, "Drafted suites").
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import date, timedelta
from typing import Any, Literal

import pyarrow as pa

from pipeline_steps.core.settings import ValidationSettings
from pipeline_steps.core.tasks import task_spec
from pipeline_steps.domain.event_times import days_of
from pipeline_steps.quality.open_sets import KNOWN_VALUES, Arrivals, arrivals, is_open
from pipeline_steps.quality.sample_profile import COUNT_LIMIT, ColumnProfile, Roles, SampleProfile
from pipeline_steps.quality.suites import KNOWN_MIN, PRESENT_MIN


@dataclass(frozen=True, kw_only=True, slots=True)
class Margins:
    """How far a drafted rule reaches beyond what the sample shows."""

    range_widen: float = 3.0
    """Numeric ranges (and string lengths) are widened on each side by this multiple of the
    larger of the sample's span and the bound's own size, keeping the sign: a column never
    negative in the sample is bounded below by 0. At 3 a positive column may reach four times its
    sample maximum: a month of counts shows their body, not their tail, while a unit error (x100,
    x1000) or a sentinel lands far beyond."""
    null_factor: float = 3.0
    """Highest missing share of a column, as a multiple of the sample's (plus ``null_floor``),
    for the key and the time column (never missing in the sample: never missing); for other
    columns the multiple of the trailing days' share, drafted into
    ``validation.null_share_factor``."""
    null_floor: float = 0.1
    """Missing share tolerated above ``null_factor`` times the sample's (or the trailing days',
    ``validation.null_share_floor``): a small day with a few more gaps than usual is
    ordinary."""
    null_noise: float = 3.0
    """Standard deviations of a day's chance variation in a missing share (binomial in the
    day's rows) tolerated beyond ``null_factor``/``null_floor``: drafted into
    ``validation.share_noise``."""
    unseen_factor: float = 3.0
    """Share of a day's rows a value set lets through with values the sample lacks, as a multiple
    of the sample's own share of values seen once (the Good-Turing estimate of how often an unseen
    value turns up), plus ``unseen_floor``. A sample where every value repeats gives a closed
    set."""
    unseen_floor: float = 0.25
    """Unseen-value share tolerated above ``unseen_factor`` times the sample's estimate: a small
    day whose bookings come through a few new agents is ordinary."""
    open_set_severity: Literal["critical", "warning"] = "warning"
    """Severity of the value set of an open vocabulary (values seen once in the sample: agents,
    companies, countries). How fast such a vocabulary grows over a year a sample cannot show;
    ``warning`` reports a day full of new values and lets the run go on."""
    category_limit: int = COUNT_LIMIT
    """Strings with at most this many distinct values (each seen twice on average) get a value
    set and are categorical features; others (identifiers, free text) get a length range. A
    profile counts values up to its own limit (``profile_sample``), 100 by default."""
    row_count_noise: float = 3.0
    """Standard deviations of a day's chance variation around its trailing mean (the mean's
    square root, as for a Poisson count) allowed beyond the ratio bounds: drafted into
    ``validation.row_count_noise``. A domain of a few rows a day varies by more than any ratio
    a month shows."""
    row_count_widen: float = 1.0
    """The sample's lowest and highest ratio of a day's row count to its trailing mean are
    widened by this share (low divided by 1 + it, high multiplied by 1 + it) into
    ``validation.row_count_low`` and ``row_count_high``, never inside the defaults."""

    def __post_init__(self) -> None:
        for name in (
            "range_widen",
            "null_factor",
            "null_floor",
            "unseen_factor",
            "unseen_floor",
            "row_count_noise",
            "null_noise",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"margin {name} must not be negative")
        if self.category_limit < 2:
            raise ValueError("margin category_limit must be at least 2")


NATURAL_RANGES = {
    "month": (1, 12),
    "day": (1, 31),
    "hour": (0, 23),
    "minute": (0, 59),
    "weekday": (0, 6),
}
"""The ranges of the parts of a time (a year keeps only its lower bound, as an encoding of the
time)."""
PHYSICAL_RANGES: dict[str, tuple[re.Pattern[str], tuple[float, float]]] = {
    "latitude": (re.compile(r"(^|_)lat$|latitude"), (-90, 90)),
    "longitude": (re.compile(r"(^|_)(lon|lng|long)$|longitude"), (-180, 180)),
    "hour": (re.compile(r"(^|_)(hour|hr)$|hour_of_day"), (0, 23)),
    "minute": (re.compile(r"(^|_)minute$"), (0, 59)),
    "month": (re.compile(r"(^|_)month$|month_of_year"), (1, 12)),
}
"""Quantities known by a column's name (in lower case), with their physical ranges: such a
column's drafted range never reaches beyond it and crosses zero where the widening reaches it
(a sample of western longitudes allowed -370..0 and refused a real point east of 0°; an hour
column 0..92)."""
MIN_ROW_COUNT_LOW = 0.05
"""The least lower bound drafted: a day of a twentieth of its trailing mean is always refused."""
FAR_FROM_ZERO_SHARE = 0.01
"""The share of its bound by which a range that lies far from zero is widened at least (times
``Margins.range_widen``)."""
MAX_TRAILING_DAYS = 90
"""The longest trailing window drafted for a source with few days that have rows."""


# -- the suite -------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class RowCounts:
    """``validation.row_count_low`` and ``row_count_high`` drafted from the sample's days."""

    low: float
    high: float
    ratios: tuple[float, float] | None
    """The lowest and highest ratio of a sample day's rows to its trailing mean; None when the
    sample has too few days to judge one."""
    noise: float = 0.0
    """``validation.row_count_noise``: standard deviations of chance around the mean."""
    trailing_days: int = ValidationSettings().trailing_days
    """``validation.trailing_days``: long enough to hold, at the sample's share of days with
    rows, as many days with rows as the default window of a source with rows every day."""
    days_with_rows: tuple[int, int] = (0, 0)
    """The sample's days with rows, and the days it spans."""


def trailing_window(days: Mapping[date, int]) -> tuple[int, tuple[int, int]]:
    """``validation.trailing_days`` for a source whose sample has rows on ``days``: the default
    window (14 days) divided by the share of the sample's days that have rows, at most
    ``MAX_TRAILING_DAYS``. A source of sessions or sparse days (MovieLens: 13 of 31 days) then
    judges a day against as many days with rows as a daily source does, not against the two or
    three that happen to fall in 14 days; the days with rows and the days spanned come back
    with it."""
    default = ValidationSettings().trailing_days
    dated = sorted(day for day, count in days.items() if count > 0)
    if not dated:
        return default, (0, 0)
    spanned = (dated[-1] - dated[0]).days + 1
    share = len(dated) / spanned
    return min(MAX_TRAILING_DAYS, max(default, math.ceil(default / share))), (len(dated), spanned)


def row_counts(
    days: Mapping[date, int], margins: Margins | None = None, min_history: int = 3
) -> RowCounts:
    """Bounds on a day's row count as multiples of its trailing mean, as the validate step
    judges it: against the days with rows in the trailing days before it (``trailing_window``; a day
    without rows is skipped, never validated), once ``min_history`` of them exist: the sample's
    lowest and highest ratio, widened by ``Margins.row_count_widen``, never inside the defaults,
    the lower bound above 0. At run time ``Margins.row_count_noise`` standard deviations of
    chance (the mean's square root) widen them further: a day of a few rows varies by more
    than a month's ratios show."""
    margins = margins or Margins()
    settings = ValidationSettings()
    floor, ceiling = settings.row_count_low, settings.row_count_high
    window, with_rows = trailing_window(days)
    dated = sorted((day, count) for day, count in days.items() if count > 0)
    ratios = []
    for day, count in dated:
        start = day - timedelta(days=window)
        trailing = [n for d, n in dated if start <= d < day]
        if len(trailing) < min_history:
            continue
        mean = sum(trailing) / len(trailing)
        ratios.append(count / mean)
    drafted = RowCounts(
        low=floor,
        high=ceiling,
        ratios=None,
        noise=margins.row_count_noise,
        trailing_days=window,
        days_with_rows=with_rows,
    )
    if not ratios:
        return drafted
    widen_by = 1 + margins.row_count_widen
    return replace(
        drafted,
        low=max(MIN_ROW_COUNT_LOW, min(floor, _round_down(min(ratios) / widen_by, 2))),
        high=max(ceiling, math.ceil(max(ratios) * widen_by * 10) / 10),
        ratios=(min(ratios), max(ratios)),
    )


def draft_suite(
    name: str,
    profile: SampleProfile,
    roles: Roles,
    margins: Margins | None = None,
    min_history: int = 3,
) -> dict[str, Any]:
    """The suite of dataset ``name`` drafted from the sample, as the JSON document that
    ``load_suite`` reads (``min_history`` as for :func:`row_counts`)."""
    margins = margins or Margins()
    bounds = row_counts(roles.days, margins, min_history)
    day_rows = list(roles.days.values())
    noun = f"the sample ({profile.rows} rows, {len(roles.days)} days)"
    seen = (
        f"{bounds.ratios[0]:.2f}..{bounds.ratios[1]:.2f} times the mean of its trailing days"
        if bounds.ratios
        else "too few days to compare with their trailing mean"
    )
    expectations: list[dict[str, Any]] = [
        _rule(
            "expect_table_columns_to_match_set",
            {"column_set": profile.names, "exact_match": True},
            f"inferred from {noun}: its {len(profile.names)} columns, no more, no fewer",
        ),
        _rule(
            "expect_table_row_count_to_be_between",
            {
                "min_value": {"$PARAMETER": "row_count_min"},
                "max_value": {"$PARAMETER": "row_count_max"},
            },
            f"inferred from {noun}: a day holds {min(day_rows)}..{max(day_rows)} rows, {seen}; "
            "a day may hold validation.row_count_low..row_count_high times its trailing mean, "
            f"{bounds.low:g}..{bounds.high:g} in settings.yaml (the sample's ratios widened by "
            f"{margins.row_count_widen:.0%})",
        ),
    ]
    types = pandas_types(profile)
    days = _row_days(profile, roles)
    gapless = len(roles.days) == (roles.last_day - roles.first_day).days + 1
    for column in profile.columns:
        found = (
            arrivals(profile.table.column(column.name), days, gapless=gapless)
            if days is not None and column.categorical(margins.category_limit)
            else None
        )
        expectations += _column_rules(column, roles, margins, types[column.name], noun, found)
    if roles.key_columns:
        expectations.append(
            _rule(
                "expect_compound_columns_to_be_unique",
                {"column_list": list(roles.key_columns)},
                f"inferred from {noun}: the key {roles.key} is {' and '.join(roles.key_columns)} "
                f"together, no pair repeated in its {profile.rows} rows",
            )
        )
    else:
        expectations.append(
            _rule(
                "expect_column_values_to_be_unique",
                {"column": roles.key},
                f"inferred from {noun}: the key, no value repeated in its {profile.rows} rows",
            )
        )
    notes = (
        f"Drafted by trainyard init-domain from {profile.path}: {profile.rows} rows, "
        f"{roles.first_day}..{roles.last_day}. Each rule is the sample's figure plus a margin "
        "(meta.why); review them before trusting a verdict."
    )
    return {"name": name, "meta": {"notes": notes}, "expectations": expectations}


def pandas_types(profile: SampleProfile) -> dict[str, str]:
    """The pandas dtype of each column's present values as the suites see them (``as_frame``):
    an integer column with missing values turns float64 on a day it has some."""
    from pipeline_steps.quality.suites import as_frame

    types = {}
    for name, values in zip(profile.table.column_names, profile.table.columns, strict=True):
        frame = as_frame(pa.table([values.drop_null()], names=[name]))
        types[name] = str(frame.dtypes.iloc[0])
    return types


def _row_days(profile: SampleProfile, roles: Roles) -> pa.ChunkedArray | None:
    """Each sample row's day, as ingest counts it; None where the time column does not read
    as one."""
    try:
        return days_of(profile.table.column(roles.time_column), roles.date_format, roles.time_zone)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        return None


def _column_rules(
    column: ColumnProfile,
    roles: Roles,
    margins: Margins,
    pandas_type: str,
    noun: str,
    found: Arrivals | None = None,
) -> list[dict[str, Any]]:
    """The rules of one column: its type, its missing share, its values (``found``: how a
    category's values arrived over the sample's days)."""
    name = column.name
    if column.kind == "empty":
        return [
            _rule(
                "expect_column_values_to_be_null",
                {"column": name, "mostly": _round_down(1 - margins.null_floor)},
                f"inferred from {noun}: always missing there, and left out of the model; a "
                f"day may fill {_share(margins.null_floor)} of its rows. A warning beyond: a "
                "source that starts to fill a field (a new form, a new system) has changed, "
                "not broken; make it a feature only if it is known when the model predicts "
                "(a citation issued at the end of a stop is not)",
                severity="warning",
            )
        ]
    role = _role(name, roles)
    key_columns = [c for c in roles.key_columns if c != name] or [roles.key]
    rules: list[dict[str, Any]] = []
    type_list = _type_list(column, pandas_type)
    if type_list:
        why = f"inferred from {noun}: {column.kind} values"
        if column.kind == "integer" and pa.types.is_floating(column.storage):
            why += " with gaps, stored as floats (a CSV writes them 11.0)"
        elif column.kind == "integer" and "float64" in type_list:
            why += "; pandas holds integers with missing values as float64"
        rules.append(
            _rule(
                "expect_column_values_to_be_in_type_list",
                {"column": name, "type_list": type_list},
                why,
            )
        )
    keyed = name in (roles.key, roles.time_column, *roles.key_columns)
    rules.append(
        _null_rule(column, margins, noun, role) if keyed else _present_rule(column, noun, role)
    )
    if column.kind == "integer" and (column.missing or pa.types.is_floating(column.storage)):
        rules.append(
            _rule(
                "expect_rows_to_satisfy",
                {
                    "column_list": [name, *key_columns],
                    "condition": f"`{name}` == `{name}`.round()",
                    "ignore_row_if": "any_value_is_missing",
                },
                f"inferred from {noun}: whole numbers, though held as floats (the key "
                f"{', '.join(key_columns)} names the row)",
            )
        )
    if name == roles.label and _classified(roles):
        rules.append(_label_set(column, roles, noun))
    elif name == roles.time_column and roles.date_format:
        pass  # epoch numbers or text in its own format: the file source reads each row's day
    elif name == roles.time_column:
        rules.append(
            _rule(
                "expect_column_values_to_not_be_after",
                {"column": name, "latest": {"$PARAMETER": "ingested_at"}},
                f"inferred from {noun}: the row's time, {roles.first_day}..{roles.last_day} in "
                "the sample; nothing is dated after its ingest",
            )
        )
    elif column.numeric and name != roles.key and name not in roles.identifiers:
        rules.append(_range_rule(column, roles, margins, noun, role))
    elif column.categorical(margins.category_limit) and is_open(found, column.distinct):
        assert found is not None
        rules += _open_set_rules(column, margins, noun, found)
    elif column.categorical(margins.category_limit):
        rules.append(_set_rule(column, margins, noun))
    elif column.kind == "string":
        rules.append(_length_rule(column, margins, noun))
    return rules


def _role(name: str, roles: Roles) -> str:
    if name == roles.label:
        return f"the label ({roles.task}), "
    if name == roles.key or name in roles.key_columns:
        return "the key, " if name == roles.key else f"part of the key {roles.key}, "
    if name in roles.identifiers:
        return "an identifier (no range: its numbers have no order), "
    return ""


def _type_list(column: ColumnProfile, pandas_type: str) -> list[str]:
    if column.kind == "date":
        return ["date"]  # pandas holds dates as Python objects; GX checks each value's type
    if pandas_type in ("object", "string") or "," in pandas_type:
        return []  # strings and zoned timestamps: GX 1.x cannot name their pandas dtype
    if pandas_type == "int64" and column.missing:
        return ["int64", "float64"]
    if pandas_type == "bool" and column.missing:
        return ["bool", "object"]
    return [pandas_type]


def _null_rule(column: ColumnProfile, margins: Margins, noun: str, role: str) -> dict[str, Any]:
    name, share = column.name, column.missing_share
    if share == 0:
        return _rule(
            "expect_column_values_to_not_be_null",
            {"column": name},
            f"inferred from {noun}: {role}never missing there",
        )
    allowed = min(margins.null_factor * share + margins.null_floor, (1 + share) / 2)
    return _rule(
        "expect_column_values_to_not_be_null",
        {"column": name, "mostly": _round_down(1 - allowed)},
        f"inferred from {noun}: {role}missing in {_share(share)} of its rows; a day may miss "
        f"{_share(allowed)} ({margins.null_factor:g} x {_share(share)} + "
        f"{_share(margins.null_floor)}, at most halfway to all)",
    )


def _present_rule(column: ColumnProfile, noun: str, role: str) -> dict[str, Any]:
    """The least share of values present, bounded at run time by the trailing days' missing
    share and the day's size (``validation.null_share_*``; open before the history exists)."""
    name, share = column.name, column.missing_share
    return _rule(
        "expect_column_values_to_not_be_null",
        {"column": name, "mostly": {"$PARAMETER": f"{name}{PRESENT_MIN}"}},
        f"inferred from {noun}: {role}missing in {_share(share)} of its rows; a day may miss "
        "validation.null_share_factor x its trailing days' share + null_share_floor, plus "
        "share_noise standard deviations of the share a day of its size shows by chance "
        "(at most halfway to all): a day of a few rows misses a value in a large share. "
        "Judged once the lake holds 3 trailing days",
    )


def _range_rule(
    column: ColumnProfile, roles: Roles, margins: Margins, noun: str, role: str
) -> dict[str, Any]:
    seen = f"inferred from {noun}: {role}values {_number(column.low)}..{_number(column.high)}"
    low, high = widen(column, margins.range_widen)
    kwargs: dict[str, Any] = {"column": column.name, "min_value": low, "max_value": high}
    natural = NATURAL_RANGES.get(roles.calendar.get(column.name, ""))
    if natural is not None:
        low, high = natural
        if column.name in roles.calendar and roles.calendar[column.name] == "weekday":
            low, high = (1, 7) if (column.low or 0) >= 1 else (0, 6)
        return _rule(
            "expect_column_values_to_be_between",
            {"column": column.name, "min_value": low, "max_value": high},
            f"{seen}: the {roles.calendar[column.name]} of {roles.time_column}, so its natural "
            f"range {low}..{high}",
        )
    quantity = physical_quantity(column)
    if quantity is not None:
        floor, ceiling = PHYSICAL_RANGES[quantity][1]
        low, high = widen(column, margins.range_widen, keep_sign=False)
        low, high = max(low, floor), min(high, ceiling)
        return _rule(
            "expect_column_values_to_be_between",
            {"column": column.name, "min_value": low, "max_value": high},
            f"{seen}; allowed {_number(low)}..{_number(high)}: a {quantity} by its name, widened "
            f"by {margins.range_widen:g} x the larger of the span and {_scale_of(column)}, "
            f"across zero where it reaches it, within its physical range {_number(floor)}.."
            f"{_number(ceiling)}",
        )
    if column.name in roles.time_encodings:
        # Later days lie beyond the sample's range by design: only the lower bound holds, as
        # wide as a column near zero's (a day number may start again at 1).
        kwargs["min_value"] = low = widen(column, margins.range_widen, whole=True)[0]
        del kwargs["max_value"]
        return _rule(
            "expect_column_values_to_be_between",
            kwargs,
            f"{seen}: it follows {roles.time_column} linearly (an encoding of the time), so "
            f"later days exceed it; only the lower bound holds, {_number(low)} (widened by "
            f"{margins.range_widen:g} x the larger of the span and the bound, the sign kept)",
        )
    if column.low == column.high == 0:
        # A column always 0 shows no scale to widen by: only its sign is bound.
        del kwargs["max_value"]
        return _rule(
            "expect_column_values_to_be_between",
            kwargs,
            f"{seen}: always 0 there, so only its sign is bound (never negative)",
        )
    return _rule(
        "expect_column_values_to_be_between",
        kwargs,
        f"{seen}; allowed {_number(low)}..{_number(high)} (widened by {margins.range_widen:g} x "
        f"the larger of the span and {_scale_of(column)}, the sign kept)",
    )


def physical_quantity(column: ColumnProfile) -> str | None:
    """The quantity a numeric column holds by its name (``PHYSICAL_RANGES``), when the sample's
    values lie in its physical range; None otherwise (an ``hour`` of HHMM clock times)."""
    if column.low is None or column.high is None:
        return None
    for quantity, (pattern, (low, high)) in PHYSICAL_RANGES.items():
        if pattern.search(column.name.lower()) and low <= column.low and column.high <= high:
            return quantity
    return None


def _scale_of(column: ColumnProfile) -> str:
    """What a value range is widened by besides its span (``widen``), in words."""
    assert column.low is not None and column.high is not None
    span = column.high - column.low
    if column.low > span or -column.high > span:
        return f"{FAR_FROM_ZERO_SHARE:g} x the bound, as its values lie far from zero"
    return "the bound"


def _set_rule(column: ColumnProfile, margins: Margins, noun: str) -> dict[str, Any]:
    once = sum(1 for n in column.counts.values() if n == 1)
    name = column.name
    kwargs: dict[str, Any] = {
        "column": name,
        "value_set": _sorted(column.counts),
        "mostly": {"$PARAMETER": f"{name}{KNOWN_MIN}"},
    }
    why = f"inferred from {noun}: its {column.distinct} values"
    if once:
        # the Good-Turing estimate of how often a value the sample lacks turns up
        unseen = once / column.present
        why += f"; {once} seen once ({_share(unseen)} of rows), an open vocabulary"
    else:
        # every value repeats, yet a value rarer than 3 in the sample's rows (the rule of
        # three) may still be missing from it: a month of a few rows a day misses rare ones
        unseen = 3 / column.present
        why += (
            f", each seen at least {min(column.counts.values())} times: a closed set, though "
            f"values rarer than 3 in its {column.present} rows ({_share(unseen)}) may be missing"
        )
    allowed = min(margins.unseen_factor * unseen + margins.unseen_floor, 0.5)
    why += (
        f": a day may hold others in {_share(allowed)} of its rows ({margins.unseen_factor:g} x "
        f"{_share(unseen)} + {_share(margins.unseen_floor)}, at most half), plus "
        "validation.share_noise standard deviations of the share a day of its size shows by "
        "chance"
    )
    severity = "critical"
    if once and margins.open_set_severity == "warning":
        why += "; a warning, as a sample cannot show how fast new values come"
        severity = "warning"
    rule = _rule("expect_column_values_to_be_in_set", kwargs, why, severity)
    rule["meta"]["by_size"] = {
        "rate": round(min(margins.unseen_factor * unseen, 1.0), 6),
        "allowed": round(allowed, 6),
        "present": round(1 - column.missing_share, 6),
    }
    return rule


def _open_set_rules(
    column: ColumnProfile, margins: Margins, noun: str, found: Arrivals
) -> list[dict[str, Any]]:
    """An open set's rules (:mod:`pipeline_steps.quality.open_sets`): a day's values must lie
    in the sample's or the trailing days' (``<column>_known_values``). A share of new values
    beyond ``unseen_factor`` times the worst the sample's second-half days showed (each against
    the days before it) plus ``unseen_floor`` fails; any new value warns. Where that share
    reaches every row (days made only of new names), the set only warns."""
    name = column.name
    known = {"$PARAMETER": f"{name}{KNOWN_VALUES}"}
    allowed = margins.unseen_factor * found.worst + margins.unseen_floor
    why = (
        f"inferred from {noun}: its {column.distinct} values are names that keep coming "
        f"({found.growth:.0%} of them first seen in the second half of its days; there a day "
        f"held {_share(found.turnover)} new values on average, at most {_share(found.worst)}); "
        "a day's values are judged against the sample's and those of the trailing validated "
        "days"
    )
    meta = {"open_set": _sorted(column.counts)}
    warn = _rule(
        "expect_column_values_to_be_in_set",
        {"column": name, "value_set": known},
        f"{why}: a value none of them holds warns",
        "warning",
    )
    warn["meta"] |= meta
    if allowed >= 1 or not found.gapless:
        warn["meta"]["why"] += (
            "; no share of new values fails, as the sample had days of new values alone"
            if found.gapless
            else "; no share of new values fails, as the sample has days without rows: after a "
            "quiet spell a day may bring only new names (a season's first storm)"
        )
        return [warn]
    fail = _rule(
        "expect_column_values_to_be_in_set",
        {"column": name, "value_set": known, "mostly": {"$PARAMETER": f"{name}{KNOWN_MIN}"}},
        f"{why}: new values in more than {_share(allowed)} of a day's rows "
        f"({margins.unseen_factor:g} x {_share(found.worst)} + {_share(margins.unseen_floor)}) "
        "fail, plus validation.share_noise standard deviations of the share a day of its size "
        "shows by chance",
    )
    fail["meta"] |= meta | {
        "by_size": {
            "rate": round(min(margins.unseen_factor * found.turnover, 1.0), 6),
            "allowed": round(allowed, 6),
            "present": round(1 - column.missing_share, 6),
        }
    }
    return [fail, warn]


def _classified(roles: Roles) -> bool:
    """The label takes a fixed set of values: 0/1 or named classes."""
    spec = task_spec(roles.task)
    return spec.counts_positives or spec.has_classes


def _label_set(column: ColumnProfile, roles: Roles, noun: str) -> dict[str, Any]:
    total = sum(column.counts.values())
    shares = ", ".join(f"{v!r} {_share(n / total)}" for v, n in column.counts.items())
    why = f"inferred from {noun}: the label ({roles.task}), its values only ({shares})"
    values = _sorted(column.counts)
    if task_spec(roles.task).counts_positives:
        why += f"; {roles.positive!r} counts as 1"
    else:
        seen = {str(v) for v in column.counts}
        declared = [_as_kind(c, column.kind) for c in roles.classes if c not in seen]
        if declared:
            why += f", and {', '.join(map(repr, declared))} declared by --classes"
            values = _sorted(dict.fromkeys([*values, *declared], 0))
        why += "; a new class needs a new model"
    rule = _rule(
        "expect_column_values_to_be_in_set", {"column": column.name, "value_set": values}, why
    )
    if not task_spec(roles.task).counts_positives:
        rule["meta"]["on_failure"] = (
            f"a class of {column.name} the model does not know: add it to CLASSES in the "
            "domain's domain.py and to this rule's value_set (a new class needs a new model), "
            "then validate the day again"
        )
    return rule


def _as_kind(text: str, kind: str) -> Any:
    """A class named on the command line as the label column holds its values."""
    try:
        if kind == "integer":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError:
        return text
    return text


def _length_rule(column: ColumnProfile, margins: Margins, noun: str) -> dict[str, Any]:
    low, high = widen(column, margins.range_widen, whole=True)
    return _rule(
        "expect_column_value_lengths_to_be_between",
        {"column": column.name, "min_value": int(low), "max_value": int(high)},
        f"inferred from {noun}: {column.distinct} distinct strings (too many for a set) of "
        f"{_number(column.low)}..{_number(column.high)} characters; allowed "
        f"{_number(low)}..{_number(high)} (widened by {margins.range_widen:g} x the larger of "
        "the span and the bound)",
    )


def _rule(
    kind: str, kwargs: dict[str, Any], why: str, severity: str = "critical"
) -> dict[str, Any]:
    """One entry of the suite file; ``severity`` written only when it is not the default."""
    entry: dict[str, Any] = {"type": kind, "kwargs": kwargs}
    if severity != "critical":
        entry["severity"] = severity
    return {**entry, "meta": {"why": why}}


def widen(
    column: ColumnProfile, factor: float, whole: bool = False, keep_sign: bool = True
) -> tuple[float, float]:
    """The column's range (values, or lengths of strings and encodings of the time:
    ``whole``) widened on each side by ``factor``
    times the larger of the span and the bound's size; a bound never crosses zero when the
    sample's values did not. Values that lie further from zero than they spread (years,
    latitudes, temperatures in kelvin) are widened by the larger of the span and a hundredth
    of the bound instead: a year of 1937..1996 allows 1760..2173, a city's latitudes of
    44.89..45.05 allow 43.5..46.4, so that years in centuries and a day's stops 200 km away
    are refused. Whole bounds for integers, else three significant digits,
    both rounded outward. ``keep_sign=False`` lets a bound cross zero (a longitude, a
    latitude)."""
    assert column.low is not None and column.high is not None, "a range needs values"
    low, high = column.low, column.high
    span = high - low
    far = not whole and (low > span or -high > span)  # as _scale_of says
    share = FAR_FROM_ZERO_SHARE if far else 1.0
    wide_low = low - factor * max(span, share * abs(low))
    wide_high = high + factor * max(span, share * abs(high))
    if keep_sign and low >= 0:
        wide_low = max(wide_low, 0.0)
    if keep_sign and high <= 0:
        wide_high = min(wide_high, 0.0)
    if whole or column.kind == "integer":
        return math.floor(wide_low), math.ceil(wide_high)
    return _round_outward(wide_low, down=True), _round_outward(wide_high, down=False)


def _round_outward(value: float, *, down: bool) -> float:
    if value == 0:
        return 0.0
    scale = 10 ** (math.floor(math.log10(abs(value))) - 2)
    rounded = (math.floor if down else math.ceil)(value / scale) * scale
    return float(f"{rounded:.12g}")


def _round_down(value: float, digits: int = 4) -> float:
    scale = 10**digits
    return math.floor(max(value, 0.0) * scale) / scale


def _sorted(counts: Mapping[Any, int]) -> list[Any]:
    return sorted(counts, key=lambda v: (type(v).__name__, v))


def _share(value: float) -> str:
    return f"{value:.1%}"


def _number(value: float | None) -> str:
    if value is None:
        return "none"
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
