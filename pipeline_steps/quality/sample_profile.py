"""What a sample file says about a dataset: each column's profile, and which columns are the key,
the time and the label (the inference behind ``trainyard init-domain``).

The sample is read as the file source reads a day (CSV or parquet, types as Arrow infers them)
and each column is profiled: its kind, missing share, range, distinct values. A column of whole
numbers with missing values arrives as floats (a CSV writes ``11.0``): it is an integer column,
stored as float64 so that the file source reads the files as they are written. The roles are
checked, or inferred when not given: the key (unique and never missing: a column, or several
together such as an entity and its time), the time column (dates or times as ISO text, typed
columns, US-style text such as ``6/23/1994 0:00:00``, or epoch seconds or milliseconds: each
row's day), the label and its task (ordinal classes in their order); numeric columns that merely
encode the time are told apart. Errors name the argument, the file and the column.
"""

from __future__ import annotations

import re
import zoneinfo
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.tasks import TASKS, Task, task_spec
from pipeline_steps.domain.event_times import (
    DIGIT_DATES,
    EPOCH_RANGES,
    TEXT_FORMATS,
    days_of,
    detect_format,
    event_times,
)
from pipeline_steps.domain.physical_types import time_of_day_text
from pipeline_steps.quality.class_order import ClassOrder, class_order, states_order
from pipeline_steps.tasks.base import LabelSample

Kind = Literal["integer", "float", "boolean", "string", "date", "timestamp", "empty"]
MIN_ROWS = 20
"""Fewest rows a sample needs: figures from fewer are noise."""
MAX_CLASSES = 50
"""Most classes a multiclass label may have."""
LABEL_NAMES = ("label", "target", "y", "outcome", "class")
"""Column names taken for the label when ``--label`` is not given."""
POSITIVE_WORDS = ("1", "true", "yes", "y", "t", "positive", "pos")
"""Binary label values counted as 1 when the label is not 0/1."""
EXAMPLES = 8
"""Values or columns named in an error message."""
TIME_ENCODING = 0.9999
"""Correlation with the time above which a numeric column is taken for an encoding of it."""
IDENTIFIER_NAME = re.compile(r"(^|_)(id|ids|key|uuid|guid|number|num|no)$|[a-z](Id|ID|Key|Num)$")
"""Names of identifier columns: ``user_id``, ``movieId``, ``order_no``, ``idNum``."""
COUNT_LIMIT = 100
"""Most distinct values whose rows a profile counts per column, by default."""


class SampleError(StepError):
    """The sample cannot be drafted from, or an argument does not fit it; the message names the
    file, the column and the argument."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ColumnProfile:
    """What the sample shows about one column."""

    name: str
    kind: Kind
    storage: pa.DataType
    """The column's type in the domain's schema: how the file source reads it."""
    rows: int
    missing: int
    distinct: int
    low: float | None = None
    """Smallest value (numbers) or length (strings)."""
    high: float | None = None
    """Largest value (numbers) or length (strings)."""
    counts: Mapping[Any, int] = field(default_factory=dict)
    """Rows per value, for columns with at most ``count_limit`` values (see ``profile_sample``)."""

    @property
    def present(self) -> int:
        return self.rows - self.missing

    @property
    def missing_share(self) -> float:
        return self.missing / self.rows if self.rows else 0.0

    @property
    def numeric(self) -> bool:
        return self.kind in ("integer", "float")

    def categorical(self, limit: int) -> bool:
        """A string column with at most ``limit`` values (all counted), each seen twice on
        average."""
        return (
            self.kind == "string"
            and 0 < self.distinct <= min(limit, len(self.counts))
            and 2 * self.distinct <= self.present
        )


@dataclass(frozen=True, kw_only=True)
class SampleProfile:
    """A sample file read as the file source reads it, and its columns' profiles."""

    path: str
    table: pa.Table = field(repr=False)
    """The sample, each column of the type in ``columns``."""
    columns: tuple[ColumnProfile, ...]

    @property
    def rows(self) -> int:
        return self.table.num_rows

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str, argument: str) -> ColumnProfile:
        """The column ``name``; ``SampleError`` naming ``argument`` and listing the columns."""
        for column in self.columns:
            if column.name == name:
                return column
        raise SampleError(
            f"{argument} {name}: no such column in {self.path}; columns: {', '.join(self.names)}"
        )

    def schema(self) -> pa.Schema:
        """The domain's schema: each column as the file source should read it."""
        return pa.schema([(c.name, c.storage) for c in self.columns])


@dataclass(frozen=True, kw_only=True, slots=True)
class Roles:
    """Which columns play which part, checked against the sample."""

    key: str
    """The key column, or the name of the key a composite key's columns make together."""
    time_column: str
    label: str
    task: Task
    key_columns: tuple[str, ...] = ()
    """A composite key's columns (``--key origin,time_hour``); empty when ``key`` is a column."""
    date_format: str = ""
    """How the time column writes a time (``ingest.date_format``): empty for ISO text and typed
    columns, ``epoch_s``/``epoch_ms``, or a ``strptime`` format."""
    time_zone: str = ""
    """The zone whose midnight starts a day (``--time-zone``, ``ingest.time_zone``); empty: a
    zoned time's own, UTC for epochs."""
    calendar: Mapping[str, str] = field(default_factory=dict)
    """Numeric columns that are a part of the time column's date or time (``year``, ``month``,
    ``day``, ``hour``, ``minute``, ``weekday``), by part: their natural range is their rule; the
    date's parts are no features (in a rolling window they mark the newest days)."""
    identifiers: tuple[str, ...] = ()
    """Integer columns that identify things (``draft_checks.identifiers``): no numeric feature,
    no range rule."""
    classes: tuple[str, ...] = ()
    """``multiclass``, ``ordinal``: the label's values as class names, in the order of their
    indices."""
    class_order: str = ""
    """``multiclass``, ``ordinal``: why the classes are in that order
    (``class_order.ClassOrder.reason``)."""
    positive: Any = None
    """``binary``: the label value counted as 1."""
    days: Mapping[date, int] = field(default_factory=dict)
    """Rows per day of the time column, in date order."""
    time_encodings: tuple[str, ...] = ()
    """Numeric columns that are a linear function of the time column (a decimal year, a day
    number, epoch seconds): in a rolling window a holdout's values lie beyond every training
    value, so they are no features, and later days exceed the sample's range by design."""

    @property
    def first_day(self) -> date:
        return min(self.days)

    @property
    def last_day(self) -> date:
        return max(self.days)


# -- reading and profiling ---------------------------------------------------------------------


ROW_KEY = "row"
"""``--key row``: the key column made for rows without an id (``ingest.row_key``)."""


def profile_sample(path: str, count_limit: int = COUNT_LIMIT, row_key: str = "") -> SampleProfile:
    """Read ``path`` (CSV or parquet, a local path or fsspec URL) as the file source would and
    profile each column, counting the rows of each value where a column has at most
    ``count_limit`` of them (and always a label's classes); with ``row_key``, the key column
    ingest makes for rows without an id too (``sources.with_row_keys``). Raises
    ``SampleError`` when it is unreadable, has too few rows, or holds a column of a type no
    suite can judge."""
    from pipeline_steps.domain.sources import with_row_keys
    from pipeline_steps.quality.file_check import read_any

    try:
        table = read_any(path, None)
        if row_key:
            table = with_row_keys(table, row_key, path)
    except StepError as exc:
        raise SampleError(f"sample {exc}") from exc
    if table.num_rows < MIN_ROWS:
        raise SampleError(
            f"sample {path} has {table.num_rows} rows; a draft needs at least {MIN_ROWS}"
        )
    columns, arrays = [], []
    for name, values in zip(table.column_names, table.columns, strict=True):
        column, normalised = _profile_column(path, name, values, count_limit)
        columns.append(column)
        arrays.append(normalised)
    normalised_table = pa.table(arrays, names=table.column_names)
    return SampleProfile(path=path, table=normalised_table, columns=tuple(columns))


def _profile_column(
    path: str, name: str, values: pa.ChunkedArray, count_limit: int
) -> tuple[ColumnProfile, pa.ChunkedArray]:
    kind, values = _normalise(path, name, values)
    rows = len(values)
    if kind == "float":
        values = pc.if_else(pc.is_nan(values), pa.scalar(None, pa.float64()), values)
    missing = values.null_count
    distinct = pc.count_distinct(values, mode="only_valid").as_py() if kind != "empty" else 0
    low = high = None
    if kind in ("integer", "float") and missing < rows:
        low, high = _min_max(values)
        if kind == "float" and missing and pc.all(pc.equal(pc.round(values), values)).as_py():
            # Integers with gaps: pandas holds them as floats and writes them 11.0.
            kind = "integer"
    elif kind == "string" and missing < rows:
        low, high = _min_max(pc.utf8_length(values))
    counts: dict[Any, int] = {}
    # A label's classes are counted whatever the limit of value sets.
    if kind not in ("date", "timestamp") and 0 < distinct <= max(count_limit, MAX_CLASSES):
        counted = pc.value_counts(values.drop_null())
        counts = {
            _plain(v): int(n)
            for v, n in zip(
                counted.field("values").to_pylist(),
                counted.field("counts").to_pylist(),
                strict=True,
            )
        }
    profile = ColumnProfile(
        name=name,
        kind=kind,
        storage=values.type,
        rows=rows,
        missing=missing,
        distinct=distinct,
        low=low,
        high=high,
        counts=counts,
    )
    return profile, values


def _normalise(path: str, name: str, values: pa.ChunkedArray) -> tuple[Kind, pa.ChunkedArray]:
    """The column's kind and its values in the type the domain's schema gives it (64-bit
    numbers, plain strings, microsecond timestamps)."""
    kind = values.type
    if pa.types.is_dictionary(kind):
        values = values.cast(kind.value_type)
        kind = values.type
    if pa.types.is_null(kind):
        return "empty", values.cast(pa.string())
    if pa.types.is_integer(kind):
        return "integer", values.cast(pa.int64())
    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return "float", values.cast(pa.float64())
    if pa.types.is_boolean(kind):
        return "boolean", values
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "string", values.cast(pa.string())
    if pa.types.is_date(kind):
        return "date", values.cast(pa.date32())
    if pa.types.is_timestamp(kind):
        return "timestamp", values.cast(pa.timestamp("us", kind.tz))
    if pa.types.is_time(kind):  # a time of day beside a date column: text, as files are read
        return "string", time_of_day_text(values)
    raise SampleError(
        f"column {name} of {path} has type {kind}, which a suite cannot judge; "
        "leave it out of the sample"
    )


def _min_max(values: pa.ChunkedArray) -> tuple[float, float]:
    found = pc.min_max(values)
    return found["min"].as_py(), found["max"].as_py()


def _plain(value: Any) -> Any:
    """A value as JSON writes it: whole floats as integers."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# -- roles ---------------------------------------------------------------------------------------


def infer_roles(
    profile: SampleProfile,
    *,
    label: str | None = None,
    task: str | None = None,
    time_column: str | None = None,
    key: str | None = None,
    classes: str | None = None,
    time_zone: str = "",
    date_format: str | None = None,
) -> tuple[SampleProfile, Roles]:
    """Check the given roles against the sample and infer the others; the profile comes back
    with the time column parsed (a string column of ISO dates becomes a date column); a
    label's classes in their order (``class_order``, ``classes`` as ``--classes``
    gives it); the time column read with ``date_format`` (``--date-format``) when given.
    Raises ``SampleError`` naming the argument, the file and the column."""
    label_column = _label(profile, label)
    time_name = _time_column(profile, time_column)
    if time_zone:
        try:
            zoneinfo.ZoneInfo(time_zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise SampleError(
                f"--time-zone {time_zone!r} is not a time zone name; use an IANA name such as "
                "America/Chicago"
            ) from None
    profile, days, date_format, times = _parse_time(
        profile, time_name, time_column, time_zone, date_format
    )
    key_name, key_columns = _key(
        profile, key, exclude={time_name, label_column.name}, time=time_name
    )
    if label_column.name in (key_name, time_name, *key_columns):
        role = "time column" if label_column.name == time_name else "key"
        raise SampleError(f"--label {label_column.name} is also the {role}; choose another")
    checked_task = _task(profile, label_column, task)
    spec = task_spec(checked_task)
    order = ClassOrder((), "")
    positive = None
    if classes is not None and not spec.has_classes:
        raise SampleError(
            f"--classes orders a label of classes; --label {label_column.name} is {checked_task}"
        )
    if spec.has_classes:
        try:
            order = class_order(label_column.counts, classes)
        except StepError as exc:
            raise SampleError(f"{profile.path}, --label {label_column.name}: {exc}") from None
        if spec.ordered and not order.found:
            raise SampleError(
                f"--task {checked_task}: {profile.path}, --label {label_column.name} has "
                f"classes {', '.join(order.classes)} in no order found; give them lowest "
                "first with --classes a,b,c"
            )
    elif spec.counts_positives:
        positive = _positive(label_column)
    taken = {key_name, time_name, label_column.name}
    calendar = _calendar_parts(profile, times, taken)
    encodings = _time_encodings(profile, times, taken)
    years = tuple(name for name, part in calendar.items() if part == "year")
    roles = Roles(
        time_encodings=encodings + tuple(y for y in years if y not in encodings),
        calendar=calendar,
        key=key_name,
        key_columns=key_columns,
        time_column=time_name,
        date_format=date_format,
        time_zone=time_zone,
        label=label_column.name,
        task=checked_task,
        classes=order.classes,
        class_order=order.reason,
        positive=positive,
        days=days,
    )
    return profile, roles


def _label(profile: SampleProfile, label: str | None) -> ColumnProfile:
    if label is not None:
        column = profile.column(label, "--label")
    else:
        named = [c for c in profile.columns if c.name.lower() in LABEL_NAMES]
        if not named:
            raise SampleError(
                f"--label is needed: {profile.path} has no column named "
                f"{', '.join(LABEL_NAMES)}; columns: {', '.join(profile.names)}"
            )
        column = named[0]
    if column.missing == column.rows:
        raise SampleError(f"--label {column.name}: every value is missing in {profile.path}")
    return column


def _time_column(profile: SampleProfile, given: str | None) -> str:
    if given is not None:
        return profile.column(given, "--time-column").name
    for column in profile.columns:
        if column.kind in ("date", "timestamp"):
            return column.name
    for kinds in (("string",), ("integer", "float")):  # dates written as text, then epochs
        for column in profile.columns:
            values = profile.table.column(column.name)
            if column.kind in kinds and detect_format(values, column.name) is not None:
                return column.name
    raise SampleError(
        f"--time-column is needed: no column of {profile.path} holds dates or times (ISO 8601, "
        f"{', '.join(TEXT_FORMATS)}, or epoch seconds or milliseconds or %Y%m%d numbers in a "
        f"column named as a time; --date-format names any other); columns: "
        f"{', '.join(profile.names)}"
    )


def _parse_time(
    profile: SampleProfile,
    name: str,
    given: str | None = None,
    time_zone: str = "",
    date_format: str | None = None,
) -> tuple[SampleProfile, dict[date, int], str, pa.ChunkedArray]:
    """The profile (an ISO text column becomes a date or timestamp column), the rows per day,
    the column's ``date_format`` and its values as times. Text in another format and epoch
    numbers stay as the file writes them; ``date_format`` reads them. A ``date_format`` given
    (``--date-format``) must read every value."""
    argument = "--time-column"
    column = profile.column(name, argument)
    values = profile.table.column(name)
    if column.missing == column.rows:
        raise SampleError(f"{argument} {name}: every value is missing in {profile.path}")
    if date_format:
        try:
            times = event_times(values, date_format)
        except pa.ArrowInvalid as exc:
            raise SampleError(
                f"--date-format {date_format!r}: {profile.path}, {argument} {name} {exc}"
            ) from None
        days = days_of(times, "", time_zone).drop_null().to_pylist()
        return profile, dict(sorted(Counter(days).items())), date_format, times
    date_format = ""
    if column.kind == "string":
        found = detect_format(values, name)
        if found == "" or found is None:
            kind, values = _parse_strings(profile, name)
            column = ColumnProfile(
                name=name,
                kind=kind,
                storage=values.type,
                rows=column.rows,
                missing=column.missing,
                distinct=column.distinct,
            )
            index = profile.names.index(name)
            profile = SampleProfile(
                path=profile.path,
                table=profile.table.set_column(index, name, values),
                columns=(*profile.columns[:index], column, *profile.columns[index + 1 :]),
            )
        else:
            date_format = found
    elif column.kind in ("integer", "float"):
        # a column given by name may say nothing of time; its values must still be epochs
        found = detect_format(values, name if given is None else "time")
        if not found:
            low, high = column.low, column.high
            raise SampleError(
                f"{argument} {name}: {profile.path} holds {column.kind} values there "
                f"({_examples(values)}), not dates or times; epoch seconds lie in "
                f"{EPOCH_RANGES['epoch_s'][0]:.0f}..{EPOCH_RANGES['epoch_s'][1]:.0f}, "
                f"milliseconds in {EPOCH_RANGES['epoch_ms'][0]:.0f}..."
                f"{EPOCH_RANGES['epoch_ms'][1]:.0f}, dates as digits (%Y%m%d) in "
                f"{DIGIT_DATES[0]}..{DIGIT_DATES[1]} (seen {low:g}..{high:g}); "
                "--date-format names another form"
            )
        date_format = found
    elif column.kind not in ("date", "timestamp"):
        raise SampleError(
            f"{argument} {name}: {profile.path} holds {column.kind} values there "
            f"({_examples(values)}), not dates or times"
        )
    times = event_times(values, date_format)
    days = days_of(times, "", time_zone).drop_null().to_pylist()
    return profile, dict(sorted(Counter(days).items())), date_format, times


def _parse_strings(profile: SampleProfile, name: str) -> tuple[Kind, pa.ChunkedArray]:
    """A string column as dates, or as timestamps (with or without a zone); ``SampleError``
    naming the first value that parses as neither."""
    argument = "--time-column"
    values = profile.table.column(name)
    present = values.drop_null()
    targets: list[tuple[Kind, pa.DataType]] = [
        ("date", pa.date32()),
        ("timestamp", pa.timestamp("us")),
        ("timestamp", pa.timestamp("us", "UTC")),
    ]
    for kind, target in targets:
        try:
            pc.cast(present[:1], target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
        try:
            return kind, pc.cast(values, target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            bad = next(v for v in present.to_pylist() if not _casts(v, target))
            raise SampleError(
                f"{argument} {name}: value {bad!r} in {profile.path} does not parse like the "
                f"column's first value {present[0].as_py()!r}"
            ) from None
    raise SampleError(
        f"{argument} {name}: value {present[0].as_py()!r} in {profile.path} does not parse as a "
        "date or time (ISO 8601, e.g. 2016-07-02 or 2016-07-02T10:00:00)"
    )


def _casts(value: str, target: pa.DataType) -> bool:
    try:
        pc.cast(pa.array([value]), target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return True


def _time_encodings(
    profile: SampleProfile, times: pa.ChunkedArray, exclude: set[str]
) -> tuple[str, ...]:
    """The numeric columns whose values follow the time linearly (correlation at least
    ``TIME_ENCODING``) over at least three distinct times."""
    ticks = pc.cast(times, pa.int32() if pa.types.is_date(times.type) else pa.int64())
    if pc.count_distinct(ticks).as_py() < 3:
        return ()
    found = []
    for column in profile.columns:
        if not column.numeric or column.name in exclude or column.distinct < 3:
            continue
        values = profile.table.column(column.name).cast(pa.float64())
        both = pc.and_(pc.is_valid(values), pc.is_valid(ticks))
        x = values.filter(both).to_numpy()
        y = ticks.filter(both).cast(pa.float64()).to_numpy()
        if len(x) > 2 and abs(np.corrcoef(x, y)[0, 1]) >= TIME_ENCODING:
            found.append(column.name)
    return tuple(found)


CALENDAR = {
    "year": pc.year,
    "month": pc.month,
    "day": pc.day,
    "hour": pc.hour,
    "minute": pc.minute,
    "weekday": pc.day_of_week,
}
"""Parts of a time a column may repeat, and how to take each from the time column."""
CALENDAR_SHARE = 0.99
"""Least share of rows on which a column equals a part of the time for it to be that part."""
CALENDAR_RANGE = {"month": (1, 12), "day": (1, 31), "hour": (0, 23), "minute": (0, 59)}
"""Values a part of a time takes: a column with others is no such part, however often it
matches (a flag that is 1 on nearly every row of a January sample is not its month)."""


def _calendar_parts(
    profile: SampleProfile, times: pa.ChunkedArray, exclude: set[str]
) -> dict[str, str]:
    """The numeric columns that equal a part of the time column (its year, month, day, hour,
    minute or weekday, Monday 0 or 1) on ``CALENDAR_SHARE`` of the rows."""
    found: dict[str, str] = {}
    for column in profile.columns:
        if column.kind != "integer" or column.name in exclude or not column.present:
            continue
        values = profile.table.column(column.name).cast(pa.int64())
        low, high = pc.min(values).as_py(), pc.max(values).as_py()
        for part, take in CALENDAR.items():
            if part in ("hour", "minute") and pa.types.is_date(times.type):
                continue
            bounds = CALENDAR_RANGE.get(part)
            if bounds is not None and not (bounds[0] <= low and high <= bounds[1]):
                continue
            expected = take(times).cast(pa.int64())
            for shift in (0, 1) if part == "weekday" else (0,):
                same = pc.sum(pc.equal(values, pc.add(expected, shift))).as_py() or 0
                if same >= CALENDAR_SHARE * column.present:
                    found[column.name] = part
                    break
            if column.name in found:
                break
    return found


def _key(
    profile: SampleProfile, key: str | None, exclude: set[str], time: str
) -> tuple[str, tuple[str, ...]]:
    """The key's name and, for a composite key, its columns: ``--key`` as given (one column, or
    several joined by commas), else the first column unique and never missing (one named as a
    key first), else a column that is unique with the time column (an entity and its time, as
    weather per airport and hour)."""
    if key is not None:
        parts = tuple(part.strip() for part in key.split(",") if part.strip())
        for part in parts:
            column = profile.column(part, "--key")
            if column.missing:
                raise SampleError(
                    f"--key {key}: {column.missing} value(s) of {part} missing in "
                    f"{profile.path}; a key is never missing"
                )
        repeated = _repeated(profile, parts)
        if repeated:
            raise SampleError(
                f"--key {key}: not unique in {profile.path} ({len(repeated)} repeated value(s), "
                f"e.g. {', '.join(repr(v) for v in repeated[:EXAMPLES])})"
            )
        return (parts[0], ()) if len(parts) == 1 else (_key_name(profile, parts), parts)
    candidates = [
        c
        for c in profile.columns
        if c.kind in ("integer", "string")
        and not c.missing
        and c.distinct == c.rows
        and c.name not in exclude
    ]
    named = [
        c
        for c in candidates
        if re.search(r"(^|_)(id|key)$", c.name.lower()) or IDENTIFIER_NAME.search(c.name)
    ]
    if named or candidates:
        return (named or candidates)[0].name, ()
    entities = sorted(
        (
            c
            for c in profile.columns
            if c.kind in ("integer", "string") and not c.missing and c.name not in exclude
        ),
        key=lambda c: c.distinct,
    )
    for column in entities:
        parts = (column.name, time)
        if profile.column(time, "--time-column").missing == 0 and not _repeated(profile, parts):
            return _key_name(profile, parts), parts
    raise SampleError(
        f"--key is needed: no column of {profile.path} is unique and never missing, alone or "
        f"with {time}; name one, or several joined by commas (--key origin,time_hour), or "
        "give --key row for rows without an id (each keyed by its file and row number); "
        f"columns: {', '.join(profile.names)}"
    )


def _repeated(profile: SampleProfile, parts: tuple[str, ...]) -> list[Any]:
    """The values (tuples for several columns) that more than one row of the sample holds."""
    grouped = profile.table.group_by(list(parts)).aggregate([([], "count_all")])
    repeated = grouped.filter(pc.greater(grouped["count_all"], 1))
    rows = repeated.select(list(parts)).to_pylist()
    return [row[parts[0]] if len(parts) == 1 else tuple(row.values()) for row in rows]


def _key_name(profile: SampleProfile, parts: tuple[str, ...]) -> str:
    """A column name for a composite key that no column of the sample has."""
    name = "_".join(parts) + "_key"
    while name in profile.names:
        name = "_" + name
    return name


def _task(profile: SampleProfile, label: ColumnProfile, task: str | None) -> Task:
    values = profile.table.column(label.name).drop_null()
    seen = f"{profile.path} holds {label.distinct} ({_examples(values)})"
    if task is None:
        if label.distinct == 2:
            return "binary"
        if label.kind == "string" and label.distinct > MAX_CLASSES:
            raise SampleError(
                f"--label {label.name}: {seen}: too many values for a multiclass label, and "
                "not numbers for a regression"
            )
        small = label.kind == "string" or (label.kind == "integer" and label.distinct <= 20)
        if small:
            # classes whose values state an order (a scale, bands, a short run of whole
            # numbers) are ordinal; others, and an order not found, multiclass
            task = "ordinal" if states_order(class_order(label.counts)) else "multiclass"
        else:
            task = "regression"
    if task not in TASKS:
        raise SampleError(f"--task {task}: unknown; known: {', '.join(TASKS)}")
    sample = LabelSample(
        distinct=label.distinct,
        kind=label.kind,
        numeric=label.numeric,
        seen=seen,
        examples=_examples(values),
        max_classes=MAX_CLASSES,
    )
    misfit = task_spec(task).label_misfit(sample)
    if misfit is not None:
        raise SampleError(f"--task {task} does not fit --label {label.name}: {misfit}")
    return task


def _positive(label: ColumnProfile) -> Any:
    """The binary label value counted as 1: 1 or true, a yes-like word, else the rarer value."""
    values = sorted(label.counts, key=str)
    for value in values:
        if str(value).lower() in POSITIVE_WORDS:
            return value
    return min(values, key=lambda v: (label.counts[v], -values.index(v)))


def _examples(values: pa.ChunkedArray | pa.Array) -> str:
    shown = pc.unique(values.drop_null()).to_pylist()[:EXAMPLES]
    return ", ".join(repr(_plain(v)) for v in shown)
