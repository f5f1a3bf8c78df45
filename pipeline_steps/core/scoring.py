"""A registered model's predictions on feature rows, as the monitor and the engines score them."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from pipeline_steps.core.domain import Domain
from pipeline_steps.core.errors import StepError


def scorer(model_uri: str, features: list[str]) -> Callable[[pd.DataFrame], np.ndarray]:
    """The model's predictions for feature rows (probabilities, values, or [n, K] class
    probabilities). Raises ``StepError`` when the model cannot be loaded."""
    import mlflow.pyfunc

    try:
        model = mlflow.pyfunc.load_model(model_uri)
    except Exception as exc:
        raise StepError(f"champion {model_uri} could not be loaded: {exc}") from exc

    def predict(rows: pd.DataFrame) -> np.ndarray:
        return np.asarray(model.predict(rows[features]), dtype=np.float64)

    return predict


def predicted_signal(domain: Domain, predicted: np.ndarray) -> np.ndarray:
    """What the prediction drift is measured on: the probability or the value, or for a
    multiclass task the most probable class's name."""
    if domain.task == "multiclass":
        return np.asarray(domain.classes, dtype=object)[np.asarray(predicted).argmax(1)]
    return predicted
