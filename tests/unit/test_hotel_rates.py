"""The hotel-rates example's domain: its source, entity rows, suite and point-in-time features.

The package lives outside ``pipeline_steps`` (``examples/hotel_rates``, installed beside
trainyard); nothing here needs the lake, Airflow or a trained model.
"""

from __future__ import annotations

import json
from datetime import date, timedelta

import pandas as pd
import pytest
from hotel_rates.domain import (
    DOMAIN,
    LABEL,
    NOT_FEATURES,
    TRAILING_DAYS,
    rate_sources,
    trailing_rates,
)
from hotel_rates.source import BOOKINGS_SCHEMA, COVERAGE, HotelRatesSource, read_hotel_rates

from pipeline_steps.core.domain import load_domain
from pipeline_steps.core.feature_store import join_features
from pipeline_steps.core.settings import FeatureSettings
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "hotel_rates"
DAY = date(2017, 3, 1)
RATES = ["room_type_rate_28d", "room_type_stays_28d", "agent_rate_28d", "agent_stays_28d"]


def bookings(first: date, last: date) -> pd.DataFrame:
    """The real bookings arriving ``first``..``last``, as the features step reads them."""
    days = [first + timedelta(days=n) for n in range((last - first).days + 1)]
    return pd.concat([read_hotel_rates(d).to_pandas() for d in days], ignore_index=True)


def test_the_source_gives_each_booking_on_its_arrival_day() -> None:
    source = HotelRatesSource(batch_rows=20)
    first, last = COVERAGE
    counts = {}
    day = first
    while day <= last:
        batches = list(source.batches("bookings", day))
        assert all(b.num_rows <= 20 and b.schema == BOOKINGS_SCHEMA for b in batches)
        counts[day] = sum(b.num_rows for b in batches)
        day += timedelta(days=1)
    # 15,402 bookings over 426 days, every day with arrivals (9 to 114)
    assert sum(counts.values()) == 15_402 and len(counts) == 426
    assert min(counts.values()) == 9 and max(counts.values()) == 114
    outside = source.availability("bookings", last + timedelta(days=1))
    assert not outside.ready and outside.final and "2017-08-31" in outside.message
    assert source.availability("bookings", first).ready


def test_the_settings_name_the_domain_by_its_own_module() -> None:
    assert load_domain("hotel_rates.domain") is DOMAIN
    assert DOMAIN.task == "regression" and DOMAIN.label == LABEL


def test_entity_rows_are_one_per_booking_with_its_rate_as_label() -> None:
    day = read_hotel_rates(DAY).to_pandas()
    rows = DOMAIN.entity_rows(day, FeatureSettings())
    assert len(rows) == len(day) > 0 and rows[DOMAIN.key].is_unique
    assert rows[DOMAIN.label].tolist() == day[LABEL].tolist()
    assert rows[DOMAIN.label].dtype == "float64"
    assert set(rows[DOMAIN.date_column]) == {"2017-03-01"}
    assert set(rows["event_timestamp"]) == {pd.Timestamp("2017-03-01", tz="UTC")}
    features = [*DOMAIN.row_features.categorical, *DOMAIN.row_features.numeric]
    assert set(features) <= set(rows.columns)
    # the key, the date as a decimal year and the label are never inputs
    assert not set(NOT_FEATURES) & set(features)
    assert {"reserved_room_type", "agent"} <= set(rows.columns)  # the join keys of the rates


def test_a_booking_is_scored_without_its_rate() -> None:
    request = read_hotel_rates(DAY).to_pandas()[list(DOMAIN.request_columns)]
    rows = DOMAIN.request_rows(request, FeatureSettings())
    assert DOMAIN.label not in rows.columns and len(rows) == len(request)


def test_trailing_rates_as_of_a_day_read_only_stays_checked_out_by_then() -> None:
    history = bookings(DAY - timedelta(days=TRAILING_DAYS + 5), DAY + timedelta(days=5))
    rates = trailing_rates(history, "reserved_room_type", [DAY])
    arrival = pd.to_datetime(history["arrival_date"])
    departure = arrival + pd.to_timedelta(
        history["stays_in_weekend_nights"] + history["stays_in_week_nights"], unit="D"
    )
    as_of = pd.Timestamp(DAY)
    known = (arrival >= as_of - pd.Timedelta(days=TRAILING_DAYS)) & (departure <= as_of)
    expected = history[known].groupby("reserved_room_type")[LABEL].agg(["mean", "size"])
    got = rates.set_index("reserved_room_type")
    assert got["room_type_rate_28d"].to_dict() == pytest.approx(expected["mean"].to_dict())
    assert got["room_type_stays_28d"].to_dict() == expected["size"].to_dict()
    assert set(rates["event_timestamp"]) == {pd.Timestamp("2017-03-01", tz="UTC")}

    # Change every rate not known on the morning of D: bookings arriving on D or later, and
    # stays that arrived before D but had not checked out. The rates as of D do not move.
    unknown = history.copy()
    unknown.loc[~known, LABEL] = 10_000.0
    assert (arrival >= as_of).any() and ((arrival < as_of) & (departure > as_of)).any()
    assert trailing_rates(unknown, "reserved_room_type", [DAY]).equals(rates)
    # ...while a stay that had checked out by D does count.
    changed = history.copy()
    changed.loc[known.idxmax(), LABEL] += 1_000.0
    assert not trailing_rates(changed, "reserved_room_type", [DAY]).equals(rates)


def test_feast_joins_each_booking_to_the_rates_of_its_own_arrival_day() -> None:
    """Point in time through Feast: a booking of day D gets the rates as of D, not a later
    day's, though the offline sources hold rows of every day of the window."""
    days = [DAY + timedelta(days=n) for n in range(4)]
    history = bookings(DAY - timedelta(days=TRAILING_DAYS), days[-1])
    labelled = history[pd.to_datetime(history["arrival_date"]).dt.date.isin(days)]
    settings = FeatureSettings(feature_repo=str(EXAMPLE / "feature_repo"))
    joined, columns = join_features(DOMAIN, settings, labelled, rate_sources(history, days))
    assert columns.numeric[-4:] == RATES
    assert len(joined) == len(labelled)
    for day in days:
        expected = trailing_rates(history, "reserved_room_type", [day]).set_index(
            "reserved_room_type"
        )
        on_day = joined[joined[DOMAIN.date_column] == day.isoformat()]
        want = on_day["reserved_room_type"].map(expected["room_type_rate_28d"])
        assert on_day["room_type_rate_28d"].to_numpy() == pytest.approx(
            want.to_numpy(), nan_ok=True
        )
    assert joined["room_type_rate_28d"].notna().mean() > 0.95
    assert joined["agent_rate_28d"].notna().mean() > 0.5  # small agents have quiet months


def test_the_suite_gives_every_column_a_rule_and_every_rule_a_reason() -> None:
    suite = json.loads((EXAMPLE / "expectations" / "bookings.json").read_text())
    kinds: dict[str, set[str]] = {name: set() for name in BOOKINGS_SCHEMA.names}
    for entry in suite["expectations"]:
        assert entry.get("meta", {}).get("why"), entry
        kwargs = entry["kwargs"]
        for column in [kwargs["column"]] if "column" in kwargs else kwargs.get("column_list", []):
            kinds[column].add(entry["type"])
    basic = {"expect_column_values_to_be_in_type_list", "expect_column_values_to_not_be_null"}
    assert {name for name, rules in kinds.items() if not rules - basic} == set()
