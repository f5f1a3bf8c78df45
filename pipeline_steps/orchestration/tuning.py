"""The tasks of ``<domain>_tuning`` beyond the pipeline's own steps.

``prepare_study``  creates or continues the study of the run's frozen training set and plans
                   the missing trials (its ``slots`` XCom is what the trials are mapped over).
``trial``          one mapped task per trial: claims a trial (ask), runs the real ``train`` step
                   through the runner factory with the trial's parameters (a subprocess under
                   torchrun, or a pod), and tells the study the outcome. A pruned trial ends the
                   task successfully. A failed attempt is retried and takes its trial back, so
                   training resumes from the trial's checkpoint; the last failed attempt tells
                   FAIL and the study goes on.
``record_best``    runs whatever the trials did: records the best trial in the lake and MLflow.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from airflow.sdk import BaseOperator

from pipeline_steps.core.settings import Settings
from pipeline_steps.core.step_registry import TRAIN
from pipeline_steps.core.team_credentials import as_team
from pipeline_steps.orchestration.launch import step_argv
from pipeline_steps.orchestration.params import TUNING_FORM, form_params, set_arguments
from pipeline_steps.orchestration.pools import TRIAL_TASK, gpu_task_args, step_gpus
from pipeline_steps.orchestration.runners import pod_arguments, retry_args
from pipeline_steps.orchestration.trials import PREPARE_TASK, LocalTrialOperator, run_context

DAY_TASK = "tuning_day"

TUNING_DAY = f"{{{{ ti.xcom_pull(task_ids='{DAY_TASK}') }}}}"


class TuningDayOperator(BaseOperator):
    """The run's first task: the day whose training window the study tunes on, the form's
    ``logical_date`` or else the run's logical date; a run with neither fails at once."""

    ui_color = "#fdf2d0"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(task_id=DAY_TASK, retries=0, **kwargs)

    def execute(self, context: Any) -> str:
        from airflow.sdk.exceptions import AirflowFailException

        chosen = (context.get("params") or {}).get("logical_date")
        logical = context.get("logical_date")
        if chosen:
            day = str(chosen)[:10]
        elif logical is not None:
            day = logical.date().isoformat()
        else:
            raise AirflowFailException(
                "this run has no day to tune for: trigger it with logical_date in the form "
                "(e.g. 2013-06-01; the study tunes on that day's training window)"
            )
        self.log.info("tuning on the training window of %s", day)
        return day


def tuning_params(settings: Settings) -> dict[str, Any]:
    """The tuning form: the day whose window to tune on, and the study's settings."""
    from airflow.sdk import Param

    cap = settings.tuning.max_parallel_trials
    parallel = TUNING_FORM["parallel_trials"]
    form = TUNING_FORM | {
        "parallel_trials": replace(
            parallel,
            schema={**parallel.schema, "maximum": cap},
            description=f"{parallel.description} At most {cap} "
            "(tuning.max_parallel_trials, fixed when the DAG is parsed).",
        )
    }
    params = form_params(settings, form)
    return {
        "logical_date": Param(
            None,
            type=["string", "null"],
            pattern=r"^\d{4}-\d{2}-\d{2}$",
            title="Day to tune for",
            description="The study tunes on the training window of this day (YYYY-MM-DD), "
            "as <domain>_training would train for it; empty: the run's logical date.",
            section="Study",
        ),
        **params,
    }


def tuning_run_args(config: str | None = None) -> list[str]:
    """The argv after ``trainyard step <name>`` in a tuning run; with ``config``, the domain's
    settings file every step loads."""
    return [
        "--run-id",
        "{{ run_id }}",
        "--logical-date",
        TUNING_DAY,
        *set_arguments(TUNING_FORM),
        *(["--config", config] if config else []),
    ]


class PrepareStudyOperator(BaseOperator):
    """Creates or continues the study; XCom: the trial slots to map over, and the whole plan
    under the key ``plan``."""

    template_fields = ("run_args",)
    ui_color = "#efe6f7"

    def __init__(self, *, run_args: list[str], **kwargs: Any) -> None:
        super().__init__(task_id=PREPARE_TASK, **kwargs)
        self.run_args = run_args

    def execute(self, context: Any) -> list[int]:
        from airflow.sdk.exceptions import AirflowFailException

        from pipeline_steps.core.errors import StepError
        from pipeline_steps.core.manifests import to_json
        from pipeline_steps.tuning.results import prepare
        from pipeline_steps.tuning.space import SpaceError

        ctx = run_context(self.run_args)
        try:
            with as_team(ctx.settings.domain.team):
                plan = prepare(ctx)
        except (SpaceError, StepError) as exc:
            raise AirflowFailException(str(exc)) from exc
        context["ti"].xcom_push(key="plan", value=to_json(plan))
        self.log.info("study %s: %d trial(s) to run", plan.study, len(plan.slots))
        return plan.slots


def trial_tasks(settings: Settings, run_args: list[str], slots: Any) -> Any:
    """The mapped trial task under the configured runtime, over ``slots``. A trial trains in
    one pod (or process): it takes that pod's GPUs from the GPU pool, or without GPUs a slot of
    its team's training pool (when the team has a quota) as a job's training does, at tuning's
    priority (a waiting job's training above it goes first)."""
    gpus = step_gpus(settings, nodes=1)
    common = {
        "task_id": TRIAL_TASK,
        "max_active_tis_per_dagrun": settings.tuning.max_parallel_trials,
        **retry_args(settings),
        **gpu_task_args(settings, gpus, settings.orchestration.tuning_priority, training=True),
    }
    if settings.orchestration.runtime == "kubernetes":
        from pipeline_steps.orchestration.trial_pod import PodTrialOperator

        pod = pod_arguments(TRAIN, settings, run_args)
        return PodTrialOperator.partial(
            step=TRAIN.name,
            name="trainyard-trial",
            xcom_sidecar_container_security_context=pod["container_security_context"],
            do_xcom_push=True,
            on_finish_action="delete_pod",
            **pod,
            **common,
        ).expand(slot=slots)
    argv = step_argv(TRAIN, settings, run_args)
    team = settings.domain.team
    return LocalTrialOperator.partial(step=TRAIN.name, argv=argv, team=team, **common).expand(
        slot=slots
    )


class RecordBestOperator(BaseOperator):
    """Runs after the trials whatever their outcome: fails the run's trials left running,
    records the best trial (lake, MLflow parent run) and logs where to look."""

    template_fields = ("run_args",)
    ui_color = "#efe6f7"

    def __init__(self, *, run_args: list[str], **kwargs: Any) -> None:
        super().__init__(task_id="record_best", trigger_rule="all_done", **kwargs)
        self.run_args = run_args

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        from pipeline_steps.core.errors import StepError
        from pipeline_steps.core.manifests import to_json
        from pipeline_steps.tuning.results import finish

        plan = context["ti"].xcom_pull(task_ids=PREPARE_TASK, key="plan")
        if not plan:
            raise AirflowFailException("prepare_study did not run: no study to record")
        ctx = run_context(self.run_args)
        try:
            with as_team(ctx.settings.domain.team):
                best = finish(ctx, plan["study"])
        except StepError as exc:
            raise AirflowFailException(str(exc)) from exc
        self.log.info(
            "best trial %d of study %s: validation loss %.5f with %s (%d complete, %d pruned, "
            "%d failed); recorded in %s",
            best.trial,
            best.study,
            best.value,
            best.params,
            best.trials_complete,
            best.trials_pruned,
            best.trials_failed,
            ctx.lake.path("tuning", "best"),
        )
        return dict(to_json(best))
