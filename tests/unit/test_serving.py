"""Serving reads the same features as training: online at a row's event timestamp equals point in
time; materialisation is incremental and idempotent; ``trainyard predict`` names what is wrong."""

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pyarrow.csv as pcsv
import pytest
from flight_delay.domain import DOMAIN

from pipeline_steps.commands.cli import main
from pipeline_steps.commands.serving import online_rows, read_online, request_rows
from pipeline_steps.core.context import RunContext
from pipeline_steps.core.feature_store import earliest_event, materialize_online, scratch_store
from pipeline_steps.core.manifests import FeaturesManifest
from pipeline_steps.engines.local import LocalEngine
from pipeline_steps.steps.features import build_features, feast_dir, run_store
from pipeline_steps.steps.ingest import ingest
from pipeline_steps.steps.validate import validate
from tests.conftest import FIRST_DAY, HISTORY, WINDOW, environ_of


@pytest.fixture(scope="module")
def built(ready_home: Path, tmp_path_factory) -> tuple[RunContext, FeaturesManifest]:
    """A run of FIRST_DAY whose features are built (shared by this module, read-only)."""
    from pipeline_steps.core.settings import load_settings

    home = tmp_path_factory.mktemp("serving") / "home"
    shutil.copytree(ready_home, home)
    settings = load_settings(
        overrides=[f"features.window_days={WINDOW}", "validation.data_docs=false"],
        environ=environ_of(home),
    )
    ctx = RunContext(run_id="serving", logical_date=FIRST_DAY, settings=settings)
    ingest(ctx)
    validate(ctx)
    return ctx, build_features(ctx)


def test_online_features_at_each_event_timestamp_equal_the_point_in_time_training_rows(
    built,
) -> None:
    """Every flight of the day, read online right after materialising up to its departure hour,
    has exactly the holdout's point-in-time features."""
    ctx, manifest = built
    rows = request_rows(ctx.settings, ctx.lake, DOMAIN, FIRST_DAY, None)
    served, columns = online_rows(ctx.settings, ctx.lake, DOMAIN, FIRST_DAY, rows)
    assert [*columns.categorical, *columns.numeric] == manifest.feature_columns
    assert served[DOMAIN.key].tolist() == rows[DOMAIN.key].tolist()  # the request's order
    holdout = pd.read_parquet(manifest.sets.holdout.path).set_index(DOMAIN.key)
    online = served.set_index(DOMAIN.key)
    assert sorted(online.index) == sorted(holdout.index) and len(holdout) > 500
    wanted = ["event_timestamp", *manifest.feature_columns]
    pd.testing.assert_frame_equal(online.loc[holdout.index, wanted], holdout[wanted])
    assert online["temp"].notna().mean() > 0.95 and online["seats"].notna().mean() > 0.7


def test_a_store_read_later_than_the_event_timestamp_disagrees(built) -> None:
    """The contract's timestamp matters: the morning's flights read from the store as it stands
    at the day's last departure hour get later weather than their point-in-time rows."""
    ctx, manifest = built
    rows = request_rows(ctx.settings, ctx.lake, DOMAIN, FIRST_DAY, None)
    sources, _ = DOMAIN.feature_sources(ctx.lake, [FIRST_DAY])
    first, last = rows["event_timestamp"].min(), rows["event_timestamp"].max()
    morning = rows[rows["event_timestamp"] == first]
    with scratch_store(ctx.settings.features, sources) as store:
        service = store.get_feature_service(DOMAIN.feature_service)
        materialize_online(store, service, first.to_pydatetime(), last.to_pydatetime())
        late = read_online(store, service, morning, last.to_pydatetime())
    holdout = pd.read_parquet(manifest.sets.holdout.path).set_index(DOMAIN.key)
    on_time = holdout.loc[morning[DOMAIN.key], "temp"].to_numpy()
    assert (late["temp"].astype(float).to_numpy() != on_time).any()


def test_a_value_older_than_its_ttl_is_served_missing(built) -> None:
    """Weather has a 3 h ttl: read 3 h after the store's last row it is still served, an hour
    later it is missing, as the point-in-time join leaves it; plane specs (ttl 0) stay."""
    ctx, _ = built
    rows = request_rows(ctx.settings, ctx.lake, DOMAIN, FIRST_DAY, None)
    sources, _ = DOMAIN.feature_sources(ctx.lake, [FIRST_DAY])
    at = rows["event_timestamp"].min().to_pydatetime()
    some = rows[rows["event_timestamp"] == at]
    with scratch_store(ctx.settings.features, sources) as store:
        service = store.get_feature_service(DOMAIN.feature_service)
        materialize_online(store, service, at - timedelta(days=1), at)
        within = read_online(store, service, some, at + timedelta(hours=3))
        beyond = read_online(store, service, some, at + timedelta(hours=4))
    assert within["temp"].notna().all()
    assert beyond["temp"].isna().all() and beyond["humid"].isna().all()
    assert beyond["seats"].notna().sum() == within["seats"].notna().sum() > 0


def _online_snapshot(store, service, ctx) -> pd.DataFrame:
    """Every weather origin's and plane's online values as a request at the window's end sees
    them."""
    sources, _ = DOMAIN.feature_sources(ctx.lake, [*HISTORY, FIRST_DAY])
    origins = pd.concat(sources["weather"])["origin"].drop_duplicates().tolist()
    tails = sources["planes"]["tailnum"].drop_duplicates().tolist()
    rows = pd.DataFrame(
        {"origin": (origins * len(tails))[: len(tails)], "tailnum": tails}, dtype=object
    )
    end = datetime.combine(FIRST_DAY + timedelta(days=1), datetime.min.time(), UTC)
    return read_online(store, service, rows, end)


def test_materialising_again_reads_nothing_and_changes_nothing(built, monkeypatch) -> None:
    ctx, manifest = built
    assert manifest.materialized is not None
    start = datetime.fromisoformat(manifest.materialized.start)
    end = datetime.fromisoformat(manifest.materialized.end)
    with run_store(ctx, ctx.lake.url(feast_dir(ctx.run_id)), LocalEngine()) as store:
        service = store.get_feature_service(DOMAIN.feature_service)
        views = [p.name for p in service.feature_view_projections]
        intervals = {v: store.get_feature_view(v).materialization_intervals for v in views}
        assert all(intervals.values())
        before = _online_snapshot(store, service, ctx)
        assert before["temp"].notna().any() and before["seats"].notna().any()

        calls = []
        for name in ("materialize", "materialize_incremental"):
            method = getattr(store, name)
            monkeypatch.setattr(
                store, name, lambda *a, _m=method, _n=name, **k: calls.append(_n) or _m(*a, **k)
            )
        assert materialize_online(store, service, start, end) is None
        assert calls == []  # nothing read from the offline store
        assert {v: store.get_feature_view(v).materialization_intervals for v in views} == intervals
        pd.testing.assert_frame_equal(_online_snapshot(store, service, ctx), before)
        # an hour later: only that hour is read, from where the last materialisation ended
        later = end + timedelta(hours=1)
        written = materialize_online(store, service, start, later)
        assert written is not None and written.start == end.isoformat()
        assert calls == ["materialize_incremental"]
        for view in views:
            assert store.get_feature_view(view).materialization_intervals[-1] == (end, later)


def test_materialising_in_steps_equals_materialising_at_once(built) -> None:
    ctx, _ = built
    rows = request_rows(ctx.settings, ctx.lake, DOMAIN, FIRST_DAY, None)
    sources, _ = DOMAIN.feature_sources(ctx.lake, [FIRST_DAY])
    hours = sorted(rows["event_timestamp"].unique())
    end = pd.Timestamp(hours[-1]).to_pydatetime()
    snapshots = []
    for steps in ([end], [pd.Timestamp(h).to_pydatetime() for h in hours]):
        with scratch_store(ctx.settings.features, sources) as store:
            service = store.get_feature_service(DOMAIN.feature_service)
            start = earliest_event(store, service)
            for step in steps:
                materialize_online(store, service, start, step)
            snapshots.append(read_online(store, service, rows, end))
    assert len(hours) > 10
    pd.testing.assert_frame_equal(snapshots[0], snapshots[1])


# -- trainyard predict: what it refuses, naming the parameter or file ---------------------------


@pytest.fixture
def home(lake_home: Path, monkeypatch) -> Path:
    monkeypatch.setenv("TRAINYARD_HOME", str(lake_home))
    return lake_home


def _flights_csv(home: Path, tmp_path: Path, drop: tuple[str, ...] = ()) -> Path:
    """One validated history day's flights as a CSV file, without ``drop``."""
    from pipeline_steps.core.lake import Lake

    lake = Lake(str(home / "lake" / "flight_delay"))
    folder = lake.validated_partition("flights", HISTORY[-1])
    assert folder is not None
    table = lake.read_table(folder, "data.parquet").slice(0, 20).drop_columns(list(drop))
    path = tmp_path / "flights.csv"
    pcsv.write_csv(table, path)
    return path


def test_predict_names_a_day_that_is_not_validated(home, capsys) -> None:
    assert main(["predict", "--logical-date", "2013-07-01"]) == 2
    err = capsys.readouterr().err
    assert "--logical-date 2013-07-01: no validated flights, weather, planes partition" in err
    assert "trainyard seed --start 2013-07-01 --end 2013-07-01" in err


def test_predict_names_the_columns_a_flights_file_lacks(home, tmp_path, capsys) -> None:
    path = _flights_csv(home, tmp_path, drop=("time_hour", "tailnum", "arr_delay"))
    day = HISTORY[-1].isoformat()
    assert main(["predict", "--logical-date", day, "--rows", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"--rows {path} lacks column(s) tailnum, time_hour" in err


def test_predict_refuses_flights_of_another_day(home, tmp_path, capsys) -> None:
    path = _flights_csv(home, tmp_path)
    day = HISTORY[0].isoformat()
    assert main(["predict", "--logical-date", day, "--rows", str(path)]) == 2
    assert f"20 row(s) dated other than --logical-date {day}" in capsys.readouterr().err


def test_predict_without_a_champion_says_so(home, tmp_path, capsys) -> None:
    # a file without the label's source is a valid request: only the champion is missing
    path = _flights_csv(home, tmp_path, drop=("arr_delay", "dep_delay", "arr_time"))
    day = HISTORY[-1].isoformat()
    assert main(["predict", "--logical-date", day, "--rows", str(path)]) == 2
    err = capsys.readouterr().err
    assert "no champion: registered model 'flight_delay' has no version with alias" in err


def test_predict_names_an_output_it_cannot_write(home, capsys) -> None:
    day = HISTORY[-1].isoformat()
    assert main(["predict", "--logical-date", day, "--output", "out.json"]) == 2
    assert "--output out.json: write .parquet or .csv, not .json" in capsys.readouterr().err


def test_a_training_set_rebuilt_from_other_inputs_reloads_the_online_store(
    lake_home, make_settings
) -> None:
    """Rebuilt with other inputs, the run's sources were rewritten: materialising incrementally
    would keep the old values, so every view is loaded again over the whole window."""
    ctx = RunContext(run_id="r1", logical_date=FIRST_DAY, settings=make_settings(home=lake_home))
    ingest(ctx)
    validate(ctx)
    first = build_features(ctx)
    other = RunContext(
        run_id="r1",
        logical_date=FIRST_DAY,
        settings=make_settings("features.row_group_rows=2048", home=lake_home),
    )
    again = build_features(other)
    assert again.status == "built" and again.input_sha256 != first.input_sha256
    assert first.materialized is not None and again.materialized == first.materialized
    window = (
        datetime.fromisoformat(first.materialized.start),
        datetime.fromisoformat(first.materialized.end),
    )
    with run_store(other, other.lake.url(feast_dir(other.run_id)), LocalEngine()) as store:
        for view in ("weather_hourly", "plane_specs"):
            assert store.get_feature_view(view).materialization_intervals == [window, window]
