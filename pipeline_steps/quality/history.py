"""A day's distribution against its trailing history: the bounds of the suites' history checks.

Each value of a day can be plausible while the day as a whole is not: a unit changed upstream
(temperatures in Celsius, humidity as a fraction) keeps every value inside its column's range and
every relation between columns true. A *history check* is a suite expectation on one statistic
of a column whose bounds come from the trailing validated days, declared by ``meta.history``:

.. code-block:: json

    {"type": "expect_column_mean_to_be_between",
     "kwargs": {"column": "temp",
                "min_value": {"$PARAMETER": "temp_mean_min"},
                "max_value": {"$PARAMETER": "temp_mean_max"}},
     "severity": "critical",
     "meta": {"why": "...", "history": {"allowance": 12}}}

The statistic follows from the expectation: ``mean`` and ``stdev`` for numeric columns,
``distinct`` (count of distinct values) and ``top_share`` (share of the most common value among
the values present) for categorical ones. Its bounds are ``center ± allowance * spread``: the
center is the median of the statistic over the trailing days, the spread 1.4826 times their
median absolute deviation (a standard deviation for normal data, unmoved by one odd day), at least
``validation.history_floor`` of the center so that a statistic constant over the trailing days
(a registry snapshot, three airports every day) still tolerates a small change. Spreads, distinct
counts and means declared ``"scale": "log"`` are judged on the log scale, where a change of unit
is a shift and the bounds a factor either way. Allowances are calibrated on real days
(``benchmarks/history_calibration.py``): the warning one just above the largest deviation an
ordinary day of 2013 shows, the critical one half as far again.

With fewer than ``validation.history_min_days`` trailing days the bounds stay open
(:func:`open_bounds`), and the validation report says which checks were not applied.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline_steps.core.errors import StepError

if TYPE_CHECKING:
    from great_expectations.core.expectation_suite import ExpectationSuite

    from pipeline_steps.core.lake import Lake

Statistic = Literal["mean", "stdev", "distinct", "top_share"]
STATISTICS: dict[str, Statistic] = {
    "expect_column_mean_to_be_between": "mean",
    "expect_column_stdev_to_be_between": "stdev",
    "expect_column_unique_value_count_to_be_between": "distinct",
    "expect_column_top_value_share_to_be_between": "top_share",
}
"""The expectations a history check may be, and the statistic each bounds."""
LINEAR = ("mean", "top_share")
"""Statistics judged on the linear scale unless declared otherwise."""
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True, kw_only=True, slots=True)
class HistoryCheck:
    """One suite expectation whose bounds come from the trailing days."""

    column: str
    statistic: Statistic
    allowance: float
    """Bounds at the trailing center plus or minus ``allowance`` spreads."""
    log: bool
    """Judged on the log scale (the default for ``stdev`` and ``distinct``, and for a ``mean``
    declared ``"scale": "log"``: a column of positive values whose units may change)."""
    severity: str
    min_parameter: str | None
    max_parameter: str | None


def history_checks(suite: ExpectationSuite) -> list[HistoryCheck]:
    """The suite's expectations declared with ``meta.history``. Raises ``StepError`` naming the
    suite and expectation when one is not of a kind in ``STATISTICS`` or has no allowance."""
    checks = []
    for index, expectation in enumerate(suite.expectations):
        history = (expectation.meta or {}).get("history")
        if history is None:
            continue
        kind = expectation.expectation_type
        where = f"suite {suite.name}: expectations[{index}] ({kind})"
        if kind not in STATISTICS:
            raise StepError(f"{where}: meta.history is for {', '.join(STATISTICS)} only")
        allowance = history.get("allowance") if isinstance(history, dict) else None
        if not isinstance(allowance, int | float) or allowance <= 0:
            raise StepError(f"{where}: meta.history.allowance must be a positive number")
        scale = history.get("scale", "linear" if STATISTICS[kind] in LINEAR else "log")
        if scale not in ("linear", "log"):
            raise StepError(f"{where}: meta.history.scale must be 'linear' or 'log'")
        kwargs = expectation.configuration.kwargs
        checks.append(
            HistoryCheck(
                column=kwargs["column"],
                statistic=STATISTICS[kind],
                allowance=float(allowance),
                log=scale == "log",
                severity=str(getattr(expectation, "severity", "critical"))
                .rsplit(".", 1)[-1]
                .lower(),
                min_parameter=_parameter(kwargs.get("min_value")),
                max_parameter=_parameter(kwargs.get("max_value")),
            )
        )
    return checks


def _parameter(value: Any) -> str | None:
    return value.get("$PARAMETER") if isinstance(value, dict) else None


def open_bounds(checks: Iterable[HistoryCheck]) -> dict[str, None]:
    """Every bound parameter of ``checks`` left open (no history to judge against)."""
    names = (n for c in checks for n in (c.min_parameter, c.max_parameter) if n)
    return dict.fromkeys(names)


# -- the statistics of one day ---------------------------------------------------------------

DayStatistics = dict[str, float | None]
"""``"<column>.<statistic>"`` → its value on one day (None: no value present)."""


def statistics_key(column: str, statistic: str) -> str:
    return f"{column}.{statistic}"


def table_statistics(
    batches: Iterable[pa.RecordBatch], wanted: Iterable[tuple[str, str]]
) -> DayStatistics:
    """The statistics ``wanted`` (column, statistic) of a day's rows, streamed batch by batch
    (see :class:`Accumulator`)."""
    accumulator = Accumulator(wanted)
    for batch in batches:
        accumulator.add(batch)
    return accumulator.result()


class Accumulator:
    """Statistics gathered batch by batch in bounded memory: mean and sample standard
    deviation of the values present (float NaN counts as missing, as pandas has it), count of
    distinct values present and the share of the most common one."""

    def __init__(self, wanted: Iterable[tuple[str, str]]) -> None:
        self.wanted = sorted(set(wanted))
        numeric = {c for c, s in self.wanted if s in ("mean", "stdev")}
        categorical = {c for c, s in self.wanted if s in ("distinct", "top_share")}
        self.moments = {c: _Moments() for c in numeric}
        self.counts: dict[str, Counter[Any]] = {c: Counter() for c in categorical}

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        names = set(batch.schema.names)
        for column in self.moments.keys() & names:
            self.moments[column].add(batch.column(column))
        for column in self.counts.keys() & names:
            values = pc.value_counts(pc.drop_null(batch.column(column)))
            pairs = zip(
                values.field("values").to_pylist(),
                values.field("counts").to_pylist(),
                strict=True,
            )
            self.counts[column].update(dict(pairs))

    def result(self) -> DayStatistics:
        return {statistics_key(c, s): self.value(c, s) for c, s in self.wanted}

    def value(self, column: str, statistic: str) -> float | None:
        """One statistic over the batches added (None: no value present)."""
        if statistic in ("mean", "stdev"):
            moments = self.moments[column]
            return moments.mean if statistic == "mean" else moments.stdev
        counts = self.counts[column]
        if not counts:
            return None
        if statistic == "distinct":
            return float(len(counts))
        return max(counts.values()) / sum(counts.values())


class _Moments:
    """Count, mean and sum of squared deviations, merged batch by batch (Chan et al.)."""

    def __init__(self) -> None:
        self.n, self.m, self.m2 = 0, 0.0, 0.0

    def add(self, column: pa.Array | pa.ChunkedArray) -> None:
        values = pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False)
        values = values[~np.isnan(values)]
        if not len(values):
            return
        n, m = len(values), float(values.mean())
        m2 = float(((values - m) ** 2).sum())
        total = self.n + n
        delta = m - self.m
        self.m += delta * n / total
        self.m2 += m2 + delta * delta * self.n * n / total
        self.n = total

    @property
    def mean(self) -> float | None:
        return self.m if self.n else None

    @property
    def stdev(self) -> float | None:
        return math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else None


def partition_statistics(
    lake: Lake, folder: str, wanted: Iterable[tuple[str, str]]
) -> DayStatistics:
    """The statistics of a lake partition's ``data.parquet``, kept per process by content (a
    validated partition is read once however many later days it is history of)."""
    path = lake.path(folder, "data.parquet")
    key = (path, lake.partition_manifest(folder).sha256, tuple(sorted(wanted)))
    if key not in _STATISTICS:
        columns = sorted({c for c, _ in key[2]})
        with lake.fs.open(path, "rb") as fh:
            parquet = pq.ParquetFile(fh)
            present = [c for c in columns if c in parquet.schema_arrow.names]
            batches = parquet.iter_batches(batch_size=65_536, columns=present)
            if len(_STATISTICS) >= 1024:
                _STATISTICS.clear()
            _STATISTICS[key] = table_statistics(batches, key[2])
    return dict(_STATISTICS[key])


_STATISTICS: dict[tuple[str, str, tuple[tuple[str, str], ...]], DayStatistics] = {}


# -- bounds from the trailing days -----------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Band:
    """A statistic over the trailing days: its center and spread, on a linear or log scale."""

    center: float
    spread: float
    log: bool

    def bounds(self, allowance: float, statistic: Statistic) -> tuple[float, float]:
        """The statistic's accepted range, ``center`` plus or minus ``allowance`` spreads (on a
        log scale: a factor ``exp(allowance * spread)`` either way)."""
        low, high = self.center - allowance * self.spread, self.center + allowance * self.spread
        if self.log:
            low, high = math.exp(low), math.exp(high)
        elif statistic != "mean":
            low = max(low, 0.0)
        if statistic == "top_share":
            high = min(high, 1.0)
        if statistic == "distinct":  # a count: the whole numbers inside the band
            inner = math.ceil(low - 1e-9), math.floor(high + 1e-9)
            return inner if inner[0] <= inner[1] else (math.floor(low), math.ceil(high))
        return _round(low), _round(high)

    def deviation(self, value: float) -> float:
        """How many spreads ``value`` lies from the center (signed; minus infinity for a value
        that is not positive on the log scale)."""
        if self.log:
            if value <= 0:
                return -math.inf
            value = math.log(value)
        return (value - self.center) / self.spread


def _round(value: float) -> float:
    return float(f"{value:.6g}")


def band(values: Iterable[float | None], floor: float, log: bool) -> Band | None:
    """Median and robust spread of a statistic's trailing values (None: no day had one).

    ``log``: measured on the log scale (a unit change multiplies a statistic), unless a trailing
    value is not positive, when the linear scale is used. The spread is 1.4826 median absolute
    deviations, at least ``floor`` (relative: of the center, or on the log scale)."""
    known = np.array([v for v in values if v is not None and not math.isnan(v)], float)
    if not len(known):
        return None
    log = log and bool((known > 0).all())
    if log:
        known = np.log(known)
    center = float(np.median(known))
    mad = float(np.median(np.abs(known - center)))
    least = floor if log else floor * abs(center)
    spread = max(MAD_TO_SIGMA * mad, least, 1e-9)
    return Band(center=center, spread=spread, log=log)


def history_bounds(
    checks: Iterable[HistoryCheck], trailing: list[DayStatistics], floor: float
) -> dict[str, float | None]:
    """The bound parameters of ``checks`` from the trailing days' statistics; open (None) for a
    statistic no trailing day has."""
    parameters: dict[str, float | None] = {}
    for check in checks:
        key = statistics_key(check.column, check.statistic)
        found = band((day.get(key) for day in trailing), floor, check.log)
        low, high = found.bounds(check.allowance, check.statistic) if found else (None, None)
        if check.min_parameter:
            parameters[check.min_parameter] = low
        if check.max_parameter:
            parameters[check.max_parameter] = high
    return parameters


def wanted_statistics(checks: Iterable[HistoryCheck]) -> set[tuple[str, str]]:
    return {(c.column, c.statistic) for c in checks}
