"""The built-in networks (declared in :mod:`pipeline_steps.core.builtin_models`).

Both take the preprocessed batch: category codes [n, C] (0 = out of vocabulary) and numerics
[n, 2N] (standardised values and missing flags), and return ``[n, outputs]``: one logit or value
per row, or one logit per class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from pipeline_steps.core.models import BatchShape, resolve

if TYPE_CHECKING:
    from pipeline_steps.core.settings import TrainSettings


class TabularMLP(nn.Module):
    """Embeddings for categorical columns, concatenated with numerics, into an MLP → outputs."""

    def __init__(
        self,
        *,
        cardinalities: list[int],
        numeric_width: int,
        embedding_dim: int,
        hidden_dims: Sequence[int],
        dropout: float,
        outputs: int = 1,
    ) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(n, embedding_dim) for n in cardinalities)
        layers: list[nn.Module] = []
        width = embedding_dim * len(cardinalities) + numeric_width
        for hidden in hidden_dims:
            layers += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
            width = hidden
        layers.append(nn.Linear(width, outputs))
        self.mlp = nn.Sequential(*layers)

    def forward(self, codes: torch.Tensor, numeric: torch.Tensor) -> torch.Tensor:
        embedded = [emb(codes[:, i]) for i, emb in enumerate(self.embeddings)]
        return self.mlp(torch.cat([*embedded, numeric], dim=1))


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
    """Feature tokenizer → [CLS] + tokens through a pre-norm Transformer encoder → CLS → outputs."""

    def __init__(
        self,
        *,
        cardinalities: list[int],
        numeric_width: int,
        token_dim: int,
        layers: int,
        heads: int,
        dropout: float,
        outputs: int = 1,
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
        self.head = nn.Sequential(nn.LayerNorm(token_dim), nn.ReLU(), nn.Linear(token_dim, outputs))

    def forward(self, codes: torch.Tensor, numeric: torch.Tensor) -> torch.Tensor:
        tokens = self.tokenizer(codes, numeric)
        tokens = torch.cat([self.cls.expand(len(tokens), -1, -1), tokens], dim=1)
        return self.head(self.encoder(tokens)[:, 0])

    def pipeline_stages(self, count: int) -> list[nn.Module]:
        """The model cut into ``count`` consecutive stages (``train.strategy: pipeline``): the
        tokenizer and [CLS] go with the first, the head with the last, the encoder's layers as
        evenly as they go; together they compute ``forward``. ``ValueError`` when there are
        fewer layers than stages."""
        layers = list(self.encoder.layers)
        if count > len(layers):
            raise ValueError(
                f"{len(layers)} transformer layers cannot make {count} pipeline stages: at least "
                "one layer per stage (the hyperparameter transformer_layers)"
            )
        bounds = [i * len(layers) // count for i in range(count + 1)]
        return [
            _TransformerStage(
                layers[bounds[i] : bounds[i + 1]],
                first=(self.tokenizer, self.cls) if i == 0 else None,
                head=self.head if i == count - 1 else None,
            )
            for i in range(count)
        ]


class _TransformerStage(nn.Module):
    """A stage of :class:`FTTransformer`: the first takes the batch (category codes and
    numerics) and makes the tokens, each runs its layers, the last ends with the head."""

    def __init__(
        self,
        layers: list[nn.Module],
        *,
        first: tuple[FeatureTokenizer, nn.Parameter] | None,
        head: nn.Module | None,
    ) -> None:
        super().__init__()
        self.tokenizer: FeatureTokenizer | None = first[0] if first is not None else None
        self.cls: nn.Parameter | None = first[1] if first is not None else None
        self.layers = nn.ModuleList(layers)
        self.head = head

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if self.tokenizer is not None and self.cls is not None:
            codes, numeric = inputs
            tokens = self.tokenizer(codes, numeric)
            tokens = torch.cat([self.cls.expand(len(tokens), -1, -1), tokens], dim=1)
        else:
            (tokens,) = inputs
        for layer in self.layers:
            tokens = layer(tokens)
        return self.head(tokens[:, 0]) if self.head is not None else tokens


def build_mlp(
    shape: BatchShape, *, hidden_dims: Sequence[int], embedding_dim: int, dropout: float
) -> TabularMLP:
    return TabularMLP(
        cardinalities=shape.cardinalities,
        numeric_width=shape.numeric_width,
        embedding_dim=embedding_dim,
        hidden_dims=hidden_dims,
        dropout=dropout,
        outputs=shape.outputs,
    )


def build_ft_transformer(
    shape: BatchShape,
    *,
    token_dim: int,
    transformer_layers: int,
    attention_heads: int,
    dropout: float,
) -> FTTransformer:
    return FTTransformer(
        cardinalities=shape.cardinalities,
        numeric_width=shape.numeric_width,
        token_dim=token_dim,
        layers=transformer_layers,
        heads=attention_heads,
        dropout=dropout,
        outputs=shape.outputs,
    )


def build(cfg: TrainSettings, shape: BatchShape) -> tuple[nn.Module, dict[str, Any]]:
    """The model ``train.model`` names, built for ``shape`` with ``train``'s hyperparameters,
    and the configuration it is rebuilt from (recorded with the registered model)."""
    config = {"shape": asdict(shape), "hyperparameters": dict(cfg.hyperparameters)}
    return rebuild(cfg.model, config), config


def rebuild(reference: str, config: Mapping[str, Any]) -> nn.Module:
    """The model recorded as ``reference`` with ``config`` (as :func:`build` gives it). A model
    recorded before the registry (binary, its constructor's arguments) is rebuilt too."""
    if "shape" not in config:
        legacy = dict(config)
        shape = BatchShape(
            cardinalities=legacy.pop("cardinalities"), numeric_width=legacy.pop("numeric_width")
        )
        renamed = {"layers": "transformer_layers", "heads": "attention_heads"}
        values = {renamed.get(k, k): v for k, v in legacy.items()}
    else:
        shape, values = BatchShape(**config["shape"]), dict(config["hyperparameters"])
    model: nn.Module = resolve(reference).build_model(shape, values)
    return model
