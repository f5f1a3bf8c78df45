"""Bounds a day is judged by that come from the trailing validated days of its dataset.

The row count around the trailing mean, the least share of values present per column, and the
bounds of the suite's history checks (:mod:`pipeline_steps.quality.history`). The validate step
and ``trainyard validate --path`` both read them here, so a file checked by hand gets the verdict
the pipeline would give its partition.
"""

from __future__ import annotations

import math
import statistics
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from pipeline_steps.core.lake import Lake
from pipeline_steps.core.settings import ValidationSettings
from pipeline_steps.quality.history import (
    history_bounds,
    history_checks,
    open_bounds,
    partition_statistics,
    wanted_statistics,
)
from pipeline_steps.quality.open_sets import known_values, open_sets
from pipeline_steps.quality.suites import (
    PRESENT_MIN,
    UNBOUNDED,
    chance_share,
    floor_share,
    size_parameters,
)

if TYPE_CHECKING:
    from great_expectations.core.expectation_suite import ExpectationSuite

MIN_HISTORY = 3  # trailing days needed before row counts are judged against their mean
UNSEEN_MISSING = 0.5
"""Missing values a column none of whose trailing rows missed is taken to have missed in them
(the Jeffreys prior's half an event): its rate for the chance allowance of a small day."""


def trailing_days(lake: Lake, dataset: str, day: date, settings: ValidationSettings) -> list[date]:
    """The validated days of ``dataset`` in the ``trailing_days`` before ``day``."""
    return [
        d
        for d in lake.partition_dates("validated", dataset)
        if day - timedelta(days=settings.trailing_days) <= d < day
    ]


def suite_parameters(
    lake: Lake,
    dataset: str,
    day: date,
    settings: ValidationSettings,
    *,
    suite: ExpectationSuite | None = None,
    coverage: tuple[date, date] | None = None,
    ingested_at: str | None = None,
    rows: int | None = None,
) -> dict[str, Any]:
    """Run-time values the suites refer to: the partition date, the source's coverage, the
    ingest time, and bounds from the trailing validated days on the row count, per column the
    share of values present (``<column>_present_min``), and the bounds of the ``suite``'s
    history checks (:mod:`pipeline_steps.quality.history`; open with fewer than
    ``validation.history_min_days`` days). ``rows``, the day's row count, sizes the chance
    allowance of its missing shares and drafted value sets (``validation.share_noise``)."""
    history = trailing_days(lake, dataset, day, settings)
    folders = [Lake.partition("validated", dataset, d) for d in history]
    trailing = [
        (lake.partition_manifest(folder).rows, partition_missing_shares(lake, folder))
        for folder in (folders if len(folders) >= MIN_HISTORY else [])
    ]
    sets = open_sets(suite) if suite is not None else {}
    checks = history_checks(suite) if suite is not None else []
    bounds: dict[str, Any] = open_bounds(checks)
    if checks and len(folders) >= settings.history_min_days:
        wanted = wanted_statistics(checks)
        profiles = [partition_statistics(lake, folder, wanted) for folder in folders]
        bounds = history_bounds(checks, profiles, settings.history_floor)
    return UNBOUNDED | {
        "partition_year": day.year,
        "partition_month": day.month,
        "partition_day": day.day,
        **trailing_bounds(trailing, settings, rows),
        **(size_parameters(suite, rows, settings.share_noise) if suite is not None else {}),
        **bounds,
        **(
            {"coverage_first": coverage[0].isoformat(), "coverage_last": coverage[1].isoformat()}
            if coverage
            else {}
        ),
        **({"ingested_at": ingested_at} if ingested_at else {}),
        **(known_values(lake, folders, sets) if sets else {}),
    }


def unapplied_checks(
    lake: Lake, dataset: str, day: date, settings: ValidationSettings, suite: ExpectationSuite
) -> list[str]:
    """What the trailing history was too short to judge, and why (empty: everything applied)."""
    days = len(trailing_days(lake, dataset, day, settings))
    where = f"{days} validated {dataset} day(s) in the {settings.trailing_days} days before {day}"
    found = []
    if days < MIN_HISTORY:
        found.append(f"row count and missing-share bounds: {where}, {MIN_HISTORY} needed")
    checks = history_checks(suite)
    if checks and days < settings.history_min_days:
        columns = sorted({c.column for c in checks})
        found.append(
            f"history checks of {', '.join(columns)} (mean, spread, distinct values, top share): "
            f"{where}, validation.history_min_days={settings.history_min_days} needed"
        )
    return found


def trailing_bounds(
    trailing: list[tuple[int, dict[str, float]]],
    settings: ValidationSettings,
    rows: int | None = None,
) -> dict[str, Any]:
    """Bounds from the trailing days' row counts and missing shares per column (one pair per
    day; fewer than ``MIN_HISTORY`` days leave them open): ``row_count_min``/``max`` around the
    mean count. The highest: ``row_count_high`` times the mean widened by ``row_count_noise``
    times the larger of the mean's square root and the trailing counts' standard deviation, or,
    when more, ``row_count_noise`` standard deviations of the log counts above their mean (a
    bursty source). The lowest: ``row_count_low`` times the mean, or, when fewer, what chance
    allows at ``row_count_noise`` standard deviations, of a Poisson count and of the log counts
    (a day of 5 stops after days of 140 is refused; a day of 1 rating after sessions is not);
    and
    ``<column>_present_min``, the least share of values present: 1 minus
    ``null_share_factor`` times the mean missing share minus ``null_share_floor``, or, when more,
    the share a day of ``rows`` rows reaches by chance (``share_noise``, ``chance_share``) at
    ``null_share_factor`` times the mean share (at least ``UNSEEN_MISSING`` over the trailing
    rows): a column all missing on a day of a few rows can be chance, and passes where it
    is."""
    if len(trailing) < MIN_HISTORY:
        return {"row_count_min": 0, "row_count_max": 10**12}
    counts = [rows for rows, _ in trailing]
    mean = statistics.fmean(counts)
    k = settings.row_count_noise
    # chance: a Poisson count's spread, or the trailing days' own where they vary more (bursts)
    highest = mean * settings.row_count_high + k * max(math.sqrt(mean), statistics.stdev(counts))
    lowest = mean * settings.row_count_low
    if k:
        # the fewest rows chance allows: a Poisson count's, and, below it, what the trailing
        # days' own spread allows on the log scale (a source of sessions varies by multiples;
        # a steady one's weekly rhythm by a fraction, so a day of a few rows is still refused)
        lowest = min(lowest, mean - k * math.sqrt(mean))
    if k and all(counts):
        logs = [math.log(n) for n in counts]
        centre, spread = statistics.fmean(logs), statistics.stdev(logs)
        highest = max(highest, math.exp(centre + k * spread))
        lowest = min(lowest, math.exp(centre - k * spread))
    bounds: dict[str, Any] = {
        "row_count_min": max(0, math.floor(lowest)),
        "row_count_max": math.ceil(highest),
    }
    columns = sorted({column for _, shares in trailing for column in shares})
    seen = sum(counts)
    for column in columns:
        known = [shares[column] for _, shares in trailing if column in shares]
        share = sum(known) / len(known)
        missing = settings.null_share_factor * share + settings.null_share_floor
        if rows and settings.share_noise:
            # a share never seen in ``seen`` trailing rows is no proof of none: half a missing
            # value in them (Jeffreys'), as the chance allowance on top is already a tail bound
            rate = settings.null_share_factor * max(share, UNSEEN_MISSING / max(seen, 1))
            missing = max(missing, chance_share(rate, rows, settings.share_noise))
        bounds[f"{column}{PRESENT_MIN}"] = floor_share(1.0 - missing)
    return bounds


def partition_missing_shares(lake: Lake, folder: str) -> dict[str, float]:
    with lake.fs.open(lake.path(folder, "data.parquet"), "rb") as fh:
        return missing_shares(pq.ParquetFile(fh))


def missing_shares(parquet: pq.ParquetFile) -> dict[str, float]:
    """Share of missing values per column of a parquet file, from its row-group statistics
    (the column is read where a writer left them out)."""
    meta = parquet.metadata
    if meta.num_rows == 0:
        return {}
    nulls: dict[str, int] = {}
    for index, name in enumerate(parquet.schema_arrow.names):
        total = 0
        for group in range(meta.num_row_groups):
            stats = meta.row_group(group).column(index).statistics
            if stats is None or not stats.has_null_count:
                total = parquet.read(columns=[name]).column(0).null_count
                break
            total += stats.null_count
        nulls[name] = total
    return {name: count / meta.num_rows for name, count in nulls.items()}
