"""Every DAG of a domain from its settings file, and the domains one deployment runs.

:func:`build_dags` turns one settings file into the domain's four DAGs, every name derived from
``domain.name`` (``hotel_rate``, a team's own):

``<name>_training``       trigger → wait_for_data → the pipeline's steps → emit_champion_event;
                          scheduled by its cron or by its own drift asset.
``<name>_drift_monitor``  wait_for_data → ingest → validate → monitor → release →
                          emit_drift_event (the ``<name>_drift`` asset), and release →
                          approve_release → emit_champion_event.
``<name>_tuning``         an Optuna study whose trials are mapped ``train`` tasks.
``<name>_serving``        scheduled by the ``<name>_champion`` asset: scores the next day.

Which steps each DAG chains is their declaration's (``dags`` in
:mod:`pipeline_steps.core.step_registry`). The steps of each DAG load the domain's settings file
(``--config``); the default domain (no file: ``TRAINYARD_CONFIG``, which the Makefile points at
an example's) passes none, as before.
``domain.team`` tags the DAGs ``team:<team>`` and gives their tasks the team's pools.

The deployment's domains (:func:`pipeline_steps.core.deployment.domain_settings_files`): the
default one, the shipped examples (``orchestration.example_domains``), and every ``*.yaml`` in
``orchestration.domains_dir`` (``TRAINYARD_ORCHESTRATION__DOMAINS_DIR``).
``dags/trainyard_domains.py`` builds them all; a thin DAG file of one domain is
``globals().update(build_dags("path/to/settings.yaml"))``.

Kept light: DAG parsing imports this (settings and Airflow's SDK only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG, chain

from pipeline_steps.core.deployment import (
    DAG_KINDS,
    DomainFile,
    domain_settings_files,
    load_domain_settings,
    under_deployment,
)
from pipeline_steps.core.settings import Settings
from pipeline_steps.core.step_registry import RELEASE, steps_of


def dag_id(settings: Settings, kind: str) -> str:
    """The id of the domain's DAG of ``kind`` (one of ``DAG_KINDS``)."""
    return f"{settings.domain.name}_{kind}"


def tags(settings: Settings, kind: str) -> list[str]:
    """The DAG's tags: trainyard, its kind, its domain and its team."""
    team = settings.domain.team
    return [
        "trainyard",
        DAG_KINDS[kind],
        f"domain:{settings.domain.name}",
        *([f"team:{team}"] if team else []),
    ]


def default_args(settings: Settings) -> dict[str, Any]:
    """Arguments of every task of the domain's DAGs: the team's pool, if any (the GPU tasks
    take the GPU pool instead), and with ``orchestration.team_queues`` the team's Celery queue
    (:func:`pipeline_steps.core.team_credentials.team_queue`)."""
    from pipeline_steps.core.team_credentials import team_queue

    orch, team = settings.orchestration, settings.domain.team
    args: dict[str, Any] = {"pool": orch.pool} if orch.pool else {}
    if orch.team_queues and team:
        args["queue"] = team_queue(team)
    return args


def _common(settings: Settings, kind: str, doc: str) -> dict[str, Any]:
    return {
        "dag_id": dag_id(settings, kind),
        "start_date": pendulum.parse(settings.orchestration.start_date, tz="UTC"),
        "doc_md": doc.format(name=settings.domain.name, team=settings.domain.team or "none"),
        "tags": tags(settings, kind),
        "default_args": default_args(settings),
        # the DAGs reach Airflow as the module's globals (``build_dags``' result), a domain's
        # all or none: one built before another of its domain failed is not registered either
        "auto_register": False,
    }


TRAINING_DOC = """Daily retraining of the ``{name}`` model (team: {team}).

trigger → wait_for_data → ingest → validate → features → train → evaluate → promote →
emit_champion_event. Each step is a `trainyard step` run by the configured runtime (local
subprocess or Kubernetes pod) with the domain's settings. The run for day D ingests D's rows,
trains on the validated window before the holdout days ending at D, evaluates challenger and
champion on them, and, only if the gate passes, stages the challenger to shadow the champion
(``release.mode: staged``; ``{name}_drift_monitor`` releases it) or moves the MLflow `champion`
alias (the first champion, ``direct`` mode, a forced promotion: then ``emit_champion_event``
updates the ``{name}_champion`` asset). ``trigger`` says why the run started (cron, a manual
trigger with the form, a backfill, a ``{name}_drift`` event) and checks the form;
``wait_for_data`` ends the run skipped when the source never gets day D, or (``domain.empty_days:
skip``) holds no row for it."""


def training_dag(settings: Settings, config: str | None = None) -> DAG:
    """``<name>_training``: see :data:`TRAINING_DOC`."""
    from pipeline_steps.orchestration.assets import training_schedule
    from pipeline_steps.orchestration.params import training_params
    from pipeline_steps.orchestration.release import PROMOTE_TASK, champion_event_task
    from pipeline_steps.orchestration.runners import step_task
    from pipeline_steps.orchestration.trigger import (
        SourceDataSensor,
        TriggerOperator,
        training_run_args,
    )

    orch = settings.orchestration
    with DAG(
        description=f"Retrain, evaluate and gate-promote the {settings.domain.name} model",
        schedule=training_schedule(settings),  # the cron, or a drift event of its monitor
        catchup=orch.catchup,
        max_active_runs=orch.max_active_runs,
        params=training_params(settings),
        **_common(settings, "training", TRAINING_DOC),
    ) as dag:
        run_args = training_run_args(config)
        chain(
            TriggerOperator(settings=settings, config=config),
            SourceDataSensor(settings=settings),
            *(step_task(step, settings, run_args) for step in steps_of("training")),
            champion_event_task(settings, PROMOTE_TASK),
        )
    return dag


MONITOR_DOC = """Daily drift check of the ``{name}`` domain's new data, training nothing, and the
release path of its champion (team: {team}).

wait_for_data → ingest → validate → monitor → release → emit_drift_event, and release →
approve_release → emit_champion_event. The monitor step compares the window of
``drift.current_days`` days ending at the logical date with the champion's reference and scores
the champion, and the staged candidate beside it, on the day (MLflow experiment
``mlflow.monitoring_experiment``). The release step rolls back a champion that stayed worse than
the version it replaced, or releases, retires or keeps waiting the staged candidate on its pooled
shadow days; ``approve_release`` asks a person when ``release.approval`` says so. When drift
crosses its thresholds outside ``drift.cooldown_hours``, or the champion was rolled back,
``emit_drift_event`` records an event of the ``{name}_drift`` asset carrying the evidence, and
that event schedules ``{name}_training`` (no other domain's); ``emit_champion_event`` records an
event of ``{name}_champion`` when the champion moved. A day without rows in a domain where that
is ordinary (``domain.empty_days: skip``) ends the run skipped."""


def monitor_dag(settings: Settings, config: str | None = None) -> DAG:
    """``<name>_drift_monitor``: see :data:`MONITOR_DOC`."""
    from pipeline_steps.orchestration.assets import drift_event_task
    from pipeline_steps.orchestration.release import (
        APPROVAL_TASK,
        approval_task,
        champion_event_task,
        monitor_run_args,
    )
    from pipeline_steps.orchestration.runners import DEFAULT_RUN_ARGS, step_task
    from pipeline_steps.orchestration.trigger import SourceDataSensor

    run_args = [*DEFAULT_RUN_ARGS, *(["--config", config] if config else [])]
    with DAG(
        description=f"Check each new day of {settings.domain.name} for drift, release or roll "
        "back its champion",
        schedule=settings.orchestration.schedule,
        catchup=settings.orchestration.catchup,
        max_active_runs=1,  # the cooldown reads the last event: one verdict at a time
        **_common(settings, "drift_monitor", MONITOR_DOC),
    ) as dag:
        # the release step reads the run's trigger (a backfill moves no alias), and its
        # decision goes on to the approval and the champion's event
        steps = {
            step.name: step_task(
                step, settings, monitor_run_args(config) if step is RELEASE else run_args
            )
            for step in steps_of("drift_monitor")
        }
        chain(
            SourceDataSensor(settings=settings, day="{{ ds }}"),
            *steps.values(),
            drift_event_task(settings),
        )
        chain(
            steps[RELEASE.name],
            approval_task(settings),
            champion_event_task(settings, RELEASE.task_id, APPROVAL_TASK),
        )
    return dag


TUNING_DOC = """Hyperparameter tuning of the ``{name}`` model with Optuna (team: {team}).

tuning_day → ingest → validate → features → prepare_study → trial (mapped, one per trial) →
record_best. The run builds one frozen training set for the day to tune on (the trigger form's
day, else the run's logical date), then trains trials on it: each trial is the real ``train``
step run by the configured runtime with parameters drawn by the study (search space
``tuning.search_space``), reporting each epoch's validation loss so the pruner can stop it. The
study lives in the Optuna storage (``tuning.storage``) under a name derived from the model, the
search space and the training set, so running this DAG again for the same day continues the
study. ``record_best`` writes the best trial's parameters to the domain's lake, where
``{name}_training`` takes them with ``train.params_from: tuning``. Watch the study with
``make optuna``; the trials are child runs of the study's run in ``tuning.experiment``."""


def tuning_dag(settings: Settings, config: str | None = None) -> DAG:
    """``<name>_tuning``: see :data:`TUNING_DOC`."""
    from pipeline_steps.orchestration.runners import step_task
    from pipeline_steps.orchestration.tuning import (
        PrepareStudyOperator,
        RecordBestOperator,
        TuningDayOperator,
        trial_tasks,
        tuning_params,
        tuning_run_args,
    )

    with DAG(
        description=f"Tune the {settings.domain.name} model's hyperparameters with Optuna",
        schedule=settings.tuning.schedule or None,
        catchup=False,
        max_active_runs=1,
        params=tuning_params(settings),
        **_common(settings, "tuning", TUNING_DOC),
    ) as dag:
        run_args = tuning_run_args(config)
        prepare = PrepareStudyOperator(run_args=run_args)
        chain(
            TuningDayOperator(),
            *(step_task(step, settings, run_args) for step in steps_of("tuning")),
            prepare,
            trial_tasks(settings, run_args, prepare.output),
            RecordBestOperator(run_args=run_args),
        )
    return dag


SERVING_DOC = """Serving the ``{name}`` domain's new champion (team: {team}).

serving_day → ingest → validate → score. Every move of the champion alias (a promotion, a release
from staging, a rollback) records an event of the ``{name}_champion`` asset; this DAG runs on it,
takes the day after the one the champion moved on (with ``domain.empty_days: skip``, the first
later day with rows), ingests and validates it, and scores its rows with the new champion through
the online store (``trainyard predict``), into ``serving/date=D/predictions.parquet`` in the
domain's lake. A copy of it is where a team plugs in its own serving: a model-server rollout, a
cache refresh, a batch export."""


def serving_dag(settings: Settings, config: str | None = None) -> DAG:
    """``<name>_serving``: see :data:`SERVING_DOC`."""
    from pipeline_steps.orchestration.release import champion_asset
    from pipeline_steps.orchestration.runners import step_task
    from pipeline_steps.orchestration.serving import (
        SERVING_DAY,
        ScoreDayOperator,
        ServingDayOperator,
    )

    run_args = [
        "--run-id",
        "{{ run_id }}",
        "--logical-date",
        SERVING_DAY,
        *(["--config", config] if config else []),
    ]
    with DAG(
        description=f"Score the next day with the {settings.domain.name} champion each time "
        "it moves",
        schedule=champion_asset(settings),
        catchup=False,
        max_active_runs=1,
        **_common(settings, "serving", SERVING_DOC),
    ) as dag:
        chain(
            ServingDayOperator(task_id="serving_day", settings=settings),
            *(step_task(step, settings, run_args) for step in steps_of("serving")),
            ScoreDayOperator(task_id="score", settings=settings, config=config),
        )
    return dag


BUILDERS = {
    "training": training_dag,
    "drift_monitor": monitor_dag,
    "tuning": tuning_dag,
    "serving": serving_dag,
}


def build_dags(settings_file: str | Path | None = None) -> dict[str, DAG]:
    """The domain's four DAGs by id, from its settings file (None: the default domain, whose
    steps load ``TRAINYARD_CONFIG`` as the DAG does). Raises ``SettingsError`` naming the file
    and the refused setting."""
    path = Path(settings_file).resolve() if settings_file is not None else None
    deployment = load_domain_settings(None)
    domain = DomainFile(path, under_deployment(load_domain_settings(path), deployment))
    return _dags_of(domain)


def _dags_of(domain: DomainFile, wanted: str | None = None) -> dict[str, DAG]:
    """The domain's DAGs by id; only the one of id ``wanted`` (none if not the domain's) when
    given."""
    dags = {}
    for kind, builder in BUILDERS.items():
        if wanted is None or wanted == dag_id(domain.settings, kind):
            dag = builder(domain.settings, domain.config)
            dags[dag.dag_id] = dag
    return dags


def all_dags() -> dict[str, DAG]:
    """Every DAG of every domain of the deployment (:func:`domain_settings_files`). A domain
    whose settings file is refused, or whose DAGs fail to build, is left out, its reason logged
    as an error by the DAG processor (``trainyard domains`` shows a refused file too): the other
    domains' DAGs keep running."""
    import logging

    from airflow.sdk import get_parsing_context

    # A task's process parses the file for its own DAG alone (Airflow's parsing context): it
    # builds that one, not every DAG of every domain.
    wanted = get_parsing_context().dag_id
    dags: dict[str, DAG] = {}
    refused: list[str] = []
    for domain in domain_settings_files(refused=refused):
        try:
            dags |= _dags_of(domain, wanted)
        except Exception as exc:  # a domain's form, Params or package: its DAGs alone left out
            where = domain.config or "the default domain (TRAINYARD_CONFIG)"
            refused.append(f"{where}: its DAGs could not be built: {type(exc).__name__}: {exc}")
    for reason in refused:
        logging.getLogger(__name__).error("domain left out: %s", reason)
    return dags
