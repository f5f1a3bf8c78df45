"""Runs recorded up to evaluate, with a logged model, for tests of promotion and the registry
that need no training."""

from __future__ import annotations

import mlflow
import numpy as np
from mlflow.pyfunc import PythonModel

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.manifests import ScoredChampion
from pipeline_steps.core.tracking import connect
from tests.manifests import evaluate_manifest, features_manifest, ingest_manifest, train_manifest


class Constant(PythonModel):
    def predict(self, context, model_input, params=None):
        return np.full(len(model_input), 0.5)


def logged_model(settings) -> tuple[str, str]:
    """A constant model logged in its own MLflow run: the run id and the model's URI."""
    connect(settings.mlflow)
    with mlflow.start_run() as run:
        # Requirements given: inferring them loads the model in a subprocess (2 s a model).
        info = mlflow.pyfunc.log_model(
            name="model", python_model=Constant(), pip_requirements=["mlflow"]
        )
    return run.info.run_id, info.model_uri


def record_evaluated(
    ctx: RunContext,
    mlflow_run_id: str,
    model_uri: str,
    auc: float,
    champion: ScoredChampion | None,
) -> RunContext:
    """Record the run's steps up to evaluate: its challenger scored ``auc`` (against
    ``champion``, with intervals ±0.01 around the differences)."""
    ctx.record(ingest_manifest())
    ctx.record(features_manifest())
    ctx.record(train_manifest(mlflow_run_id, model_uri))
    ctx.record(evaluate_manifest(mlflow_run_id, model_uri, auc, champion))
    return ctx
