from dataclasses import replace
from datetime import date

import pandas as pd
import pytest
from flight_delay.domain import DOMAIN, LEAKY

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.manifests import FeaturesManifest
from pipeline_steps.steps.features import build_features
from pipeline_steps.steps.ingest import ingest
from pipeline_steps.steps.validate import validate
from tests.conftest import FIRST_DAY, HISTORY


@pytest.fixture
def features_run(ready_lake_home, make_settings) -> tuple[RunContext, FeaturesManifest]:
    home = ready_lake_home
    ctx = RunContext(run_id="r1", logical_date=FIRST_DAY, settings=make_settings(home=home))
    ingest(ctx)
    validate(ctx)
    return ctx, build_features(ctx)


def test_training_set_is_point_in_time_and_leak_free(features_run) -> None:
    _, manifest = features_run
    assert manifest.train_days == [d.isoformat() for d in HISTORY]
    assert manifest.holdout_day == FIRST_DAY.isoformat()
    train = pd.read_parquet(manifest.sets.train.path)
    holdout = pd.read_parquet(manifest.sets.holdout.path)
    assert set(train["flight_date"]) == {d.isoformat() for d in HISTORY}
    assert set(holdout["flight_date"]) == {FIRST_DAY.isoformat()}
    assert not set(LEAKY) & set(train.columns)
    # Weather joined from the origin airport at the scheduled departure hour.
    assert train["temp"].notna().mean() > 0.95
    assert train["seats"].notna().mean() > 0.7
    assert train["delayed"].isin([0, 1]).all()


def test_rebuilding_with_the_same_inputs_is_cached(features_run) -> None:
    ctx, first = features_run
    again = build_features(ctx)
    assert again.status == "cached"
    assert again.training_set_sha256 == first.training_set_sha256


def test_window_without_history_says_how_to_seed(make_settings) -> None:
    ctx = RunContext(run_id="r1", logical_date=date(2013, 7, 1), settings=make_settings())
    ingest(ctx)
    validate(ctx)
    with pytest.raises(StepError, match="trainyard seed --start 2013-06-28 --end 2013-06-30"):
        build_features(ctx)


def test_cancelled_flights_are_labelled_late_or_dropped(make_settings) -> None:
    flights = pd.DataFrame(
        {
            "year": [2013] * 3,
            "month": [6] * 3,
            "day": [1] * 3,
            "carrier": ["UA"] * 3,
            "flight": [1, 2, 3],
            "origin": ["EWR"] * 3,
            "dest": ["ORD"] * 3,
            "tailnum": ["N1", None, "N3"],
            "distance": [719] * 3,
            "sched_dep_time": [600, 700, 800],
            "sched_arr_time": [800, 900, 1000],
            "arr_delay": [5.0, 40.0, None],
            "time_hour": pd.to_datetime(
                ["2013-06-01T10:00Z", "2013-06-01T11:00Z", "2013-06-01T12:00Z"]
            ),
        }
    )
    kept = DOMAIN.entity_rows(flights, make_settings().features)
    assert kept["delayed"].tolist() == [0, 1, 1]
    dropped = replace(DOMAIN, cancelled_as_delayed=False).entity_rows(
        flights, make_settings().features
    )
    assert dropped["delayed"].tolist() == [0, 1]


def test_a_holdout_of_several_days_leaves_them_out_of_training(lake_home, make_settings) -> None:
    settings = make_settings("evaluate.holdout_days=2", home=lake_home)
    ctx = RunContext(run_id="r2", logical_date=FIRST_DAY, settings=settings)
    ingest(ctx)
    validate(ctx)
    manifest = build_features(ctx)
    holdout_days = [HISTORY[-1].isoformat(), FIRST_DAY.isoformat()]
    assert manifest.holdout_days == holdout_days and manifest.holdout_day == holdout_days[-1]
    assert manifest.train_days == [d.isoformat() for d in HISTORY[:-1]]
    holdout = pd.read_parquet(manifest.sets.holdout.path)
    train = pd.read_parquet(manifest.sets.train.path)
    assert set(holdout["flight_date"]) == set(holdout_days)
    assert not set(train["flight_date"]) & set(holdout_days)


def test_a_holdout_as_long_as_the_window_is_refused_naming_both_settings(
    lake_home, make_settings
) -> None:
    settings = make_settings("evaluate.holdout_days=4", "features.window_days=4", home=lake_home)
    ctx = RunContext(run_id="r3", logical_date=FIRST_DAY, settings=settings)
    ingest(ctx)
    validate(ctx)
    with pytest.raises(StepError, match=r"evaluate.holdout_days=4 .* features.window_days=4"):
        build_features(ctx)


def test_entity_rows_are_made_a_day_at_a_time(lake_home, make_settings, monkeypatch) -> None:
    """The window never reaches the domain as one frame: each call sees one day's rows."""
    from flight_delay.domain import Flights

    seen: list[set[str]] = []
    original = Flights.entity_rows

    def spy(self, labelled, settings):
        rows = original(self, labelled, settings)
        seen.append(set(rows["flight_date"]))
        return rows

    monkeypatch.setattr(Flights, "entity_rows", spy)
    monkeypatch.setattr("pipeline_steps.core.feature_store.ENTITY_PIECE_ROWS", 256)
    settings = make_settings(home=lake_home)
    ctx = RunContext(run_id="r1", logical_date=FIRST_DAY, settings=settings)
    ingest(ctx)
    validate(ctx)
    manifest = build_features(ctx)
    assert len(seen) > len(HISTORY) + 1  # pieces of 256 rows, several per day
    assert all(len(days) == 1 for days in seen)
    assert set().union(*seen) == {d.isoformat() for d in [*HISTORY, FIRST_DAY]}
    train = pd.read_parquet(manifest.sets.train.path, columns=["flight_id"])
    assert manifest.sets.train.rows == len(train) and train["flight_id"].is_monotonic_increasing


def test_streamed_hashes_equal_a_whole_table_write(features_run) -> None:
    """The sets are hashed as they stream out of the join, yet their sha256 is the one a whole
    table converted from pandas has (as sets frozen before the streaming join were hashed), so
    recorded runs replay to the same hashes."""
    import pyarrow as pa

    from pipeline_steps.core.lake import table_sha256

    _, manifest = features_run
    for frozen in (manifest.sets.train, manifest.sets.holdout):
        frame = pd.read_parquet(frozen.path)
        assert frame["seats"].isna().any()  # nulls under floats: the case the hash must settle
        whole = pa.Table.from_pandas(frame, preserve_index=False)
        assert table_sha256(whole) == frozen.sha256


def test_a_window_mostly_not_loaded_warns_and_names_the_seed(lake_home, make_settings, caplog):
    """Three seeded days under a 30-day window train, with a warning saying what to load."""
    from pipeline_steps.steps.features import window

    for size, warned in ((len(HISTORY) + 1, False), (30, True)):
        settings = make_settings(f"features.window_days={size}", home=lake_home)
        ctx = RunContext(run_id=f"w{size}", logical_date=FIRST_DAY, settings=settings)
        ingest(ctx)
        validate(ctx)
        caplog.clear()
        train_days, _ = window(ctx)
        assert train_days == HISTORY
        said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert bool(said) is warned, said
    window_of = f"the window 2013-05-06..{FIRST_DAY}"
    assert said[0].startswith(f"{window_of} has 3 of its 29 training days with rows")
    assert "`trainyard seed --start 2013-05-06 --end 2013-05-31`" in said[0]
