"""The registered model: an MLflow pyfunc predicting from raw feature rows, as the task's head
says (a probability of 1, a probability per class, or a value in the label's units)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from mlflow.pyfunc import PythonModel

from pipeline_steps.steps.train.data import Preprocessor
from pipeline_steps.steps.train.heads import Head
from pipeline_steps.steps.train.models import rebuild

BUNDLE = "model_bundle"
ENTRY_POINT = str(Path(__file__).with_name("pyfunc_entry.py"))


def bundle(
    model: torch.nn.Module, pre: Preprocessor, model_name: str, model_config: dict[str, Any]
) -> dict[str, Any]:
    """Everything needed to rebuild the model: weights, the model's reference (a registered
    name or import path) with its shape, hyperparameters and head, and the preprocessing."""
    return {
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "model_name": model_name,
        "model_config": model_config,
        "preprocessor": pre.to_dict(),
    }


class TrainedModel(PythonModel):
    """pyfunc wrapper: ``predict(frame)`` → what the task's ``model_output`` gives: per row the
    probability of 1 (binary), a frame of a probability per class named by the classes
    (multiclass; ordinal adds ``predicted_class``, the median class's name), or the value
    (regression).

    Stored with the plain pickle of a state dict (not MLflow 3's default pt2 export, which needs
    an input example and loads back a GraphModule), so it loads on any CPU without compilation.
    """

    def load_context(self, context: Any) -> None:
        payload = torch.load(context.artifacts[BUNDLE], map_location="cpu", weights_only=False)
        self.preprocessor = Preprocessor.from_dict(payload["preprocessor"])
        config = payload["model_config"]
        self.head = Head.from_dict(config.get("head"))
        self.model = rebuild(payload["model_name"], config)
        self.model.load_state_dict(payload["state_dict"])
        self.model.eval()

    def predict(
        self, context: Any, model_input: pd.DataFrame, params: Any = None
    ) -> np.ndarray | pd.DataFrame:
        codes, numeric = self.preprocessor.transform(model_input)
        with torch.no_grad():
            outputs = self.model(codes, numeric)
        if outputs.dim() == 1:  # a model that returns [n] for one output
            outputs = outputs.unsqueeze(1)
        predicted = self.head.predict(outputs)
        return self.head.spec.model_output(predicted, self.head.classes, model_input.index)


def __getattr__(name: str) -> type[TrainedModel]:
    """Models registered before the task heads pickled this class under a domain's own name
    (``<Name>Model``); loading one resolves that name to :class:`TrainedModel`."""
    if name.endswith("Model") and name[:1].isupper():
        return TrainedModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
