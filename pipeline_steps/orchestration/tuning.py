"""The tasks of ``flight_delay_tuning`` beyond the pipeline's own steps.

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

import argparse
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from typing import Any

from airflow.sdk import BaseOperator

from pipeline_steps.orchestration.params import TUNING_FORM, form_params, set_arguments
from pipeline_steps.orchestration.runners import (
    LocalStepOperator,
    pod_arguments,
    retry_args,
    step_argv,
)
from pipeline_steps.settings import Settings

DAY_TASK = "tuning_day"
PREPARE_TASK = "prepare_study"
LANE_WAIT_S = 30
"""Seconds a trial waits for a free lane when the run trains ``parallel_trials`` already. Not
much shorter: a task rescheduled again before the scheduler processed its previous end is
taken for a failure by Airflow (and retried)."""

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
            "as flight_delay_training would train for it; empty: the run's logical date.",
            section="Study",
        ),
        **params,
    }


def tuning_run_args() -> list[str]:
    """The argv after ``trainyard step <name>`` in a tuning run."""
    return ["--run-id", "{{ run_id }}", "--logical-date", TUNING_DAY, *set_arguments(TUNING_FORM)]


def _run_args(argv: Sequence[str]) -> argparse.Namespace:
    """The run id, day and ``--set`` values out of a rendered argv."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--logical-date", required=True)
    parser.add_argument("--set", action="append", default=[])
    known, _ = parser.parse_known_args(list(argv))
    return known


def _context(argv: Sequence[str]) -> Any:
    from pipeline_steps.context import RunContext
    from pipeline_steps.settings import load_settings

    args = _run_args(argv)
    return RunContext(
        run_id=args.run_id,
        logical_date=date.fromisoformat(args.logical_date[:10]),
        settings=load_settings(overrides=args.set),
    )


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

        from pipeline_steps.errors import StepError
        from pipeline_steps.manifests import to_json
        from pipeline_steps.tuning.results import prepare
        from pipeline_steps.tuning.space import SpaceError

        try:
            plan = prepare(_context(self.run_args))
        except (SpaceError, StepError) as exc:
            raise AirflowFailException(str(exc)) from exc
        context["ti"].xcom_push(key="plan", value=to_json(plan))
        self.log.info("study %s: %d trial(s) to run", plan.study, len(plan.slots))
        return plan.slots


class TrialMixin:
    """Claim, train through the runtime's operator, conclude; see the module doc."""

    argv_field = "argv"
    """The operator's attribute holding the step's argv (a pod's is ``cmds``)."""
    slot: int
    """Set by the operator's own ``__init__``: Airflow's ``expand`` accepts only arguments of
    an operator class's ``__init__``, not of a mixin's."""
    log: Any

    def _base_argv(self) -> list[str]:
        return list(getattr(self, self.argv_field))

    def _extend_argv(self, extra: list[str]) -> None:
        setattr(self, self.argv_field, [*self._base_argv(), *extra])

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import (
            AirflowFailException,
            AirflowRescheduleException,
            AirflowSkipException,
        )

        from pipeline_steps.manifests import TrainManifest, load_manifest
        from pipeline_steps.tuning import trials
        from pipeline_steps.tuning.space import load_space

        plan = context["ti"].xcom_pull(task_ids=PREPARE_TASK, key="plan")
        if plan["deadline"] is not None and time.time() > plan["deadline"]:
            raise AirflowSkipException("the run's time budget (tuning.time_budget_s) is spent")
        ctx = _context(self._base_argv())
        settings = ctx.settings
        space = load_space(settings.tuning.search_space)
        try:
            parallel = settings.tuning.parallel_trials
            claim = trials.claim(settings, plan["study"], space, ctx.run_id, self.slot, parallel)
        except trials.LaneBusy as exc:
            self.log.info("%s; looking again in %d s", exc, LANE_WAIT_S)
            raise AirflowRescheduleException(
                datetime.now(UTC) + timedelta(seconds=LANE_WAIT_S)
            ) from exc
        self.log.info(
            "trial %d of study %s%s: %s",
            claim.number,
            claim.study,
            " (taken back: resumes from its checkpoint)" if claim.resumed else "",
            claim.settings,
        )
        self._extend_argv(
            ["--study", claim.study, "--trial", str(claim.number), *claim.overrides()]
        )
        try:
            output: dict[str, Any] = super().execute(context)  # type: ignore[misc]
        except Exception as exc:
            last = context["ti"].try_number > int(getattr(self, "retries", 0) or 0)
            if last or isinstance(exc, AirflowFailException):
                trials.abandon(settings, claim, str(exc))
                self.log.warning("trial %d failed for good; the study goes on", claim.number)
            raise
        manifest = load_manifest(TrainManifest, output, f"trial {claim.number}'s manifest")
        state = trials.conclude(settings, claim, manifest)
        self.log.info(
            "trial %d: %s, best validation loss %.5f after %d epoch(s)",
            claim.number,
            state,
            manifest.best_val_loss,
            manifest.epochs,
        )
        return {**output, "trial": claim.number, "trial_state": state}


class LocalTrialOperator(TrialMixin, LocalStepOperator):
    """A trial as a local subprocess (torchrun + ``trainyard step train``)."""

    def __init__(self, *, slot: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slot = slot


def trial_tasks(settings: Settings, run_args: list[str], slots: Any) -> Any:
    """The mapped trial task under the configured runtime, over ``slots``."""
    common = {
        "task_id": "trial",
        "max_active_tis_per_dagrun": settings.tuning.max_parallel_trials,
        **retry_args(settings),
    }
    if settings.orchestration.runtime == "kubernetes":
        from pipeline_steps.orchestration.trial_pod import PodTrialOperator

        pod = pod_arguments("train", settings, run_args)
        return PodTrialOperator.partial(
            step="train",
            name="trainyard-trial",
            xcom_sidecar_container_security_context=pod["container_security_context"],
            do_xcom_push=True,
            on_finish_action="delete_pod",
            **pod,
            **common,
        ).expand(slot=slots)
    argv = step_argv("train", settings, run_args)
    return LocalTrialOperator.partial(step="train", argv=argv, **common).expand(slot=slots)


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

        from pipeline_steps.errors import StepError
        from pipeline_steps.manifests import to_json
        from pipeline_steps.tuning.results import finish

        plan = context["ti"].xcom_pull(task_ids=PREPARE_TASK, key="plan")
        if not plan:
            raise AirflowFailException("prepare_study did not run: no study to record")
        ctx = _context(self.run_args)
        try:
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
