"""Model zoo: architectures chosen by ``train.model``.

Both take the preprocessed batch: category codes [n, C] (0 = out of vocabulary) and numerics
[n, 2N] (standardised values and missing flags), and return one logit per row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from pipeline_steps.core.settings import TrainSettings


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


class FeatureTokenizer(nn.Module):
    """One d-dimensional token per feature: an embedding per category, ``x * w_j + b_j`` per
    numeric column (Gorishniy et al. 2021, "Revisiting Deep Learning Models for Tabular Data")."""

    def __init__(self, cardinalities: list[int], numeric_width: int, dim: int) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(n, dim) for n in cardinalities)
        self.category_bias = nn.Parameter(torch.zeros(len(cardinalities), dim))
        self.numeric_weight = nn.Parameter(torch.empty(numeric_width, dim))
        self.numeric_bias = nn.Parameter(torch.zeros(numeric_width, dim))
        bound = dim**-0.5
        nn.init.uniform_(self.numeric_weight, -bound, bound)
        nn.init.uniform_(self.numeric_bias, -bound, bound)
        nn.init.uniform_(self.category_bias, -bound, bound)

    def forward(self, codes: torch.Tensor, numeric: torch.Tensor) -> torch.Tensor:
        categorical = torch.stack([emb(codes[:, i]) for i, emb in enumerate(self.embeddings)], 1)
        numeric_tokens = numeric.unsqueeze(-1) * self.numeric_weight + self.numeric_bias
        return torch.cat([categorical + self.category_bias, numeric_tokens], dim=1)


class FTTransformer(nn.Module):
    """Feature tokenizer → [CLS] + tokens through a pre-norm Transformer encoder → CLS → logit."""

    def __init__(
        self,
        *,
        cardinalities: list[int],
        numeric_width: int,
        token_dim: int,
        layers: int,
        heads: int,
        dropout: float,
    ) -> None:
        super().__init__()
        self.tokenizer = FeatureTokenizer(cardinalities, numeric_width, token_dim)
        self.cls = nn.Parameter(
            torch.empty(1, 1, token_dim).uniform_(-(token_dim**-0.5), token_dim**-0.5)
        )
        layer = nn.TransformerEncoderLayer(
            d_model=token_dim,
            nhead=heads,
            dim_feedforward=token_dim * 4 // 3 * 2,
            dropout=dropout,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.LayerNorm(token_dim), nn.ReLU(), nn.Linear(token_dim, 1))

    def forward(self, codes: torch.Tensor, numeric: torch.Tensor) -> torch.Tensor:
        tokens = self.tokenizer(codes, numeric)
        tokens = torch.cat([self.cls.expand(len(tokens), -1, -1), tokens], dim=1)
        return self.head(self.encoder(tokens)[:, 0]).squeeze(1)


MODELS: dict[str, type[nn.Module]] = {"mlp": TabularMLP, "ft_transformer": FTTransformer}


def build_model(name: str, **config: Any) -> nn.Module:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return MODELS[name](**config)


def model_config(
    settings: TrainSettings, cardinalities: list[int], numeric_width: int
) -> dict[str, Any]:
    """The constructor arguments of ``settings.model``, saved with the model."""
    shape = {"cardinalities": cardinalities, "numeric_width": numeric_width}
    if settings.model == "ft_transformer":
        return {
            **shape,
            "token_dim": settings.token_dim,
            "layers": settings.transformer_layers,
            "heads": settings.attention_heads,
            "dropout": settings.dropout,
        }
    return {
        **shape,
        "embedding_dim": settings.embedding_dim,
        "hidden_dims": list(settings.hidden_dims),
        "dropout": settings.dropout,
    }
