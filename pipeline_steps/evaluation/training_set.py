"""The frozen training set as the evaluate step needs it, read one record batch at a time: what
its labels say over every row (the trivial baseline) and a seeded uniform sample of at most
``evaluate.baseline_rows`` rows (the linear baseline; every row, in order, when the set has no
more). The step's memory is one batch and the sample, however large the window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

BATCH_ROWS = 65_536
"""Rows per record batch read."""


@dataclass(slots=True)
class LabelSummary:
    """The labels of every row: their count and sum (``binary``: the positives; ``regression``:
    for the mean) and, with ``classes``, the rows of each class (``multiclass``)."""

    classes: int = 0
    rows: int = 0
    total: float = 0.0
    counts: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.counts = np.zeros(self.classes, dtype=np.int64)

    def add(self, labels: np.ndarray) -> None:
        self.rows += len(labels)
        self.total += float(np.sum(labels, dtype=np.float64))
        if self.classes:
            self.counts += np.bincount(labels.astype(np.int64), minlength=self.classes)[
                : self.classes
            ]

    @property
    def mean(self) -> float | None:
        """The labels' mean (``binary``: the positive rate); ``None`` without rows."""
        return self.total / self.rows if self.rows else None

    @property
    def prior(self) -> np.ndarray:
        """Each class's share of the rows (uniform without rows)."""
        if not self.counts.sum():
            return np.full(self.classes, 1 / max(self.classes, 1))
        return np.asarray(self.counts / self.counts.sum(), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class TrainingSample:
    """``frame``: the sampled rows (feature columns and the label); ``labels``: every row's."""

    frame: pd.DataFrame
    labels: LabelSummary
    sampled: bool
    """Whether ``frame`` is a sample (the set had more than the limit) or the whole set."""


def read_sample(
    fs: Any,
    path: str,
    columns: Sequence[str],
    label: str,
    limit: int,
    seed: int,
    classes: int = 0,
) -> TrainingSample:
    """Read the parquet file ``path`` on ``fs`` by record batch: every label into a
    :class:`LabelSummary`, and ``limit`` rows drawn uniformly without replacement with ``seed``
    (their order kept) into a frame of ``columns`` and ``label``."""
    with fs.open(path, "rb") as fh:
        parquet = pq.ParquetFile(fh)
        rows = parquet.metadata.num_rows
        keep = None
        if rows > limit:
            keep = np.sort(np.random.default_rng(seed).choice(rows, size=limit, replace=False))
        labels = LabelSummary(classes=classes)
        parts: list[pa.RecordBatch] = []
        start = 0
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=[*columns, label]):
            values = batch.column(label).to_numpy(zero_copy_only=False)
            labels.add(values)
            if keep is None:
                parts.append(batch)
            else:
                lo, hi = np.searchsorted(keep, [start, start + batch.num_rows])
                if hi > lo:
                    parts.append(batch.take(pa.array(keep[lo:hi] - start)))
            start += batch.num_rows
        schema = parquet.schema_arrow
    wanted = pa.schema([schema.field(name) for name in [*columns, label]])
    chosen = pa.Table.from_batches(parts, schema=wanted)
    return TrainingSample(frame=chosen.to_pandas(), labels=labels, sampled=keep is not None)
