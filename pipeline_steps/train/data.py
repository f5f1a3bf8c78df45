"""The training data path: the frozen training set streamed by row groups, as whole-batch tensors.

- ``TrainingTable``: the parquet file's row groups; each row is a fitting or a validation row by a
  mask seeded per row group, so every rank agrees on the split without reading the data.
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
import pyarrow.parquet as pq
import torch

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
        for frame in [frames] if isinstance(frames, pd.DataFrame) else frames:
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
        """Raw feature rows → (category indices [n, C] int64, numerics [n, 2N] float32).

        Unknown categories map to the out-of-vocabulary index; missing numerics to 0 with flag 1.
        """
        missing = [c for c in [*self.categorical, *self.numeric] if c not in frame.columns]
        if missing:
            raise ValueError(f"input rows lack feature column(s) {missing}")
        codes = np.empty((len(frame), len(self.categorical)), dtype=np.int64)
        for i, column in enumerate(self.categorical):
            codes[:, i] = self._indexes[column].get_indexer(frame[column].astype(str)) + 1
        values = frame[self.numeric].to_numpy(dtype=np.float64, na_value=np.nan)
        means = np.array([self.means[c] for c in self.numeric])
        stds = np.array([self.stds[c] for c in self.numeric])
        is_missing = np.isnan(values)
        scaled = np.where(is_missing, 0.0, (values - means) / stds)
        numeric = np.concatenate([scaled, is_missing.astype(np.float64)], axis=1)
        return torch.from_numpy(codes), torch.from_numpy(numeric.astype(np.float32))

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


@dataclass(frozen=True)
class TensorSet:
    """A table as tensors: category codes, numerics and labels, row-aligned."""

    codes: torch.Tensor
    numeric: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, index: torch.Tensor) -> TensorSet:
        return TensorSet(self.codes[index], self.numeric[index], self.labels[index])

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


def tensor_set(frame: pd.DataFrame, pre: Preprocessor, label: str) -> TensorSet:
    codes, numeric = pre.transform(frame)
    labels = torch.from_numpy(frame[label].to_numpy(dtype=np.float32))
    return TensorSet(codes, numeric, labels)


@dataclass(frozen=True)
class TrainingTable:
    """A frozen training set read by row groups, its rows split into fitting and validation."""

    path: str
    filesystem: Any
    columns: list[str]
    seed: int
    validation_fraction: float
    group_rows: list[int] = field(init=False)

    def __post_init__(self) -> None:
        with self.filesystem.open(self.path, "rb") as fh:
            metadata = pq.ParquetFile(fh).metadata
        sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
        object.__setattr__(self, "group_rows", sizes)

    @property
    def rows(self) -> int:
        return sum(self.group_rows)

    def is_validation(self, group: int) -> np.ndarray:
        """The validation rows of one row group: seeded by (seed, group), known without reading."""
        draws = np.random.default_rng([self.seed, group]).random(self.group_rows[group])
        return draws < self.validation_fraction

    @cached_property
    def fit_rows(self) -> list[int]:
        return [n - int(self.is_validation(g).sum()) for g, n in enumerate(self.group_rows)]

    def read(self, group: int) -> pd.DataFrame:
        with self.filesystem.open(self.path, "rb") as fh:
            frame: pd.DataFrame = (
                pq.ParquetFile(fh).read_row_group(group, columns=self.columns).to_pandas()
            )
        return frame

    def frames(self, groups: list[int], validation: bool) -> Iterator[pd.DataFrame]:
        """The fitting (or validation) rows of ``groups``, one row group at a time."""
        for group in groups:
            keep = self.is_validation(group)
            yield self.read(group)[keep if validation else ~keep]

    def epoch_groups(self, epoch: int, rank: int, world_size: int) -> list[int]:
        """This rank's row groups for an epoch: a seeded permutation dealt round-robin."""
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.group_rows))
        return [int(g) for g in order[rank::world_size]]

    def steps_per_epoch(self, epoch: int, batch_size: int, world_size: int) -> int:
        """Batches per rank this epoch: the most rows any rank was dealt, in whole batches.
        A rank dealt fewer rows tops up from the start of its own shard, as PyTorch's
        ``DistributedSampler`` pads, so every rank sees about ``rows / world_size`` rows."""
        per_rank = [
            sum(self.fit_rows[g] for g in self.epoch_groups(epoch, r, world_size))
            for r in range(world_size)
        ]
        return max(per_rank) // batch_size


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
) -> Iterator[TensorSet]:
    """One rank's batches of one epoch, from batch ``skip`` on (the earlier ones are drawn and
    dropped, so a resumed epoch continues exactly where it stopped)."""
    steps = table.steps_per_epoch(epoch, batch_size, world_size)
    rng = torch.Generator().manual_seed(int(table.seed) * 1_000_003 + epoch * 101 + rank)
    pending: list[TensorSet] = []
    held = made = 0
    groups = table.epoch_groups(epoch, rank, world_size)
    groups += groups  # the top-up: read only as far as ``steps`` needs
    for last, frame in enumerate(table.frames(groups, validation=False), start=1):
        pending.append(tensor_set(frame, pre, label))
        held += len(frame)
        if held < shuffle_buffer and last < len(groups):
            continue
        buffer = TensorSet.concat(pending)
        buffer = buffer.take(torch.randperm(len(buffer), generator=rng))
        whole = len(buffer) // batch_size * batch_size
        for start in range(0, whole, batch_size):
            if made == steps:
                return
            if made >= skip:
                yield buffer.slice(start, start + batch_size)
            made += 1
        pending = [buffer.slice(whole, len(buffer))] if whole < len(buffer) else []
        held = len(buffer) - whole


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
