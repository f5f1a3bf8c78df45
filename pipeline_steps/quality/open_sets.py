"""Value sets of names that keep coming: every season brings new storms, agents, products.

A drafted value set is closed when the sample's values all arrived early; it is **open** when
new values still arrive in the second half of the sample's days (``OPEN_GROWTH``), as names do.
An open set is judged against history, not the sample alone: a day's values must lie in the
sample's values or those of the trailing validated days (the ``<column>_known_values``
parameter, :func:`known_values`), so last week's new names are known today. New values warn;
a share of them beyond what the sample's own days showed (each day against the days before it)
fails, unless the sample had days made only of new values or days without rows (after a quiet
spell a day may bring only new names: a season's first storm), when the set only warns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from great_expectations.core.expectation_suite import ExpectationSuite

    from pipeline_steps.core.lake import Lake

OPEN_GROWTH = 0.05
"""Least share of a set's values first seen in the second half of the sample's days for the
set to be open."""
OPEN_MIN_VALUES = 6
"""Fewest distinct values an open set has: a few values arriving late (a fixed vocabulary of
four races) are a closed set."""
KNOWN_VALUES = "_known_values"
"""Suffix of the parameter ``<column>_known_values``: the sample's values and those of the
trailing validated days."""


@dataclass(frozen=True, slots=True)
class Arrivals:
    """How a column's values arrived over the sample's days."""

    growth: float
    """Share of its values first seen in the second half of the days."""
    turnover: float
    """Mean share of a second-half day's rows whose values the days before it lacked."""
    worst: float
    """The largest such share."""
    gapless: bool = True
    """The sample has rows on every day it spans."""


def arrivals(
    values: pa.ChunkedArray, days: pa.ChunkedArray, *, gapless: bool = True
) -> Arrivals | None:
    """How ``values`` arrived over ``days`` (each row's day; ``gapless``: the sample has rows on
    every day it spans); None with fewer than 4 days."""
    present = pc.and_(pc.is_valid(values), pc.is_valid(days))
    table = pa.table({"value": values.filter(present), "day": days.filter(present)})
    order = sorted(pc.unique(table.column("day")).to_pylist())
    if len(order) < 4:
        return None
    half = len(order) // 2
    by_day: dict[Any, list[Any]] = {}
    for value, day in zip(
        table.column("value").to_pylist(), table.column("day").to_pylist(), strict=True
    ):
        by_day.setdefault(day, []).append(value)
    seen: set[Any] = set()
    shares = []
    early = 0
    for index, day in enumerate(order):
        rows = by_day[day]
        if index == half:
            early = len(seen)
        if index >= half:
            shares.append(sum(v not in seen for v in rows) / len(rows))
        seen.update(rows)
    return Arrivals(
        growth=(len(seen) - early) / max(len(seen), 1),
        turnover=sum(shares) / len(shares),
        worst=max(shares),
        gapless=gapless,
    )


def is_open(found: Arrivals | None, distinct: int) -> bool:
    """Whether a set with these arrivals and ``distinct`` values is open."""
    return found is not None and distinct >= OPEN_MIN_VALUES and found.growth >= OPEN_GROWTH


def open_sets(suite: ExpectationSuite) -> dict[str, tuple[str, list[Any]]]:
    """The suite's open value sets: parameter name -> (column, the sample's values)."""
    found = {}
    for expectation in suite.expectations:
        sample = (expectation.meta or {}).get("open_set")
        value_set = expectation.configuration.kwargs.get("value_set")
        if sample is not None and isinstance(value_set, dict) and "$PARAMETER" in value_set:
            column = expectation.configuration.kwargs["column"]
            found[value_set["$PARAMETER"]] = (column, list(sample))
    return found


def known_values(
    lake: Lake, folders: Iterable[str], sets: dict[str, tuple[str, list[Any]]]
) -> dict[str, list[Any]]:
    """Each open set's known values: the sample's and those of the partitions in ``folders``
    (the trailing validated days)."""
    known = {name: set(sample) for name, (_, sample) in sets.items()}
    columns = {column for column, _ in sets.values()}
    for folder in folders:
        with lake.fs.open(lake.path(folder, "data.parquet"), "rb") as fh:
            parquet = pq.ParquetFile(fh)
            held = [c for c in columns if c in parquet.schema_arrow.names]
            if not held:
                continue
            table = parquet.read(columns=held)
        for name, (column, _) in sets.items():
            if column in table.column_names:
                known[name].update(pc.unique(table.column(column).drop_null()).to_pylist())
    return {
        name: sorted(values, key=lambda v: (type(v).__name__, v)) for name, values in known.items()
    }
