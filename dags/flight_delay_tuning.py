"""Hyperparameter tuning of the flight-delay model with Optuna.

tuning_day → ingest → validate → features → prepare_study → trial (mapped, one per trial) →
record_best.
The run builds one frozen training set for the day to tune on (the trigger form's day, else the
run's logical date), then trains trials on it: each trial is the real ``train`` step run by the
configured runtime with parameters drawn by the study (search space ``tuning.search_space``),
reporting each epoch's validation loss so the pruner can stop it. The study lives in the Optuna
storage (``tuning.storage``) under a name derived from the model, the search space and the
training set, so running this DAG again for the same day continues the study. ``record_best``
writes the best trial's parameters to the lake, where ``flight_delay_training`` takes them with
``train.params_from: tuning``. Watch the study with ``make optuna``; the trials are child runs of
the study's run in the MLflow experiment ``tuning.experiment``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, chain

from pipeline_steps.core.settings import load_settings
from pipeline_steps.orchestration import step_task
from pipeline_steps.orchestration.tuning import (
    PrepareStudyOperator,
    RecordBestOperator,
    TuningDayOperator,
    trial_tasks,
    tuning_params,
    tuning_run_args,
)

settings = load_settings()
orchestration = settings.orchestration

with DAG(
    dag_id="flight_delay_tuning",
    description="Tune the flight delay model's hyperparameters with an Optuna study",
    schedule=settings.tuning.schedule or None,
    start_date=pendulum.parse(orchestration.start_date, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params=tuning_params(settings),
    doc_md=__doc__,
    tags=["trainyard", "tuning"],
):
    run_args = tuning_run_args()
    prepare = PrepareStudyOperator(run_args=run_args)
    chain(
        TuningDayOperator(),
        *(step_task(step, settings, run_args) for step in ("ingest", "validate", "features")),
        prepare,
        trial_tasks(settings, run_args, prepare.output),
        RecordBestOperator(run_args=run_args),
    )
