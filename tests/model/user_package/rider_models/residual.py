"""A residual MLP over the preprocessed batch, declared for trainyard in one file.

Set ``train.model: rider_models.residual:residual_mlp`` and its hyperparameters as
``train.width``, ``train.blocks`` and ``train.dropout``. torch is imported when the model is
built, so reading the declaration (settings, the trigger form, the search space) stays cheap.
"""

from __future__ import annotations

from typing import Any

from pipeline_steps.core.models import BatchShape, Hyperparameter, model


@model(
    hyperparameters=[
        Hyperparameter("width", int, 32, low=4, high=512, doc="Width of every block."),
        Hyperparameter("blocks", int, 2, low=1, high=8, doc="Residual blocks."),
        Hyperparameter("dropout", float, 0.0, low=0.0, high=0.5, doc="Dropout in each block."),
    ],
    description="residual MLP with one embedding of width 4 per categorical column",
)
def residual_mlp(shape: BatchShape, *, width: int, blocks: int, dropout: float) -> Any:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.LayerNorm(width), nn.Linear(width, width), nn.GELU(), nn.Dropout(dropout)
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.body(x)

    class ResidualMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embeddings = nn.ModuleList(nn.Embedding(n, 4) for n in shape.cardinalities)
            self.stem = nn.Linear(4 * len(shape.cardinalities) + shape.numeric_width, width)
            self.blocks = nn.Sequential(*(Block() for _ in range(blocks)))
            self.out = nn.Linear(width, shape.outputs)

        def forward(self, codes: torch.Tensor, numeric: torch.Tensor) -> torch.Tensor:
            embedded = [e(codes[:, i]) for i, e in enumerate(self.embeddings)]
            return self.out(self.blocks(self.stem(torch.cat([*embedded, numeric], dim=1))))

    return ResidualMLP()
