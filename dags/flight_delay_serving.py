"""Serving the new champion: an example of a DAG scheduled on the champion asset.

serving_day → ingest → validate → score. Every move of the ``flight_delay`` champion alias (a
promotion, a release from staging, a rollback) records an event of the ``flight_delay_champion``
asset; this DAG runs on it, takes the day after the one the champion moved on, ingests and
validates it, and scores its flights with the new champion through the online store
(``trainyard predict``), into ``serving/date=D/predictions.parquet`` in the lake. A copy of it is
where a team plugs in its own serving: a model-server rollout, a cache refresh, a batch export.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, chain

from pipeline_steps.core.settings import load_settings
from pipeline_steps.orchestration import step_task
from pipeline_steps.orchestration.release import champion_asset
from pipeline_steps.orchestration.serving import (
    SERVING_DAY,
    ScoreDayOperator,
    ServingDayOperator,
)

settings = load_settings()
run_args = ("--run-id", "{{ run_id }}", "--logical-date", SERVING_DAY)

with DAG(
    dag_id="flight_delay_serving",
    description="Score the next day with the champion each time it moves",
    schedule=champion_asset(settings),
    start_date=pendulum.parse(settings.orchestration.start_date, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["trainyard", "serving", "example"],
):
    chain(
        ServingDayOperator(task_id="serving_day"),
        *(step_task(step, settings, run_args) for step in ("ingest", "validate")),
        ScoreDayOperator(task_id="score", settings=settings),
    )
