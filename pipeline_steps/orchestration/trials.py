"""A tuning trial as a task: claim a trial of the study (ask), run the real ``train`` step with
its parameters through the runtime's operator, tell the study the outcome (see
:mod:`pipeline_steps.orchestration.tuning`). The pod flavour lives in ``trial_pod``, imported only
under ``runtime: kubernetes``."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pipeline_steps.orchestration.runners import LocalStepOperator

PREPARE_TASK = "prepare_study"
LANE_WAIT_S = 30
"""Seconds a trial waits for a free lane when the run trains ``parallel_trials`` already. Not
much shorter: a task rescheduled again before the scheduler processed its previous end is
taken for a failure by Airflow (and retried)."""


def _run_args(argv: Sequence[str]) -> argparse.Namespace:
    """The run id, day, settings file and ``--set`` values out of a rendered argv."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--logical-date", required=True)
    parser.add_argument("--config", default=None)
    parser.add_argument("--set", action="append", default=[])
    known, _ = parser.parse_known_args(list(argv))
    return known


def run_context(argv: Sequence[str]) -> Any:
    """The run context of a tuning task, from its rendered argv."""
    from pipeline_steps.core.context import RunContext
    from pipeline_steps.core.settings import load_settings

    args = _run_args(argv)
    return RunContext(
        run_id=args.run_id,
        logical_date=date.fromisoformat(args.logical_date[:10]),
        settings=load_settings(args.config, overrides=args.set),
    )


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

        from pipeline_steps.core.manifests import TrainManifest, load_manifest
        from pipeline_steps.tuning import trials
        from pipeline_steps.tuning.space import load_space

        plan = context["ti"].xcom_pull(task_ids=PREPARE_TASK, key="plan")
        if plan["deadline"] is not None and time.time() > plan["deadline"]:
            raise AirflowSkipException("the run's time budget (tuning.time_budget_s) is spent")
        ctx = run_context(self._base_argv())
        settings = ctx.settings
        space = load_space(settings.tuning.search_space, settings.train.model)
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
