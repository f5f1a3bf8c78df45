"""Model zoo: architectures chosen by ``train.model``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class TabularMLP(nn.Module):
    """Embeddings for categorical columns, concatenated with numerics, into an MLP → one logit."""

    def __init__(
        self,
        *,
        cardinalities: list[int],
        numeric_width: int,
        embedding_dim: int,
        hidden_dims: list[int],
        dropout: float,
    ) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(n, embedding_dim) for n in cardinalities)
        layers: list[nn.Module] = []
        width = embedding_dim * len(cardinalities) + numeric_width
        for hidden in hidden_dims:
            layers += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
            width = hidden
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, codes: torch.Tensor, numeric: torch.Tensor) -> torch.Tensor:
        embedded = [emb(codes[:, i]) for i, emb in enumerate(self.embeddings)]
        return self.mlp(torch.cat([*embedded, numeric], dim=1)).squeeze(1)


def build_model(name: str, **config: Any) -> nn.Module:
    if name == "mlp":
        return TabularMLP(**config)
    raise ValueError(f"unknown model {name!r}; known: mlp")
