"""Feast definitions: weather at the origin airport by hour, and plane specs by tail number.

The features step writes the offline sources under ``$TRAINYARD_FEAST_DIR/sources`` from the
validated partitions, then applies every object defined here.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from feast import Entity, FeatureService, FeatureView, Field, ValueType
from feast.types import Float64, Int64, String

from pipeline_steps.core.feast_sources import offline_source

SOURCES = Path(os.environ.get("TRAINYARD_FEAST_DIR", Path(__file__).parent / "data")) / "sources"

origin = Entity(
    name="origin",
    join_keys=["origin"],
    value_type=ValueType.STRING,
    description="Departure airport (FAA code).",
)
tailnum = Entity(
    name="tailnum",
    join_keys=["tailnum"],
    value_type=ValueType.STRING,
    description="Aircraft tail number.",
)

weather_hourly = FeatureView(
    name="weather_hourly",
    entities=[origin],
    # An observation older than three hours says little about conditions at departure.
    ttl=timedelta(hours=3),
    schema=[
        Field(name="temp", dtype=Float64, description="Temperature, F"),
        Field(name="dewp", dtype=Float64, description="Dew point, F"),
        Field(name="humid", dtype=Float64, description="Relative humidity, %"),
        Field(name="wind_dir", dtype=Float64, description="Wind direction, degrees"),
        Field(name="wind_speed", dtype=Float64, description="Wind speed, mph"),
        Field(name="wind_gust", dtype=Float64, description="Gust speed, mph"),
        Field(name="precip", dtype=Float64, description="Precipitation, inches"),
        Field(name="pressure", dtype=Float64, description="Sea level pressure, millibars"),
        Field(name="visib", dtype=Float64, description="Visibility, miles"),
    ],
    source=offline_source("weather_source", str(SOURCES / "weather.parquet")),
    description="Hourly weather at the origin airport, as observed at or before departure.",
)

plane_specs = FeatureView(
    name="plane_specs",
    entities=[tailnum],
    ttl=timedelta(0),  # the registry snapshot stays valid until a newer one replaces it
    schema=[
        Field(name="plane_year", dtype=Int64, description="Year of manufacture"),
        Field(name="plane_type", dtype=String, description="Aircraft type"),
        Field(name="manufacturer", dtype=String, description="Manufacturer"),
        Field(name="engines", dtype=Int64, description="Number of engines"),
        Field(name="seats", dtype=Int64, description="Number of seats"),
        Field(name="engine", dtype=String, description="Engine type"),
    ],
    source=offline_source("planes_source", str(SOURCES / "planes.parquet")),
    description="Aircraft registry facts by tail number.",
)

flight_delay_features = FeatureService(
    name="flight_delay_features",
    features=[weather_hourly, plane_specs],
    description="Features joined to each flight for the delay model.",
)
