"""Days without data, ordinary for a domain that says so (``domain.empty_days: skip``), on real
sparse data: Mesa Airlines' (YV) flights out of New York in June 2013, exported with pandas to
one parquet file with a ``flight_date`` column. Mesa flew no Saturday that month: the export
holds 2013-06-02..07 and 06-09, not 06-01 nor 06-08.

An empty day ends skipped everywhere it is met: ingest writes nothing and exits with the
empty-day code, which the task turns into a skip; the sensor skips it before any step; ``seed``
passes it by and reports it; serving takes the next day with rows. A domain where empty days are
not ordinary keeps its permanent failure."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from flight_delay.domain import _full_table

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import EXIT_EMPTY_DAY, EmptyDay, StepError
from pipeline_steps.steps.ingest import ingest

SATURDAY, FRIDAY, SUNDAY = date(2013, 6, 8), date(2013, 6, 7), date(2013, 6, 9)


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Mesa's flights of 2013-06-01..09 as ``DataFrame.to_parquet`` writes them."""
    return write_export(tmp_path_factory.mktemp("mesa"))


def write_export(folder: Path) -> Path:
    """Mesa's flights of 2013-06-01..09 in ``folder``/flights.parquet (``to_parquet``)."""
    table = _full_table("flights")
    june = pc.and_(pc.equal(table["month"], 6), pc.less_equal(table["day"], 9))
    frame = table.filter(pc.and_(pc.equal(table["carrier"], "YV"), june)).to_pandas()
    frame["flight_date"] = [
        f"{y:04d}-{m:02d}-{d:02d}" for y, m, d in frame[["year", "month", "day"]].values
    ]
    frame.to_parquet(folder / "flights.parquet")
    return folder


def _settings(make_settings, export: Path, *more: str, empty_days: str = "skip") -> Any:
    return make_settings(
        "ingest.source=file",
        f"ingest.path={export}/{{dataset}}.parquet",
        "ingest.date_column=flight_date",
        "ingest.datasets=[flights]",
        f"domain.empty_days={empty_days}",
        *more,
    )


def test_an_ordinary_empty_day_is_skipped_by_ingest_and_a_broken_feed_still_fails(
    make_settings, export
) -> None:
    sparse = _settings(make_settings, export)
    ctx = RunContext(run_id="saturday", logical_date=SATURDAY, settings=sparse)
    with pytest.raises(EmptyDay, match=r"no flights for 2013-06-08.*domain\.empty_days"):
        ingest(ctx)
    assert not ctx.lake.raw_versions("flights", SATURDAY)  # nothing written, not even a folder
    assert not ctx.lake.fs.exists(ctx.lake.path("raw", "flights", f"date={SATURDAY}"))
    assert ingest(RunContext(run_id="friday", logical_date=FRIDAY, settings=sparse)).rows == 2

    strict = _settings(make_settings, export, empty_days="fail")
    with pytest.raises(StepError) as refused:
        ingest(RunContext(run_id="saturday", logical_date=SATURDAY, settings=strict))
    assert not isinstance(refused.value, EmptyDay)


def test_the_step_exits_with_the_empty_day_code_and_its_task_ends_skipped(
    make_settings, export, tmp_path
) -> None:
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from pipeline_steps.orchestration.failures import step_failure

    sparse = _settings(make_settings, export)
    argv = ["step", "ingest", "--run-id", "saturday", "--logical-date", str(SATURDAY)]
    sets = [
        a
        for s in (
            "ingest.source=file",
            f"ingest.path={export}/{{dataset}}.parquet",
            "ingest.date_column=flight_date",
            "ingest.datasets=[flights]",
            "domain.empty_days=skip",
        )
        for a in ("--set", s)
    ]
    done = subprocess.run(
        [sys.executable, "-m", "pipeline_steps.commands.cli", *argv, *sets],
        capture_output=True,
        text=True,
        env={**os.environ, "TRAINYARD_HOME": str(Path(sparse.lake.root).parent)},
    )
    assert done.returncode == EXIT_EMPTY_DAY, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("trainyard step ingest skipped (empty day): ")
    skipped = step_failure("ingest", done.returncode, [last], last)
    assert isinstance(skipped, AirflowSkipException)
    # in a pod the exit code may be lost, the termination message is not
    assert isinstance(step_failure("ingest", 1, [last], last), AirflowSkipException)
    failed = "trainyard step ingest failed (permanent): no flights"
    assert isinstance(step_failure("ingest", 2, [failed], failed), AirflowFailException)


def test_the_sensor_skips_an_empty_day_before_any_step(make_settings, export) -> None:
    from airflow.sdk.exceptions import AirflowSkipException

    from pipeline_steps.orchestration.trigger import SourceDataSensor, empty_day_message

    sparse = _settings(make_settings, export)
    assert empty_day_message(sparse, FRIDAY) is None
    assert "2013-06-08 has no row of flights" in (empty_day_message(sparse, SATURDAY) or "")
    sensor = SourceDataSensor(settings=sparse, day=str(SATURDAY))
    with pytest.raises(AirflowSkipException, match="ordinary empty day"):
        sensor.poke({})
    assert SourceDataSensor(settings=sparse, day=str(FRIDAY)).poke({}) is True
    # a Saturday the export has moved past: ingest fails it where empty days are not ordinary
    strict = _settings(make_settings, export, empty_days="fail")
    assert SourceDataSensor(settings=strict, day=str(SATURDAY)).poke({}) is True
    # the day after the export's last: its rows may still come, both wait (then end skipped)
    for settings in (sparse, strict):
        assert SourceDataSensor(settings=settings, day="2013-06-10").poke({}) is False


def test_seed_passes_empty_days_by_and_reports_them(make_settings, export, monkeypatch) -> None:
    from pipeline_steps.commands import cli

    sparse = _settings(make_settings, export)
    monkeypatch.setattr(cli, "load_settings", lambda config, overrides: sparse)
    summary = cli.seed(date(2013, 6, 1), SUNDAY, None, [])
    assert summary.empty_days == ["2013-06-01", "2013-06-08"]
    assert (summary.days, summary.first, summary.last) == (7, "2013-06-02", "2013-06-09")
    with pytest.raises(StepError, match="no day from 2013-06-08 to 2013-06-08 has rows"):
        cli.seed(SATURDAY, SATURDAY, None, [])


def test_seed_keep_going_records_every_refused_day_and_goes_on(
    make_settings, export, monkeypatch, capsys
) -> None:
    """Where empty days are not ordinary, both Saturdays are refused: without --keep-going the
    first stops the seed; with it, each is recorded with its reason and the week is seeded."""
    import json

    from pipeline_steps.commands import cli

    strict = _settings(make_settings, export, empty_days="fail")
    monkeypatch.setattr(cli, "load_settings", lambda config, overrides: strict)
    week = ["seed", "--start", "2013-06-01", "--end", str(SUNDAY)]
    assert cli.main(week) == 2
    assert "no flights for 2013-06-01" in capsys.readouterr().err

    assert cli.main([*week, "--keep-going"]) == 2
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert (summary["days"], summary["first"], summary["last"]) == (7, "2013-06-02", "2013-06-09")
    assert sorted(summary["refused"]) == ["2013-06-01", "2013-06-08"]
    assert "days without rows are refused here" in summary["refused"]["2013-06-08"]
    assert "refused 2013-06-01: " in err and "seeded 2013-06-09" in err
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith("trainyard seed refused 2 day(s): 2013-06-01, 2013-06-08")
    )
    ctx = RunContext(run_id="x", logical_date=SUNDAY, settings=strict)
    assert len(ctx.lake.validated_dates("flights")) == 7


def test_every_later_step_run_by_hand_ends_skipped_on_an_empty_day(
    make_settings, export, monkeypatch, capsys
) -> None:
    from pipeline_steps.commands import cli

    sparse = _settings(make_settings, export)
    monkeypatch.setattr(cli, "load_settings", lambda config, overrides: sparse)
    cli.seed(date(2013, 6, 1), date(2013, 6, 4), None, [])
    by_hand = ["--run-id", "saturday", "--logical-date", str(SATURDAY)]
    for step in ("ingest", "validate", "features", "train", "evaluate", "promote", "monitor"):
        capsys.readouterr()
        assert cli.main(["step", step, *by_hand]) == EXIT_EMPTY_DAY, step
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert last.startswith(f"trainyard step {step} skipped (empty day): "), last
        assert "no flights for 2013-06-08" in last, last
    lake = RunContext(run_id="saturday", logical_date=SATURDAY, settings=sparse).lake
    assert not lake.fs.exists(lake.path("raw", "flights", f"date={SATURDAY}"))
    # a day with rows that was not ingested is still a failure: load it first
    assert cli.main(["step", "validate", "--run-id", "friday", "--logical-date", str(FRIDAY)]) == 2
    assert "run the ingest step first" in capsys.readouterr().err


def test_the_sparse_window_warning_counts_only_days_with_rows(
    make_settings, export, monkeypatch, caplog
) -> None:
    """A 9-day window ending on Sunday 06-09 holds two empty days (06-01, 06-08): three of its
    six training days with rows are enough; two are not, and the warning says so."""
    from pipeline_steps.commands import cli
    from pipeline_steps.steps.features import window

    sparse = _settings(
        make_settings,
        export,
        "features.window_days=9",
        "evaluate.holdout_days=1",
        "features.min_train_days=1",
    )
    monkeypatch.setattr(cli, "load_settings", lambda config, overrides: sparse)
    cli.seed(date(2013, 6, 1), date(2013, 6, 3), None, [])
    cli.seed(SATURDAY, SUNDAY, None, [])
    ctx = RunContext(run_id="sunday", logical_date=SUNDAY, settings=sparse)
    caplog.clear()
    assert window(ctx)[0] == [date(2013, 6, 2), date(2013, 6, 3)]
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(said) == 1, said
    assert said[0].startswith("the window 2013-06-01..2013-06-09 has 2 of its 6 training days")
    assert "missing 2013-06-04..2013-06-07" in said[0]
    assert "2 empty day(s) of the source not counted" in said[0]

    cli.seed(date(2013, 6, 4), date(2013, 6, 4), None, [])
    caplog.clear()
    assert len(window(ctx)[0]) == 3  # 3 of 8 days, but 3 of the 6 with rows: no warning
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_serving_takes_the_next_day_with_rows(make_settings, export) -> None:
    from pipeline_steps.orchestration.serving import ServingDayOperator, day_with_rows

    sparse = _settings(make_settings, export)
    assert day_with_rows(sparse, "2013-06-08") == ("2013-06-09", ["2013-06-08"])
    assert day_with_rows(sparse, "2013-06-07") == ("2013-06-07", [])
    served = ServingDayOperator(task_id="serving_day", settings=sparse).execute(
        {"triggering_asset_events": {}, "logical_date": FRIDAY}
    )
    assert served["day"] == "2013-06-09"  # the day after Friday is a Saturday without flights
