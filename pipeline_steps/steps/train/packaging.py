"""The registered model: an MLflow pyfunc predicting delay probabilities from raw feature rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from mlflow.pyfunc import PythonModel

from pipeline_steps.steps.train.data import Preprocessor
from pipeline_steps.steps.train.models import build_model

BUNDLE = "model_bundle"
ENTRY_POINT = str(Path(__file__).with_name("pyfunc_entry.py"))


def bundle(
    model: torch.nn.Module, pre: Preprocessor, model_name: str, model_config: dict[str, Any]
) -> dict[str, Any]:
    """Everything needed to rebuild the model: weights, architecture and preprocessing."""
    return {
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "model_name": model_name,
        "model_config": model_config,
        "preprocessor": pre.to_dict(),
    }


class FlightDelayModel(PythonModel):
    """pyfunc wrapper: ``predict(frame)`` → probability of arriving more than 15 minutes late.

    Stored with the plain pickle of a state dict (not MLflow 3's default pt2 export, which needs
    an input example and loads back a GraphModule), so it loads on any CPU without compilation.
    """

    def load_context(self, context: Any) -> None:
        payload = torch.load(context.artifacts[BUNDLE], map_location="cpu", weights_only=False)
        self.preprocessor = Preprocessor.from_dict(payload["preprocessor"])
        self.model = build_model(payload["model_name"], **payload["model_config"])
        self.model.load_state_dict(payload["state_dict"])
        self.model.eval()

    def predict(self, context: Any, model_input: pd.DataFrame, params: Any = None) -> np.ndarray:
        codes, numeric = self.preprocessor.transform(model_input)
        with torch.no_grad():
            logits = self.model(codes, numeric)
        return torch.sigmoid(logits).numpy().astype(np.float64)
