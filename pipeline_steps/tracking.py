"""MLflow wiring shared by the train, evaluate and promote steps."""

from __future__ import annotations

import logging
import os
from functools import cache
from pathlib import Path
from typing import Any

from pipeline_steps.settings import MlflowSettings

log = logging.getLogger(__name__)
RUN_TAG = "trainyard.run_id"


def connect(settings: MlflowSettings) -> Any:
    """Point MLflow at the configured store, make sure the experiment exists, return a client."""
    import mlflow

    client = _client(settings.tracking_uri, settings.experiment, settings.artifact_root)
    mlflow.set_tracking_uri(settings.tracking_uri)
    mlflow.set_registry_uri(settings.tracking_uri)
    mlflow.set_experiment(settings.experiment)
    return client


@cache
def _client(tracking_uri: str, experiment: str, artifact_root: str) -> Any:
    """One client per store and process: opening a store checks its schema, which takes a while."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from mlflow import MlflowClient

    if tracking_uri.startswith("sqlite:///"):
        Path(tracking_uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    client = MlflowClient(tracking_uri, tracking_uri)
    if client.get_experiment_by_name(experiment) is None:
        location = artifact_root
        if location and ":/" not in location:
            location = Path(location).resolve().as_uri()
        client.create_experiment(
            experiment, artifact_location=f"{location}/{experiment}" if location else None
        )
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
