"""Physical types that hold a schema's values: a file's columns read as the dataset's types.

Tools write the same values in different physical types: pandas writes every integer column as
int64 and an integer column with missing values as float64 (``11.0``), Spark and DuckDB write
64-bit integers and their own timestamp units, parquet writers encode strings as dictionaries or
in their large form. None of that is a schema change. A column whose every value the declared
type holds exactly is read as the declared type; one with a value it cannot hold (a fraction in
an integer column, a number past its range, a time finer than its unit, text that is no ISO
time) raises
``pa.ArrowInvalid`` naming the column, the row and the value. A column of another kind (text
where a number is declared) stays as written, for the schema-change judge and the suite to name.

A time of day (a CSV's ``11:38:36``, which Arrow reads as ``time32[s]``; a pandas ``time``
column, which parquet stores as ``time64[us]``) is held as ISO text (:func:`time_of_day_text`),
the same text whatever unit the writer chose.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

import pyarrow as pa
import pyarrow.compute as pc

_EXACT_DECIMAL = pa.decimal128(38, 9)
"""Holds every 64-bit integer, written with up to nine decimals, without rounding."""


def _kind(data_type: pa.DataType) -> str:
    """The family a type's values belong to; a value moves only within its family."""
    if pa.types.is_dictionary(data_type):
        return _kind(data_type.value_type)
    if pa.types.is_integer(data_type) or pa.types.is_floating(data_type):
        return "number"
    if pa.types.is_decimal(data_type):
        return "number"
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return "text"
    if pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type):
        return "bytes"
    if pa.types.is_timestamp(data_type) or pa.types.is_date(data_type):
        return "time"
    if pa.types.is_time(data_type):
        return "time of day"
    return str(data_type)


def time_of_day_text(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Times of day as ISO text: ``HH:MM:SS`` when every value is a whole second, else with
    microseconds (``HH:MM:SS.ffffff``)."""
    try:
        whole = pc.cast(column, pa.time32("s"))  # refuses to drop a fraction of a second
    except pa.ArrowInvalid:
        return pc.cast(pc.cast(column, pa.time64("us")), pa.string())
    return pc.cast(whole, pa.string())


def holds_same_kind(stored: pa.DataType, declared: pa.DataType) -> bool:
    """Whether a column stored as ``stored`` may be read as ``declared``: another physical type
    of the same kind of value (numbers, text, bytes, points in time), or dates and times written
    as ISO text (pandas keeps them as strings unless parsed), checked value by value."""
    if stored == declared:
        return False
    return _kind(stored) == _kind(declared) or (_kind(stored), _kind(declared)) in (
        ("text", "time"),
        ("time of day", "text"),
    )


def as_declared(column: pa.Array, declared: pa.DataType, name: str, first_row: int = 1) -> pa.Array:
    """``column`` in the type ``declared``, every value unchanged (``11.0`` is 11, a dictionary's
    strings are plain strings, a nanosecond time on a whole microsecond is that microsecond).
    ``first_row`` is the file's row number of the column's first value. Raises
    ``pa.ArrowInvalid`` naming the column, the row and the first value ``declared`` cannot
    hold."""
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if pa.types.is_floating(column.type) and not pa.types.is_floating(declared):
        # a float column's NaN is pandas' missing value (parquet writers keep it as NaN)
        column = pc.if_else(pc.is_nan(column), pa.scalar(None, column.type), column)
    try:
        return _cast(column, declared)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    row = _first_misfit(column, declared)
    value = column[row].as_py()
    shown = repr(value) if isinstance(value, str) else str(value)
    raise pa.ArrowInvalid(
        f"column {name!r} ({declared}) holds {shown}, {_why_not(value, column, row, declared)}, "
        f"in row {first_row + row}"
    )


def _cast(column: pa.Array, declared: pa.DataType) -> pa.Array:
    """A checked cast; a CSV's 64-bit integer column, read as text so that no double rounds
    it, goes through an exact decimal; a time of day becomes its ISO text."""
    if pa.types.is_time(column.type) and pa.types.is_string(declared):
        return time_of_day_text(column)
    try:
        return pc.cast(column, declared)
    except pa.ArrowInvalid:
        if not (pa.types.is_integer(declared) and pa.types.is_string(column.type)):
            raise
    return pc.cast(pc.cast(column, _EXACT_DECIMAL), declared)


def _first_misfit(column: pa.Array, declared: pa.DataType) -> int:
    """The position of the first value of ``column`` that ``declared`` cannot hold (a cast of a
    prefix fails exactly when the prefix holds one)."""
    low, high = 0, len(column)  # the prefix of ``low`` values casts, that of ``high`` does not
    while high - low > 1:
        middle = (low + high) // 2
        try:
            _cast(column.slice(0, middle), declared)
            low = middle
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            high = middle
    return low


def _why_not(value: object, column: pa.Array, row: int, declared: pa.DataType) -> str:
    """Why ``declared`` cannot hold ``value``, the one at ``row`` of ``column``."""
    if pa.types.is_integer(declared):
        width, signed = declared.bit_width, pa.types.is_signed_integer(declared)
        low, high = (-(2 ** (width - 1)), 2 ** (width - 1) - 1) if signed else (0, 2**width - 1)
        try:
            number = Decimal(str(value))
        except InvalidOperation:
            return "not a number"
        if not number.is_finite():
            return "not a number"
        if number != number.to_integral_value():
            return "not a whole number"
        return f"out of its range {low}..{high}"
    if pa.types.is_floating(declared):
        return f"more digits than a {declared} holds exactly"
    try:
        _cast(column.slice(row, 1), declared)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        return str(exc).splitlines()[0]
    return "which it cannot hold"
