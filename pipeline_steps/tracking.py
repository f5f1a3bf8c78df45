"""MLflow wiring shared by the train, evaluate and promote steps."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from pipeline_steps.settings import MlflowSettings

log = logging.getLogger(__name__)
RUN_TAG = "trainyard.run_id"


def connect(settings: MlflowSettings) -> Any:
    """Point MLflow at the configured store, make sure the experiment exists, return a client."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import mlflow
    from mlflow import MlflowClient

    if settings.tracking_uri.startswith("sqlite:///"):
        Path(settings.tracking_uri.removeprefix("sqlite:///")).parent.mkdir(
            parents=True, exist_ok=True
        )
    mlflow.set_tracking_uri(settings.tracking_uri)
    mlflow.set_registry_uri(settings.tracking_uri)
    client = MlflowClient(settings.tracking_uri, settings.tracking_uri)
    if client.get_experiment_by_name(settings.experiment) is None:
        location = settings.artifact_root
        if location and ":/" not in location:
            location = Path(location).resolve().as_uri()
        client.create_experiment(
            settings.experiment,
            artifact_location=f"{location}/{settings.experiment}" if location else None,
        )
    mlflow.set_experiment(settings.experiment)
    return client


def find_run(client: Any, settings: MlflowSettings, run_id: str) -> Any | None:
    """The MLflow run that trained pipeline run ``run_id``, if one was started."""
    experiment = client.get_experiment_by_name(settings.experiment)
    runs = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.`{RUN_TAG}` = '{run_id}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0] if runs else None


def champion_version(client: Any, settings: MlflowSettings) -> Any | None:
    """The model version the champion alias points at, or None when there is no champion."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_model_version_by_alias(settings.registered_model, settings.champion_alias)
    except MlflowException:
        return None
