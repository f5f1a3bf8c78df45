"""The training data path: the frozen training set streamed by row groups, as whole-batch tensors.

- ``TrainingTable``: the parquet file's row groups; each row is a fitting or a validation row:
  the rows of a seeded share of the days, or a mask seeded per row group, so every rank agrees on
  the split.
- ``Preprocessor``: vocabularies (index 0 is the out-of-vocabulary bucket) and normalisation
  statistics, fitted in one streaming pass over the fitting rows only, saved with the model.
- ``epoch_batches``: per epoch, the row groups in a seeded order dealt to ranks round-robin; each
  rank reads only its row groups, turns each into tensors at once, mixes them in a seeded shuffle
  buffer and cuts whole batches. Every rank yields the same number of batches (DDP's collectives
  stay in step): a rank dealt fewer rows tops up from the start of its shard. Memory holds one
  shuffle buffer, whatever the size of the set.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from pipeline_steps.core.prefetch import map_ahead

OOV = 0  # index 0 of every vocabulary: a category the training window never saw


@dataclass(frozen=True, kw_only=True)
class Preprocessor:
    """Vocabularies for categoricals and mean/std for numerics, saved with the model."""

    categorical: list[str]
    numeric: list[str]
    vocabularies: dict[str, list[str]]
    means: dict[str, float]
    stds: dict[str, float]

    @classmethod
    def fit(cls, frames: Any, categorical: list[str], numeric: list[str]) -> Preprocessor:
        """Fit on one frame or an iterable of frames (streamed: sums, not the rows, are kept)."""
        seen: dict[str, set[str]] = {c: set() for c in categorical}
        count = np.zeros(len(numeric))
        total = np.zeros(len(numeric))
        squares = np.zeros(len(numeric))
        for part in [frames] if isinstance(frames, pd.DataFrame) else frames:
            frame = part.to_pandas() if isinstance(part, pa.Table) else part
            for c in categorical:
                seen[c].update(frame[c].astype(str).unique().tolist())
            values = frame[numeric].to_numpy(dtype=np.float64, na_value=np.nan)
            present = ~np.isnan(values)
            count += present.sum(axis=0)
            total += np.where(present, values, 0.0).sum(axis=0)
            squares += np.where(present, values**2, 0.0).sum(axis=0)
        means = np.divide(total, count, out=np.zeros_like(total), where=count > 0)
        variances = np.divide(squares, count, out=np.ones_like(total), where=count > 0) - means**2
        stds = np.sqrt(np.clip(variances, 0.0, None))
        return cls(
            categorical=categorical,
            numeric=numeric,
            vocabularies={c: sorted(seen[c]) for c in categorical},
            means={c: float(m) for c, m in zip(numeric, means, strict=True)},
            stds={c: float(s) if s > 1e-9 else 1.0 for c, s in zip(numeric, stds, strict=True)},
        )

    @property
    def cardinalities(self) -> list[int]:
        return [len(self.vocabularies[c]) + 1 for c in self.categorical]

    @property
    def numeric_width(self) -> int:
        return 2 * len(self.numeric)  # standardised value + missing flag

    def transform(self, frame: pd.DataFrame) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw feature rows → (category indices [n, C] int32, numerics [n, 2N] float32).

        Unknown categories map to the out-of-vocabulary index; missing numerics to 0 with flag 1.
        """
        missing = [c for c in [*self.categorical, *self.numeric] if c not in frame.columns]
        if missing:
            raise ValueError(f"input rows lack feature column(s) {missing}")
        codes = np.empty((len(frame), len(self.categorical)), dtype=np.int32)
        for i, column in enumerate(self.categorical):
            codes[:, i] = self._indexes[column].get_indexer(frame[column].astype(str)) + 1
        values = frame[self.numeric].to_numpy(dtype=np.float64, na_value=np.nan)
        return torch.from_numpy(codes), self._scale(values.T)

    def transform_arrow(self, table: pa.Table) -> tuple[torch.Tensor, torch.Tensor]:
        """``transform`` for a pyarrow table, vectorised without pandas: only the distinct
        values of each categorical chunk (its dictionary) are looked up."""
        codes = columns_array(len(self.categorical), table.num_rows, np.int32)
        for i, column in enumerate(self.categorical):
            data = table[column]
            if not pa.types.is_dictionary(data.type):
                data = pc.dictionary_encode(data)
            # One dictionary and one index array for every chunk.
            encoded = data.unify_dictionaries().combine_chunks()
            if not isinstance(encoded, pa.DictionaryArray):  # a table of no rows
                encoded = pa.array([], pa.dictionary(pa.int32(), pa.string()))
            words = encoded.dictionary.cast(pa.string()).to_pandas()
            lookup = self._indexes[column].get_indexer(words).astype(np.int32) + 1  # -1 → OOV
            lookup = np.append(lookup, np.int32(OOV))  # a missing category: out of vocabulary
            indices = encoded.indices.fill_null(len(lookup) - 1)
            np.take(lookup, indices.to_numpy(), out=codes[i])
        columns = columns_array(len(self.numeric), table.num_rows, np.float64)
        for j, column in enumerate(self.numeric):
            offset = 0
            for chunk in table[column].cast(pa.float64()).chunks:  # nulls become NaN
                columns[j, offset : offset + len(chunk)] = chunk.to_numpy(zero_copy_only=False)
                offset += len(chunk)
        return torch.from_numpy(row_major(codes)), self._scale(columns, overwrite=True)

    def _scale(self, columns: np.ndarray, overwrite: bool = False) -> torch.Tensor:
        """Numeric columns [N, n] → standardised values (0 where missing) beside the missing
        flags, [n, 2N] float32. Computed column by column (in ``columns`` itself where
        ``overwrite``), then transposed in blocks."""
        width = len(self.numeric)
        out = columns_array(2 * width, columns.shape[1], np.float32)
        missing = np.isnan(columns)
        means = np.array([self.means[c] for c in self.numeric])[:, None]
        stds = np.array([self.stds[c] for c in self.numeric])[:, None]
        centred = np.subtract(columns, means, out=columns if overwrite else None)
        np.divide(centred, stds, out=out[:width], casting="same_kind")
        np.copyto(out[:width], 0.0, where=missing)
        np.copyto(out[width:], missing)
        return torch.from_numpy(row_major(out))

    @cached_property
    def _indexes(self) -> dict[str, pd.Index]:
        return {c: pd.Index(v) for c, v in self.vocabularies.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "categorical": self.categorical,
            "numeric": self.numeric,
            "vocabularies": self.vocabularies,
            "means": self.means,
            "stds": self.stds,
        }

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> Preprocessor:
        return cls(**payload)


def columns_array(count: int, rows: int, dtype: Any) -> np.ndarray:
    """An empty [count, rows] array for column-wise work whose row stride is padded off a
    power of two: read rows like 65,536 would otherwise map every column's block to the same
    cache sets and make ``row_major`` several times slower."""
    return np.empty((count, rows + 16), dtype=dtype)[:, :rows]


def row_major(columns: np.ndarray, block: int = 4096) -> np.ndarray:
    """Columns [k, n] → rows [n, k], copied a cache-sized block of rows at a time (several
    times faster than one strided copy of the whole array)."""
    rows = np.empty((columns.shape[1], columns.shape[0]), dtype=columns.dtype)
    for start in range(0, columns.shape[1], block):
        rows[start : start + block] = columns[:, start : start + block].T
    return rows


@dataclass(frozen=True)
class TensorSet:
    """A table as tensors: category codes, numerics and labels, row-aligned."""

    codes: torch.Tensor
    numeric: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, index: torch.Tensor) -> TensorSet:
        """The rows at ``index``, in that order (``index_select``: a row gather, several times
        faster than advanced indexing on the CPU)."""
        return TensorSet(
            self.codes.index_select(0, index),
            self.numeric.index_select(0, index),
            self.labels.index_select(0, index),
        )

    def slice(self, start: int, stop: int) -> TensorSet:
        return TensorSet(self.codes[start:stop], self.numeric[start:stop], self.labels[start:stop])

    def pin_memory(self) -> TensorSet:
        return TensorSet(
            self.codes.pin_memory(), self.numeric.pin_memory(), self.labels.pin_memory()
        )

    def to(self, device: torch.device) -> TensorSet:
        """Copy to ``device``; from pinned memory the copy does not block the host."""
        blocking = device.type == "cpu"
        return TensorSet(
            self.codes.to(device, non_blocking=not blocking),
            self.numeric.to(device, non_blocking=not blocking),
            self.labels.to(device, non_blocking=not blocking),
        )

    @staticmethod
    def concat(parts: list[TensorSet]) -> TensorSet:
        if len(parts) == 1:
            return parts[0]
        return TensorSet(
            torch.cat([p.codes for p in parts]),
            torch.cat([p.numeric for p in parts]),
            torch.cat([p.labels for p in parts]),
        )


def tensor_set(rows: pd.DataFrame | pa.Table, pre: Preprocessor, label: str) -> TensorSet:
    if isinstance(rows, pa.Table):
        codes, numeric = pre.transform_arrow(rows)
        labels = rows[label].cast(pa.float32()).to_numpy(zero_copy_only=False)
        return TensorSet(codes, numeric, torch.from_numpy(np.array(labels, dtype=np.float32)))
    codes, numeric = pre.transform(rows)
    labels = torch.from_numpy(rows[label].to_numpy(dtype=np.float32))
    return TensorSet(codes, numeric, labels)


@dataclass(frozen=True)
class TrainingTable:
    """A frozen training set read by row groups, its rows split into fitting and validation.

    With a ``day_column`` (``train.validation_split: days``), the validation rows are whole days:
    a seeded ``validation_fraction`` of the set's days (at least one, never all), so the
    validation loss, early stopping and the temperature see days the model did not fit, as the
    holdout is. Rows of one day share its weather, its mood and its label rate; rows drawn at
    random from every day reward learning those days by heart. A set of one day, or
    ``day_column`` None (``rows``), draws the validation rows at random, seeded per row group."""

    path: str
    filesystem: Any
    columns: list[str]
    seed: int
    validation_fraction: float
    day_column: str | None = None
    group_rows: list[int] = field(init=False)
    strings: list[str] = field(init=False)  # read dictionary-encoded
    validation_days: tuple[str, ...] = field(init=False)
    """The days whose rows are the validation rows; empty when they are drawn at random."""
    _day_masks: list[np.ndarray] = field(init=False, repr=False)  # packed bits, per row group

    def __post_init__(self) -> None:
        with self.filesystem.open(self.path, "rb") as fh:
            parquet = pq.ParquetFile(fh)
            metadata = parquet.metadata
            sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
            schema = metadata.schema.to_arrow_schema()
            days = (
                [
                    parquet.read_row_group(g, columns=[self.day_column]).column(0).cast(pa.string())
                    for g in range(len(sizes))
                ]
                if self.day_column is not None and self.day_column in schema.names
                else []
            )
        object.__setattr__(self, "group_rows", sizes)
        strings = [
            c
            for c in self.columns
            if c in schema.names and pa.types.is_string(schema.field(c).type)
        ]
        object.__setattr__(self, "strings", strings)
        chosen = self._choose_days(days)
        held = pa.array(chosen, pa.string())
        masks = [
            np.packbits(pc.is_in(column, value_set=held).fill_null(False).to_numpy())
            for column in days
        ]
        object.__setattr__(self, "validation_days", tuple(chosen))
        object.__setattr__(self, "_day_masks", masks if chosen else [])

    def _choose_days(self, days: list[pa.ChunkedArray]) -> list[str]:
        """A seeded ``validation_fraction`` of the distinct ``days`` (at least one, never all);
        none when there are fewer than two."""
        distinct = sorted({d for column in days for d in pc.unique(column).to_pylist() if d})
        if len(distinct) < 2:
            return []
        count = min(max(1, round(self.validation_fraction * len(distinct))), len(distinct) - 1)
        picked = np.random.default_rng([self.seed, len(distinct)]).choice(
            len(distinct), count, replace=False
        )
        return sorted(distinct[int(i)] for i in picked)

    @property
    def split(self) -> str:
        """How the validation rows were chosen: ``days`` (whole days) or ``rows`` (at random)."""
        return "days" if self.validation_days else "rows"

    @property
    def rows(self) -> int:
        return sum(self.group_rows)

    def is_validation(self, group: int) -> np.ndarray:
        """The validation rows of one row group: the rows of the validation days, or rows drawn
        seeded by (seed, group), known without reading the rows again."""
        if self.validation_days:
            bits = np.unpackbits(self._day_masks[group], count=self.group_rows[group])
            return bits.astype(bool)
        draws = np.random.default_rng([self.seed, group]).random(self.group_rows[group])
        return draws < self.validation_fraction

    @cached_property
    def fit_rows(self) -> list[int]:
        return [n - int(self.is_validation(g).sum()) for g, n in enumerate(self.group_rows)]

    def reads(self, groups: list[int], per_read: int = 1) -> Iterator[tuple[pa.Table, np.ndarray]]:
        """All rows of ``groups``, ``per_read`` row groups at a time, each read with its
        validation mask."""
        with self.filesystem.open(self.path, "rb") as fh:
            parquet = pq.ParquetFile(fh, read_dictionary=self.strings)
            for start in range(0, len(groups), per_read):
                chunk = groups[start : start + per_read]
                rows = parquet.read_row_groups(chunk, columns=self.columns)
                yield rows, np.concatenate([self.is_validation(g) for g in chunk])

    def frames(self, groups: list[int], validation: bool, per_read: int = 1) -> Iterator[pa.Table]:
        """The fitting (or validation) rows of ``groups``, ``per_read`` row groups at a time."""
        for rows, is_validation in self.reads(groups, per_read):
            yield rows.filter(pa.array(is_validation if validation else ~is_validation))

    @cached_property
    def fitting_groups(self) -> list[int]:
        """The row groups that hold fitting rows (a group of validation days alone holds none)."""
        return [g for g, n in enumerate(self.fit_rows) if n]

    def epoch_groups(self, epoch: int, rank: int, world_size: int) -> list[int]:
        """This rank's row groups for an epoch: a seeded permutation of those holding fitting
        rows, dealt round-robin."""
        groups = self.fitting_groups
        order = np.random.default_rng([self.seed, epoch]).permutation(len(groups))
        return [groups[int(i)] for i in order[rank::world_size]]

    def steps_per_epoch(
        self, epoch: int, batch_size: int, world_size: int, min_steps: int = 0
    ) -> int:
        """Batches per rank this epoch: the most rows any rank was dealt, in whole batches, or
        ``min_steps`` when that is more (and the set fills one batch at all). A rank dealt fewer
        rows tops up from the start of its own shard, as PyTorch's ``DistributedSampler`` pads,
        so every rank sees about ``rows / world_size`` rows; below ``min_steps`` every rank
        passes over its shard again, shuffled anew, until it has them."""
        per_rank = [
            sum(self.fit_rows[g] for g in self.epoch_groups(epoch, r, world_size))
            for r in range(world_size)
        ]
        whole = max(per_rank) // batch_size
        return max(whole, min_steps) if whole else 0


def epoch_batches(
    table: TrainingTable,
    pre: Preprocessor,
    label: str,
    *,
    batch_size: int,
    epoch: int,
    rank: int = 0,
    world_size: int = 1,
    shuffle_buffer: int = 65_536,
    skip: int = 0,
    min_steps: int = 0,
    prefetch_buffers: int = 2,
    workers: int = 2,
    pin_memory: bool = False,
) -> Iterator[TensorSet]:
    """One rank's batches of one epoch, from batch ``skip`` on (the earlier ones are drawn and
    dropped, so a resumed epoch continues exactly where it stopped); at least ``min_steps`` of
    them (``train.min_steps_per_epoch``), passing over the shard again where it holds fewer.

    Background threads work ahead of the caller: one reads the row groups and draws each
    buffer's permutation (in order, so the result does not depend on timing), ``workers``
    convert and shuffle buffers (pyarrow, numpy and torch release the GIL), pinned with
    ``pin_memory`` so every batch cut from them copies to the GPU without blocking. Up to
    ``prefetch_buffers`` buffers wait ready; the caller only slices them into batches.
    """
    steps = table.steps_per_epoch(epoch, batch_size, world_size, min_steps)
    rng = torch.Generator().manual_seed(int(table.seed) * 1_000_003 + epoch * 101 + rank)
    groups = table.epoch_groups(epoch, rank, world_size)
    # A shuffle buffer is one read of whole row groups (fixed costs are per read).
    per_read = max(1, round(shuffle_buffer * len(table.group_rows) / max(table.rows, 1)))

    def reads() -> Iterator[tuple[pa.Table, torch.Tensor]]:
        # The shard, then top-up passes over it, read only as far as ``steps`` needs.
        wanted = steps * batch_size
        while wanted > 0:
            if not sum(table.fit_rows[g] for g in groups):
                raise ValueError(f"rank {rank} was dealt row groups {groups} with no rows to fit")
            for rows, is_validation in table.reads(groups, per_read):
                if wanted <= 0:
                    return
                fitting = torch.from_numpy(np.flatnonzero(~is_validation))
                order = fitting[torch.randperm(len(fitting), generator=rng)]
                wanted -= len(order)
                yield rows, order

    def shuffled(read: tuple[pa.Table, torch.Tensor]) -> TensorSet:
        rows, order = read
        buffer = tensor_set(rows, pre, label).take(order)
        return buffer.pin_memory() if pin_memory else buffer

    buffers = map_ahead(shuffled, reads(), workers=workers, depth=prefetch_buffers)
    batches = whole_batches(buffers, batch_size)
    for made in range(steps):
        batch = next(batches)
        if made >= skip:
            yield batch


def whole_batches(buffers: Iterator[TensorSet], batch_size: int) -> Iterator[TensorSet]:
    """Cut shuffled buffers into batches of ``batch_size``; a buffer's leftover rows open the
    next buffer's first batch, so every row of the shard comes before any repeat."""
    carry: TensorSet | None = None
    for buffer in buffers:
        start = 0
        if carry is not None:
            start = min(batch_size - len(carry), len(buffer))
            carry = TensorSet.concat([carry, buffer.slice(0, start)])
            if len(carry) < batch_size:
                continue
            yield carry
            carry = None
        whole = start + (len(buffer) - start) // batch_size * batch_size
        for offset in range(start, whole, batch_size):
            yield buffer.slice(offset, offset + batch_size)
        carry = buffer.slice(whole, len(buffer)) if whole < len(buffer) else None


def validation_batches(
    table: TrainingTable,
    pre: Preprocessor,
    label: str,
    *,
    batch_size: int,
    rank: int = 0,
    world_size: int = 1,
) -> Iterator[TensorSet]:
    """This rank's share of the validation rows (row groups dealt round-robin), in order."""
    groups = list(range(rank, len(table.group_rows), world_size))
    for frame in table.frames(groups, validation=True):
        data = tensor_set(frame, pre, label)
        for start in range(0, len(data), batch_size):
            yield data.slice(start, start + batch_size)


def validation_batch_count(
    table: TrainingTable, batch_size: int, rank: int, world_size: int
) -> int:
    """How many batches ``validation_batches`` yields on ``rank``, known without reading."""
    groups = range(rank, len(table.group_rows), world_size)
    return sum(-(-int(table.is_validation(g).sum()) // batch_size) for g in groups)
