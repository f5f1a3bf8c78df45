"""Preprocessing fitted on the training window only, and whole-batch tensors for the loop."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
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
    def fit(cls, frame: pd.DataFrame, categorical: list[str], numeric: list[str]) -> Preprocessor:
        vocabularies = {c: sorted(frame[c].astype(str).unique().tolist()) for c in categorical}
        means = {c: float(np.nanmean(frame[c])) if frame[c].notna().any() else 0.0 for c in numeric}
        stds = {c: float(np.nanstd(frame[c])) if frame[c].notna().any() else 1.0 for c in numeric}
        stds = {c: s if s > 1e-9 else 1.0 for c, s in stds.items()}
        return cls(
            categorical=categorical,
            numeric=numeric,
            vocabularies=vocabularies,
            means=means,
            stds=stds,
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
            index = pd.Index(self.vocabularies[column])
            codes[:, i] = index.get_indexer(frame[column].astype(str)) + 1  # -1 (unknown) → 0
        values = frame[self.numeric].to_numpy(dtype=np.float64, na_value=np.nan)
        means = np.array([self.means[c] for c in self.numeric])
        stds = np.array([self.stds[c] for c in self.numeric])
        is_missing = np.isnan(values)
        scaled = np.where(is_missing, 0.0, (values - means) / stds)
        numeric = np.concatenate([scaled, is_missing.astype(np.float64)], axis=1)
        return torch.from_numpy(codes), torch.from_numpy(numeric.astype(np.float32))

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


def tensor_set(frame: pd.DataFrame, pre: Preprocessor, label: str) -> TensorSet:
    codes, numeric = pre.transform(frame)
    labels = torch.from_numpy(frame[label].to_numpy(dtype=np.float32))
    return TensorSet(codes, numeric, labels)


def batches(
    data: TensorSet,
    batch_size: int,
    *,
    seed: int,
    epoch: int,
    rank: int = 0,
    world_size: int = 1,
    shuffle: bool = True,
) -> Iterator[TensorSet]:
    """Whole batches for one rank: a seeded permutation per epoch, sharded by rank.

    Every rank gets the same number of batches (the shard is cut to a common length) so DDP's
    collective calls stay in step.
    """
    n = len(data)
    if shuffle:
        generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
        order = torch.randperm(n, generator=generator)
    else:
        order = torch.arange(n)
    shard = order[rank::world_size][: n // world_size]
    for start in range(0, len(shard), batch_size):
        yield data.take(shard[start : start + batch_size])
