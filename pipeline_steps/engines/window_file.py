"""The drift monitor's windows on the local engine, spilled to a Parquet file.

The reference and current windows' joined rows are written once, a record batch at a time, with
the champion's prediction signal scored batch by batch (:func:`write_window`). Each statistic then
reads the day column and one other back a batch at a time (:class:`FileCounts`, the local
engine's :class:`~pipeline_steps.quality.calibration.WindowCounts`): memory holds a batch, the
counts, and for a numeric column its present reference values (its quantile bins need them),
whatever the window's length. Bins and categories are those of
:func:`~pipeline_steps.quality.calibration.numeric_counts` and
:func:`~pipeline_steps.quality.calibration.categorical_counts`, so the verdict is the one
measured on whole frames.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline_steps.core.domain import FeatureColumns
from pipeline_steps.core.errors import StepError
from pipeline_steps.quality.calibration import MISSING, PREDICTION, numeric_bins, numeric_edges

BATCH_ROWS = 65_536  # rows read back at a time


class FileCounts:
    """Per-day counts of the window file ``path``: ``day_column`` holds each row's day (ISO);
    rows of ``reference_days`` are the reference, rows of ``current_days`` the current window."""

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

    def columns(self) -> set[str]:
        return set(self.file.schema_arrow.names)

    def rows(self) -> tuple[int, int]:
        """Rows of the reference and of the current window."""
        reference = current = 0
        for days, _ in self._batches(self.day_column):
            reference += int(np.sum(days >= 0))
            current += int(np.sum(days < 0))
        return reference, current

    def _batches(self, column: str) -> Iterator[tuple[np.ndarray, pd.Series]]:
        """Per batch: each row's reference day (its position; -1 in the current window) and
        ``column``'s values."""
        names = [self.day_column] if column == self.day_column else [self.day_column, column]
        for batch in self.file.iter_batches(batch_size=self.batch_rows, columns=names):
            days = batch.column(0).to_pandas().astype(str)
            index = days.map(self.position)
            stray = index.isna() & ~days.isin(self.current)
            if stray.any():
                found = sorted(set(days[stray]))[:3]
                raise StepError(f"rows of day(s) {found} are outside the window's days")
            yield (
                index.fillna(-1).to_numpy(dtype=np.int64),
                batch.column(len(names) - 1).to_pandas(),
            )

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
            np.add.at(per_day, (days[ref], codes[ref]), 1)
            current += np.bincount(codes[~ref], minlength=width)
        return per_day, current

    def categorical(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        reference: Counter[tuple[int, str]] = Counter()
        current: Counter[str] = Counter()
        for days, series in self._batches(column):
            labels = series.astype(object)
            labels = labels.where(labels.notna(), MISSING).astype(str).to_numpy()
            ref = days >= 0
            reference.update(zip(days[ref].tolist(), labels[ref].tolist(), strict=True))
            current.update(labels[~ref].tolist())
        categories = sorted({value for _, value in reference} | set(current))
        code = {c: i for i, c in enumerate(categories)}
        per_day = np.zeros((self.n_days, len(categories)), dtype=np.int64)
        for (day, value), n in reference.items():
            per_day[day, code[value]] = n
        counted = np.zeros(len(categories), dtype=np.int64)
        for value, n in current.items():
            counted[code[value]] = n
        return per_day, counted

    def binary(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        per_day = np.zeros((self.n_days, 2), dtype=np.int64)
        current = np.zeros(2, dtype=np.int64)
        for days, series in self._batches(column):
            values = series.to_numpy().astype(np.int64)
            ref = days >= 0
            np.add.at(per_day, (days[ref], values[ref]), 1)
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


def _floats(series: pd.Series) -> np.ndarray:
    return series.to_numpy(dtype=np.float64, na_value=np.nan)


Score = Callable[[pd.DataFrame], np.ndarray]
"""The prediction signal of feature rows (what the drift of predictions is measured on)."""


def write_window(
    reader: pa.RecordBatchReader,
    path: str | Path,
    score: Score | None,
    signal: pa.DataType | None = None,
    batch_rows: int = BATCH_ROWS,
) -> tuple[int, int]:
    """The joined rows of ``reader`` into the Parquet file ``path``, ``batch_rows`` to a row
    group, with ``score``'s signal of each batch (of type ``signal``: probabilities or values,
    a multiclass model's class names as strings) as the column ``calibration.PREDICTION``.
    Returns the rows written and the row groups."""
    schema = reader.schema
    signal = signal or pa.float64()
    if score is not None:
        schema = schema.append(pa.field(PREDICTION, signal))
    pending: list[pa.RecordBatch] = []
    held = rows = groups = 0
    with pq.ParquetWriter(str(path), schema) as writer:
        for batch in reader:
            if score is not None and batch.num_rows:
                scored = pa.array(score(batch.to_pandas()), type=signal)
                batch = pa.RecordBatch.from_arrays([*batch.columns, scored], schema=schema)
            pending.append(batch)
            held += batch.num_rows
            if held >= batch_rows:
                writer.write_table(pa.Table.from_batches(pending, schema), row_group_size=held)
                rows, groups, pending, held = rows + held, groups + 1, [], 0
        if held:
            writer.write_table(pa.Table.from_batches(pending, schema), row_group_size=held)
            rows, groups = rows + held, groups + 1
    return rows, groups


@dataclass
class SpilledWindow:
    """A drift window's joined rows in the Parquet file ``path`` (:func:`write_window`), read
    back a batch at a time: the local engine's :class:`~pipeline_steps.engines.base.DriftWindow`."""

    columns: FeatureColumns
    counts: FileCounts
    key: str
    reference_rows: int = 0
    current_rows: int = 0

    def __post_init__(self) -> None:
        self.reference_rows, self.current_rows = self.counts.rows()

    def sample(self, size: int) -> pd.DataFrame:
        drawn = np.random.RandomState(0).choice(
            self.reference_rows, size=min(size, self.reference_rows), replace=False
        )
        order = np.empty(self.reference_rows, dtype=np.int64)
        order.fill(-1)
        order[drawn] = np.arange(len(drawn))
        picked, seen = [], 0
        for frame in self._frames():
            reference = frame[frame[self.counts.day_column].astype(str).isin(self.counts.position)]
            position = order[seen : seen + len(reference)]
            seen += len(reference)
            chosen = reference[position >= 0]
            if len(chosen):
                picked.append(chosen.assign(__order=position[position >= 0]))
        if not picked:
            return pd.DataFrame(columns=self.counts.file.schema_arrow.names)
        rows = pd.concat(picked, ignore_index=True).sort_values("__order")
        return rows.drop(columns="__order").reset_index(drop=True)

    def day(self, day: date) -> pd.DataFrame:
        wanted = day.isoformat()
        kept = [
            frame[frame[self.counts.day_column].astype(str) == wanted] for frame in self._frames()
        ]
        if not kept:
            return pd.DataFrame(columns=self.counts.file.schema_arrow.names)
        return pd.concat(kept, ignore_index=True)

    def _frames(self) -> Iterator[pd.DataFrame]:
        for batch in self.counts.file.iter_batches(batch_size=self.counts.batch_rows):
            yield batch.to_pandas()
