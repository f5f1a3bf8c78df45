"""Feast definitions: trailing room rates per reserved room type and per booking agent.

Each day D of a window has one row per room type (and per agent) with the mean rate and the
number of the stays that arrived in the 28 days before D and had checked out by D
(``hotel_rates.domain.trailing_rates``). Rows are stamped D 00:00 UTC, the bookings arriving on
D are stamped the same instant, so Feast's point-in-time join gives a booking the rates known on
its arrival day and never a later day's. The features step writes the offline sources under
``$TRAINYARD_FEAST_DIR/sources`` from the validated partitions, then applies every object
defined here.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from feast import Entity, FeatureService, FeatureView, Field, ValueType
from feast.types import Float64, Int64

from pipeline_steps.core.feast_sources import offline_source

SOURCES = Path(os.environ.get("TRAINYARD_FEAST_DIR", Path(__file__).parent / "data")) / "sources"

room_type = Entity(
    name="reserved_room_type",
    join_keys=["reserved_room_type"],
    value_type=ValueType.STRING,
    description="Room type the guest booked (an anonymised letter).",
)
agent = Entity(
    name="agent",
    join_keys=["agent"],
    value_type=ValueType.STRING,
    description="Travel agent who made the booking (anonymised; not_applicable without one).",
)

room_type_rates = FeatureView(
    name="room_type_rates",
    entities=[room_type],
    # A day's row covers the trailing 28 days; yesterday's is the newest a booking may fall
    # back on (no stay of its room type checked out in them): older says little of the season.
    ttl=timedelta(days=1),
    schema=[
        Field(name="room_type_rate_28d", dtype=Float64, description="Mean rate, euros"),
        Field(name="room_type_stays_28d", dtype=Int64, description="Stays it averages"),
    ],
    source=offline_source("room_type_rates_source", str(SOURCES / "room_type_rates.parquet")),
    description="Trailing 28-day mean rate of the stays in the booked room type.",
)

agent_rates = FeatureView(
    name="agent_rates",
    entities=[agent],
    ttl=timedelta(days=1),
    schema=[
        Field(name="agent_rate_28d", dtype=Float64, description="Mean rate, euros"),
        Field(name="agent_stays_28d", dtype=Int64, description="Stays it averages"),
    ],
    source=offline_source("agent_rates_source", str(SOURCES / "agent_rates.parquet")),
    description="Trailing 28-day mean rate of the stays the agent booked.",
)

hotel_rate_features = FeatureService(
    name="hotel_rate_features",
    features=[room_type_rates, agent_rates],
    description="Features joined to each booking for the rate model.",
)
