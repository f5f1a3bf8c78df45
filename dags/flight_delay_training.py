"""Daily retraining of the flight-delay model.

ingest → validate → features → train → evaluate → promote (``STEPS``), each a
`trainyard step` run by the configured runtime (local subprocess or Kubernetes pod). The run for
logical date D ingests D's flights, trains on the validated window before D, evaluates challenger
and champion on D, and moves the MLflow `champion` alias only if the gate passes.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, chain

from pipeline_steps.manifests import STEPS
from pipeline_steps.orchestration import step_task, training_schedule
from pipeline_steps.settings import load_settings

settings = load_settings()
orchestration = settings.orchestration

with DAG(
    dag_id="flight_delay_training",
    description="Retrain, evaluate and gate-promote the flight delay model every day",
    schedule=training_schedule(settings),  # the cron, or a drift event of the monitor
    start_date=pendulum.parse(orchestration.start_date, tz="UTC"),
    catchup=orchestration.catchup,
    max_active_runs=orchestration.max_active_runs,
    doc_md=__doc__,
    tags=["trainyard", "training"],
):
    chain(*(step_task(step, settings) for step in STEPS))
