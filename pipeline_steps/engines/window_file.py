"""The drift monitor's windows on the local engine, spilled to a Parquet file.

The reference and current windows' joined rows are written once, a record batch at a time, with
the champion's prediction signal scored batch by batch (:func:`write_window`). Each row's day is
read back once, as an index; each statistic then reads its one column back a batch at a time
(:class:`FileCounts`, the local engine's
:class:`~pipeline_steps.quality.calibration.WindowCounts`): memory holds the day index (two bytes
a row), a batch, the counts, and for a numeric column its present reference values (its quantile
bins need them), whatever the window's length. Bins and categories are those of
:func:`~pipeline_steps.quality.calibration.numeric_counts` and
:func:`~pipeline_steps.quality.calibration.categorical_counts`, so the verdict is the one
measured on whole frames.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline_steps.core.domain import FeatureColumns
from pipeline_steps.core.errors import StepError
from pipeline_steps.quality.calibration import (
    PREDICTION,
    category_labels,
    numeric_bins,
    numeric_edges,
)

BATCH_ROWS = 65_536  # rows read back at a time


class FileCounts:
    """Per-day counts of the window file ``path``: ``day_column`` holds each row's day (ISO);
    rows of ``reference_days`` are the reference, rows of ``current_days`` the current window.
    Each row's day is read once (two bytes a row); every count then reads one column."""

    def __init__(
        self,
        path: str | Path,
        day_column: str,
        reference_days: Sequence[date],
        current_days: Sequence[date],
        batch_rows: int = BATCH_ROWS,
    ) -> None:
        self.file = pq.ParquetFile(path)
        self.day_column = day_column
        self.position = {d.isoformat(): i for i, d in enumerate(reference_days)}
        self.current = {d.isoformat() for d in current_days}
        self.n_days = len(self.position)
        self.batch_rows = batch_rows
        self.days = self._day_index()

    def _day_index(self) -> np.ndarray:
        """Each row's reference day (its position), -1 for a row of the current window."""
        known = [*self.position, *sorted(self.current)]
        value = np.array([*range(self.n_days), *[-1] * len(self.current)], dtype=np.int16)
        pieces = []
        for batch in self.file.iter_batches(batch_size=self.batch_rows, columns=[self.day_column]):
            days = batch.column(0).cast(pa.string())
            found = pc.index_in(days, value_set=pa.array(known, pa.string()))
            if found.null_count:
                stray = pc.unique(pc.filter(days, pc.is_null(found))).to_pylist()
                raise StepError(f"rows of day(s) {sorted(stray)[:3]} are outside the window's days")
            pieces.append(value[found.to_numpy()])
        return np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int16)

    def columns(self) -> set[str]:
        return set(self.file.schema_arrow.names)

    def rows(self) -> tuple[int, int]:
        """Rows of the reference and of the current window."""
        reference = int(np.sum(self.days >= 0))
        return reference, len(self.days) - reference

    def _batches(self, column: str) -> Iterator[tuple[np.ndarray, pd.Series]]:
        """Per batch: each row's reference day (its position; -1 in the current window) and
        ``column``'s values."""
        offset = 0
        for batch in self.file.iter_batches(batch_size=self.batch_rows, columns=[column]):
            days = self.days[offset : offset + batch.num_rows]
            offset += batch.num_rows
            yield days, batch.column(0).to_pandas()

    def numeric(self, column: str, bins: int) -> tuple[np.ndarray, np.ndarray]:
        present = []
        for days, series in self._batches(column):
            values = _floats(series)[days >= 0]
            present.append(values[~np.isnan(values)])
        edges = numeric_edges(np.concatenate(present) if present else np.empty(0), bins)
        del present
        width = len(edges) + 2
        per_day = np.zeros((self.n_days, width), dtype=np.int64)
        current = np.zeros(width, dtype=np.int64)
        for days, series in self._batches(column):
            codes = numeric_bins(edges, _floats(series))
            ref = days >= 0
            per_day += _per_day(days[ref], codes[ref], self.n_days, width)
            current += np.bincount(codes[~ref], minlength=width)
        return per_day, current

    def categorical(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        reference: dict[str, np.ndarray] = {}
        current: dict[str, int] = {}
        for days, series in self._batches(column):
            codes, uniques = pd.factorize(category_labels(series.to_numpy(dtype=object)))
            ref = days >= 0
            per_day = _per_day(days[ref], codes[ref], self.n_days, len(uniques))
            counted = np.bincount(codes[~ref], minlength=len(uniques))
            for i, value in enumerate(uniques):
                if value in reference:
                    reference[value] += per_day[:, i]
                else:
                    reference[value] = per_day[:, i].copy()
                current[value] = current.get(value, 0) + int(counted[i])
        categories = sorted(reference)
        if not categories:
            return np.zeros((self.n_days, 0), dtype=np.int64), np.zeros(0, dtype=np.int64)
        per_day_all = np.stack([reference[c] for c in categories], axis=1)
        return per_day_all, np.array([current[c] for c in categories], dtype=np.int64)

    def binary(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        per_day = np.zeros((self.n_days, 2), dtype=np.int64)
        current = np.zeros(2, dtype=np.int64)
        for days, series in self._batches(column):
            values = series.to_numpy().astype(np.int64)
            ref = days >= 0
            per_day += _per_day(days[ref], values[ref], self.n_days, 2)
            current += np.bincount(values[~ref], minlength=2)
        return per_day, current

    def means(self, column: str) -> tuple[float, float]:
        sums, counts = np.zeros(2), np.zeros(2, dtype=np.int64)
        for days, series in self._batches(column):
            values = _floats(series)
            ref = days >= 0
            sums += [values[ref].sum(), values[~ref].sum()]
            counts += [int(ref.sum()), int((~ref).sum())]
        with np.errstate(invalid="ignore", divide="ignore"):
            return float(sums[0] / counts[0]), float(sums[1] / counts[1])


def _per_day(days: np.ndarray, codes: np.ndarray, n_days: int, width: int) -> np.ndarray:
    """Counts of (day, code) pairs as a days x width matrix."""
    flat = days.astype(np.int64) * width + codes
    return np.bincount(flat, minlength=n_days * width).reshape(n_days, width)


def _floats(series: pd.Series) -> np.ndarray:
    return series.to_numpy(dtype=np.float64, na_value=np.nan)


Predict = Callable[[pd.DataFrame], np.ndarray]
"""A model's predictions on feature rows."""
Score = Callable[[pa.Table], np.ndarray]
"""The prediction signal of joined rows (what the drift of predictions is measured on)."""


def write_window(
    reader: pa.RecordBatchReader,
    path: str | Path,
    score: Score | None,
    signal: pa.DataType | None = None,
    batch_rows: int = BATCH_ROWS,
) -> tuple[int, int]:
    """The joined rows of ``reader`` into the Parquet file ``path`` in row groups of about
    ``batch_rows`` rows, with ``score``'s signal of each (of type ``signal``: float64
    probabilities or values, a multiclass model's class names as strings) as the column
    ``calibration.PREDICTION``. Returns the rows written and the row groups."""
    signal = signal or pa.float64()
    schema = reader.schema
    if score is not None:
        schema = schema.append(pa.field(PREDICTION, signal))
    pending: list[pa.RecordBatch] = []
    held = rows = groups = 0
    with pq.ParquetWriter(str(path), schema) as writer:

        def flush() -> None:
            table = pa.Table.from_batches(pending, reader.schema)
            if score is not None:
                table = table.append_column(PREDICTION, pa.array(score(table), type=signal))
            writer.write_table(table, row_group_size=table.num_rows)

        for batch in reader:
            pending.append(batch)
            held += batch.num_rows
            if held >= batch_rows:
                flush()
                rows, groups, pending, held = rows + held, groups + 1, [], 0
        if held:
            flush()
            rows, groups = rows + held, groups + 1
    return rows, groups


@dataclass(frozen=True)
class SpilledWindow:
    """A drift window's joined rows in a Parquet file (:func:`write_window`) that ``counts``
    reads, read back a batch at a time: the local engine's
    :class:`~pipeline_steps.engines.base.DriftWindow`."""

    columns: FeatureColumns
    counts: FileCounts
    predict: Predict | None

    @property
    def reference_rows(self) -> int:
        return self.counts.rows()[0]

    @property
    def current_rows(self) -> int:
        return self.counts.rows()[1]

    def sample(self, size: int) -> pd.DataFrame:
        counts = self.counts
        drawn = np.random.RandomState(0).choice(
            self.reference_rows, size=min(size, self.reference_rows), replace=False
        )
        order = np.full(self.reference_rows, -1, dtype=np.int64)
        order[drawn] = np.arange(len(drawn))
        # each row's place in the draw (-1: not drawn, or not a reference row)
        drawn_at = np.full(len(counts.days), -1, dtype=np.int64)
        drawn_at[counts.days >= 0] = order
        picked, offset = [], 0
        for batch in counts.file.iter_batches(batch_size=counts.batch_rows):
            here = drawn_at[offset : offset + batch.num_rows]
            offset += batch.num_rows
            rows = np.flatnonzero(here >= 0)
            if len(rows):
                frame = batch.take(pa.array(rows)).to_pandas()
                picked.append(frame.assign(__order=here[rows]))
        if not picked:
            return counts.file.schema_arrow.empty_table().to_pandas()
        frame = pd.concat(picked, ignore_index=True).sort_values("__order")
        return frame.drop(columns="__order").reset_index(drop=True)

    def day(self, day: date) -> pd.DataFrame:
        counts = self.counts
        wanted = pa.scalar(day.isoformat(), pa.string())
        kept = [
            batch.filter(pc.equal(batch.column(counts.day_column).cast(pa.string()), wanted))
            for batch in counts.file.iter_batches(batch_size=counts.batch_rows)
        ]
        table = pa.Table.from_batches(kept, counts.file.schema_arrow)
        return table.to_pandas()
