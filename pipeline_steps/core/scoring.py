"""A registered model's predictions on feature rows, as the monitor and the engines score them."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from pipeline_steps.core.domain import Domain
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.tasks import task_spec


def scorer(
    model_uri: str, features: list[str], domain: Domain | None = None
) -> Callable[[pd.DataFrame], np.ndarray]:
    """The model's predictions for feature rows (probabilities, values, or [n, K] class
    probabilities, read as ``domain``'s task reads its model's output: a frame's class columns
    in the order of its classes). Raises ``StepError`` when the model cannot be loaded."""
    import mlflow.pyfunc

    try:
        model = mlflow.pyfunc.load_model(model_uri)
    except Exception as exc:
        raise StepError(f"champion {model_uri} could not be loaded: {exc}") from exc

    def predict(rows: pd.DataFrame) -> np.ndarray:
        output = model.predict(rows[features])
        if domain is None:
            return np.asarray(output, dtype=np.float64)
        return task_spec(domain.task).read_predictions(output, domain.classes)

    return predict


def predicted_signal(domain: Domain, predicted: np.ndarray) -> np.ndarray:
    """What the prediction drift is measured on: the probability or the value, or for a task
    with classes the predicted class's name (``Task.drift_signal``)."""
    return task_spec(domain.task).drift_signal(predicted, domain.classes)
