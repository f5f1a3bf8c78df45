"""A time column's values as points in time, and the day each row belongs to.

Exports date their rows in several ways: dates and times in ISO 8601 (with or without a zone,
or as parquet's own date and timestamp types), US-style dates such as ``6/23/1994 0:00:00``, and
epoch seconds or milliseconds, and dates written as whole numbers (``20130601``).
``ingest.date_format`` says which: empty for ISO and typed columns, ``epoch_s`` or ``epoch_ms``
for epoch numbers, or a ``strptime`` format (``%Y%m%d`` reads numbers by their digits). The file
source picks a day's rows with it, ``trainyard validate --path`` dates a file with it, and a
drafted domain turns the column into event times with it.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

EPOCH_UNITS = {"epoch_s": "s", "epoch_ms": "ms"}
"""``ingest.date_format`` values for epoch numbers, and their unit."""

EPOCH_RANGES = {"epoch_s": (1e8, 4.2e9), "epoch_ms": (1e11, 4.2e12)}
"""Values an epoch column holds, by unit: from 1973 to 2103."""

DIGIT_DATES = (1900_01_01, 2100_12_31)
"""Whole numbers that may be dates written as digits (``%Y%m%d``: 20130601)."""

TEXT_FORMATS = (
    "%m/%d/%Y %H:%M:%S",
    "%m/%d/%Y %H:%M",
    "%m/%d/%Y",
    "%d.%m.%Y %H:%M:%S",
    "%d.%m.%Y",
    "%Y/%m/%d %H:%M:%S",
    "%Y/%m/%d",
)
"""Formats of dates and times other than ISO 8601 that a draft recognises, in the order tried
(a date that reads as month/day and as day/month is taken as month/day)."""


def event_times(values: pa.Array | pa.ChunkedArray, date_format: str = "") -> pa.ChunkedArray:
    """The column as points in time (``timestamp[us]``, UTC where the values carry a zone or
    are epoch numbers), or dates for a date column. Raises ``pa.ArrowInvalid`` naming the
    first value ``date_format`` does not read."""
    values = values if isinstance(values, pa.ChunkedArray) else pa.chunked_array([values])
    if pa.types.is_null(values.type):  # no value at all (a day whose rows all lack the label)
        return pa.chunked_array([pa.nulls(len(values), pa.timestamp("us", "UTC"))])
    if date_format in EPOCH_UNITS:
        if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
            raise pa.ArrowInvalid(
                f"holds {values.type} values, not the epoch numbers of date_format {date_format}"
            )
        whole = pc.cast(values, pa.int64())
        unit = EPOCH_UNITS[date_format]
        return pc.cast(pc.cast(whole, pa.timestamp(unit, "UTC")), pa.timestamp("us", "UTC"))
    if pa.types.is_timestamp(values.type) or pa.types.is_date(values.type):
        return values
    if date_format and (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        # dates written as numbers (20130601 under %Y%m%d): read as their digits
        values = pc.cast(pc.cast(values, pa.int64()), pa.string())
    if date_format:
        try:
            return pc.strptime(values, format=date_format, unit="us")
        except pa.ArrowInvalid:
            bad = next(v for v in values.drop_null().to_pylist() if not _reads(v, date_format))
            raise pa.ArrowInvalid(f"holds {bad!r}, not a time of format {date_format}") from None
    for target in (pa.date32(), pa.timestamp("us"), pa.timestamp("us", "UTC")):
        try:
            return pc.cast(values, target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    first = values.drop_null()
    shown = repr(first[0].as_py()) if len(first) else "nothing"
    raise pa.ArrowInvalid(
        f"holds {shown}, not an ISO date or time; set ingest.date_format to its format "
        "(epoch_s, epoch_ms, or a strptime format such as %m/%d/%Y %H:%M:%S)"
    )


def days_of(
    values: pa.Array | pa.ChunkedArray, date_format: str = "", time_zone: str = ""
) -> pa.ChunkedArray:
    """The calendar day of each value: a zoned time's (epochs are UTC) in ``time_zone``
    (``ingest.time_zone``), else in its own zone."""
    times = event_times(values, date_format)
    if time_zone and pa.types.is_timestamp(times.type) and times.type.tz is not None:
        times = pc.local_timestamp(times.cast(pa.timestamp(times.type.unit, tz=time_zone)))
    return times if pa.types.is_date32(times.type) else pc.cast(times, pa.date32())


def detect_format(values: pa.Array | pa.ChunkedArray, name: str) -> str | None:
    """The ``date_format`` that reads every present value of a column that may be a time
    column: ``""`` for typed and ISO columns, an epoch unit for numbers in an epoch's range or
    ``%Y%m%d`` for whole numbers that all read as dates (only in a column whose name speaks of
    time), else the first of ``TEXT_FORMATS`` that reads them all; None when nothing does."""
    values = values if isinstance(values, pa.ChunkedArray) else pa.chunked_array([values])
    present = values.drop_null()
    if len(present) == 0:
        return None
    if pa.types.is_timestamp(values.type) or pa.types.is_date(values.type):
        return ""
    if pa.types.is_integer(values.type) or pa.types.is_floating(values.type):
        if not _names_time(name):
            return None
        low, high = (v.as_py() for v in pc.min_max(present).values())
        whole = pc.all(pc.equal(pc.round(pc.cast(present, pa.float64())), present)).as_py()
        for unit, (first, last) in EPOCH_RANGES.items():
            if whole and first <= low and high <= last:
                return unit
        if whole and DIGIT_DATES[0] <= low and high <= DIGIT_DATES[1]:
            try:
                event_times(present, "%Y%m%d")
            except pa.ArrowInvalid:
                return None
            return "%Y%m%d"
        return None
    if not pa.types.is_string(values.type) and not pa.types.is_large_string(values.type):
        return None
    for date_format in ("", *TEXT_FORMATS):
        try:
            event_times(present, date_format)
        except pa.ArrowInvalid:
            continue
        return date_format
    return None


TIME_WORDS = {"time", "date", "epoch", "ts", "timestamp", "datetime", "stamp", "when", "at"}
"""Words of a column name that let a number be taken for epoch time."""


def _names_time(name: str) -> bool:
    """Whether a column's name has a word of ``TIME_WORDS`` (snake_case or camelCase)."""
    words = re.findall(r"[a-z]+", re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower())
    return bool(TIME_WORDS.intersection(words))


def _reads(value: str, date_format: str) -> bool:
    try:
        pc.strptime(pa.array([value]), format=date_format, unit="us")
    except pa.ArrowInvalid:
        return False
    return True
