"""MLflow wiring shared by the train, evaluate and promote steps."""

from __future__ import annotations

import logging
import os
from datetime import date
from functools import cache
from pathlib import Path
from typing import Any

from pipeline_steps.core.locks import store_lock
from pipeline_steps.core.settings import MlflowSettings
from pipeline_steps.core.trigger import Trigger
from pipeline_steps.core.usage import RunCost

log = logging.getLogger(__name__)
RUN_TAG = "trainyard.run_id"
FINGERPRINT_TAG = "trainyard.fingerprint"
"""On a registered version: what decides its model (``TrainManifest.fingerprint``)."""


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
    """One client per store and process: opening a store checks its schema, which takes a while.

    A database store (not a tracking server) is opened under its lock: its first use creates
    its tables, and the processes of several runs starting at once (a deployment's first runs,
    a study's first trials) collided on them, as on the experiment they create."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from mlflow import MlflowClient

    with store_lock(
        tracking_uri, "mlflow:store", setting="mlflow.tracking_uri", sqlite_suffix=".open"
    ):
        client = MlflowClient(tracking_uri, tracking_uri)
        _ensure_experiment(client, experiment, artifact_root)
    return client


def _ensure_experiment(client: Any, experiment: str, artifact_root: str) -> None:
    found = client.get_experiment_by_name(experiment)
    if found is None:
        location = artifact_root
        if location and ":/" not in location:
            location = Path(location).resolve().as_uri()
        client.create_experiment(
            experiment,
            artifact_location=f"{location}/{experiment}" if location else None,
            tags={EXPERIMENT_KIND: TRAINING_KIND},
        )
    elif EXPERIMENT_KIND not in (found.tags or {}):
        client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND, TRAINING_KIND)


EXPERIMENT_KIND = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"
"""The MLflow UI opens such an experiment on its training runs, not on GenAI traces."""


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


def aliased_version(client: Any, settings: MlflowSettings, alias: str) -> Any | None:
    """The version of the registered model that ``alias`` points at, or None when it points
    at none."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_model_version_by_alias(settings.registered_model, alias)
    except MlflowException:
        return None


def champion_version(client: Any, settings: MlflowSettings) -> Any | None:
    """The model version the champion alias points at, or None when there is no champion."""
    return aliased_version(client, settings, settings.champion_alias)


def cost_metrics(cost: RunCost) -> dict[str, float]:
    """A run's usage and cost as metrics of its training run: ``cost.total``, ``cost.<step>``
    and ``usage.*`` (seconds, GiB)."""
    total = cost.total
    return {
        "cost.total": total.cost,
        **{f"cost.{part.step}": part.cost for part in cost.steps},
        "usage.cpu_seconds": total.cpu_s,
        "usage.gpu_seconds": total.gpu_s,
        "usage.wall_seconds": total.wall_s,
        "usage.peak_rss_gib": total.peak_rss_gib,
        "usage.peak_gpu_memory_gib": total.peak_gpu_memory_bytes / 2**30,
    }


def log_run_cost(client: Any, mlflow_run_id: str, cost: RunCost) -> None:
    """Log ``cost_metrics`` on the training run, with the currency and the steps counted as
    tags (``trainyard.cost_currency``, ``trainyard.cost_steps``)."""
    import time

    from mlflow.entities import Metric, RunTag

    now = int(time.time() * 1000)
    client.log_batch(
        mlflow_run_id,
        metrics=[Metric(k, v, now, 0) for k, v in cost_metrics(cost).items()],
        tags=[
            RunTag("trainyard.cost_currency", cost.rates.currency),
            RunTag("trainyard.cost_steps", ", ".join(s.step for s in cost.steps) or "none"),
        ],
    )


DECISION_TAG = "trainyard.decision"
DATE_TAG = "trainyard.logical_date"
KIND_TAG = "trainyard.trigger_kind"
MOVED_AT_TAG = "trainyard.moved_at"
"""When (UTC, ISO) the promote step moved the champion alias to the version."""
REASONS_TAG = "trainyard.reasons"
"""The promote step's reasons, joined by `` | ``."""
COMPARED_WITH_TAG = "trainyard.champion_version"
"""The champion version a run's challenger was compared with (``none`` when there was none)."""
MOVED_FROM_TAG = "trainyard.moved_from"
"""The version the champion alias left for this one (``none`` when there was no champion)."""


def champion_as_of(client: Any, settings: MlflowSettings, day: date) -> Any | None:
    """The champion as it was on ``day``.

    When a run that was not a backfill already decided ``day`` (the first such version of that
    logical date), the champion it compared with, as recorded on its version: that holds
    whatever moved the alias before it ran, rollbacks included. Otherwise it is reconstructed
    from promotions and releases: of the versions whose recorded decision moved the live alias
    (``promoted`` or ``forced``, or a release from staging on a monitored day), the one of the
    newest logical date before ``day`` (the highest version among equals); a rollback has no
    logical date, so it cannot count there. Backfill runs
    never move the alias, so their versions never count. None when no run before ``day``
    promoted anything."""
    versions = client.search_model_versions(f"name = '{settings.registered_model}'")
    recorded = _compared_on(versions, day)
    if recorded == "none":
        return None
    by_number = {str(version.version): version for version in versions}
    if recorded in by_number:
        return by_number[recorded]
    best: tuple[str, int] | None = None
    chosen = None
    for version in versions:
        for moved_on in _moved_on(version.tags or {}):
            if moved_on >= day.isoformat():
                continue
            key = (moved_on, int(version.version))
            if best is None or key > best:
                best, chosen = key, version
    return chosen


def _moved_on(tags: dict[str, str]) -> list[str]:
    """The logical dates on which the live alias moved to a version: its promotion (not a
    backfill's), and its releases from staging (the monitor's day)."""
    from pipeline_steps.core.manifests import PROMOTED
    from pipeline_steps.core.stages import stage_records

    days = []
    if tags.get(DECISION_TAG) in PROMOTED and tags.get(KIND_TAG) != "backfill":
        days.append(tags.get(DATE_TAG, ""))
    for record in stage_records(tags):
        if record.get("stage") == "champion" and record.get("kind") == "release":
            days.append(str(record.get("day") or ""))
    return [day for day in days if day]


def _compared_on(versions: list[Any], day: date) -> str | None:
    """The champion version (or ``none``) recorded by the first run that decided ``day`` and
    was not a backfill; None when no such run recorded one."""
    recorded = {}
    for version in versions:
        tags = version.tags or {}
        if tags.get(DATE_TAG) != day.isoformat() or tags.get(KIND_TAG) in (None, "backfill"):
            continue
        if COMPARED_WITH_TAG in tags:
            recorded[int(version.version)] = str(tags[COMPARED_WITH_TAG])
    return recorded[min(recorded)] if recorded else None


def recorded_reasons(tags: dict[str, str]) -> list[str]:
    """The promote step's reasons as recorded in a version's ``REASONS_TAG``."""
    return [r.strip() for r in tags.get(REASONS_TAG, "").split(" | ") if r.strip()]


def reference_champion(
    client: Any, settings: MlflowSettings, trigger: Trigger, day: date
) -> Any | None:
    """The champion a run compares its challenger with, the same in evaluate and promote:

    - a backfill: the champion as of its logical date (``champion_as_of``), whatever the live
      alias says now, so a backfill's decisions do not depend on its concurrency or timing;
    - a replay: the version the replayed run compared with (``evidence["champion"]``; none
      when it had none);
    - any other run: the live alias."""
    from mlflow.exceptions import MlflowException

    if trigger.kind == "backfill":
        return champion_as_of(client, settings, day)
    if trigger.kind == "replay" and "champion" in trigger.evidence:
        recorded = trigger.evidence["champion"]
        if recorded is None:
            return None
        try:
            return client.get_model_version(settings.registered_model, str(recorded))
        except MlflowException:
            log.warning("the replayed run's champion version %s is gone; no champion", recorded)
            return None
    return champion_version(client, settings)
