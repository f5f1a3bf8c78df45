"""Daily retraining of the flight-delay model.

trigger → wait_for_data → ingest → validate → features → train → evaluate → promote →
emit_champion_event. The steps (``STEPS``) are each a `trainyard step` run by the configured runtime
(local subprocess or Kubernetes pod). The run for day D ingests D's flights, trains on the validated
window before D, evaluates challenger and champion on D, and, only if the gate passes, stages the
challenger to shadow the champion (``release.mode: staged``; the monitor DAG releases it) or moves
the MLflow `champion` alias (the first champion, ``direct`` mode, a forced promotion: then
``emit_champion_event`` updates the ``flight_delay_champion`` asset). ``trigger`` says why the run
started (cron, a manual trigger with the form below, a backfill) and checks the form;
``wait_for_data`` ends the run skipped when the source never gets day D."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, chain

from pipeline_steps.core.manifests import STEPS
from pipeline_steps.core.settings import load_settings
from pipeline_steps.orchestration import step_task, training_schedule
from pipeline_steps.orchestration.params import training_params
from pipeline_steps.orchestration.release import champion_event_task
from pipeline_steps.orchestration.trigger import (
    SourceDataSensor,
    TriggerOperator,
    training_run_args,
)

settings = load_settings()
orchestration = settings.orchestration

with DAG(
    dag_id="flight_delay_training",
    description="Retrain, evaluate and gate-promote the flight delay model every day",
    schedule=training_schedule(settings),  # the cron, or a drift event of the monitor
    start_date=pendulum.parse(orchestration.start_date, tz="UTC"),
    catchup=orchestration.catchup,
    max_active_runs=orchestration.max_active_runs,
    params=training_params(settings),
    doc_md=__doc__,
    tags=["trainyard", "training"],
):
    run_args = training_run_args()
    chain(
        TriggerOperator(settings=settings),
        SourceDataSensor(settings=settings),
        *(step_task(step, settings, run_args) for step in STEPS),
        champion_event_task(settings, "promote"),
    )
