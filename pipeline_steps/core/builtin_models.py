"""The declarations of the two built-in models (their networks live in
:mod:`pipeline_steps.steps.train.models`, imported only when a model is built)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline_steps.core.models import Hyperparameter, ModelSpec

DROPOUT = Hyperparameter(
    "dropout", float, 0.1, low=0.0, high=1.0, open_high=True, doc="Dropout in hidden layers."
)

MLP = ModelSpec(
    build="pipeline_steps.steps.train.models:build_mlp",
    description="categorical embeddings + MLP",
    hyperparameters=(
        Hyperparameter("hidden_dims", tuple, (128, 64), low=1, doc="Widths of the hidden layers."),
        Hyperparameter("embedding_dim", int, 8, low=1, doc="Width of each categorical embedding."),
        DROPOUT,
    ),
)


def _heads_divide_width(values: Mapping[str, Any]) -> str | None:
    if values["token_dim"] % values["attention_heads"]:
        return (
            f"train.attention_heads ({values['attention_heads']}) must divide "
            f"train.token_dim ({values['token_dim']})"
        )
    return None


FT_TRANSFORMER = ModelSpec(
    build="pipeline_steps.steps.train.models:build_ft_transformer",
    description="feature tokenizer + Transformer encoder (Gorishniy et al. 2021)",
    hyperparameters=(
        Hyperparameter("token_dim", int, 32, low=1, doc="Width of each feature token."),
        Hyperparameter("transformer_layers", int, 2, low=1, doc="Encoder layers."),
        Hyperparameter(
            "attention_heads", int, 4, low=1, doc="Attention heads (must divide token_dim)."
        ),
        DROPOUT,
    ),
    check=_heads_divide_width,
)
