"""Daily retraining of the hotel rate model: the second example, a regression.

The pipeline of ``flight_delay_training``, built by the same factory, for a domain brought from
outside trainyard: the ``hotel_rates`` package (``examples/hotel_rates``) with its own suites,
Feast repository, model settings and drift reference, all named in its settings file, which
this DAG and each of its steps load (``--config``) whatever ``TRAINYARD_CONFIG`` says. The run
for day D ingests the bookings arriving on D, trains on the validated window before the holdout
days ending at D, evaluates challenger and champion on those days, and moves the ``champion``
alias of ``hotel_rate`` only if the gate passes. Its cron alone schedules it.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, chain

from pipeline_steps.core.manifests import STEPS
from pipeline_steps.core.settings import load_settings
from pipeline_steps.orchestration import step_task
from pipeline_steps.orchestration.params import training_params
from pipeline_steps.orchestration.release import champion_event_task
from pipeline_steps.orchestration.trigger import (
    SourceDataSensor,
    TriggerOperator,
    training_run_args,
)

CONFIG = Path(__file__).resolve().parents[1] / "examples" / "hotel_rates" / "settings.yaml"
settings = load_settings(CONFIG)
orchestration = settings.orchestration

with DAG(
    dag_id="hotel_rate_training",
    description="Retrain, evaluate and gate-promote the hotel rate model every day",
    schedule=orchestration.schedule,
    start_date=pendulum.parse(orchestration.start_date, tz="UTC"),
    catchup=orchestration.catchup,
    max_active_runs=orchestration.max_active_runs,
    params=training_params(settings),
    doc_md=__doc__,
    tags=["trainyard", "training", "example"],
):
    run_args = training_run_args(CONFIG)
    chain(
        TriggerOperator(settings=settings, config=CONFIG),
        SourceDataSensor(settings=settings),
        *(step_task(step, settings, run_args) for step in STEPS),
        champion_event_task(settings, "promote"),
    )
