"""The release path in Airflow: a person's approval of a release, and the champion asset.

- ``approve_release`` (:class:`ReleaseApprovalOperator`, Airflow's human-in-the-loop
  ``ApprovalOperator``): when the monitor DAG's ``release`` step decided ``awaiting_approval``,
  the task waits for Approve/Reject in the Airflow UI (Required actions), showing the pooled
  shadow days' intervals and the report's path, with an optional comment. The answer is applied
  by ``steps.release.apply_approval`` (approver, comment and time become model-version tags).
  No answer within ``release.approval_timeout_h``: the task ends skipped, the champion and the
  staged candidate stay as they are. Otherwise it ends skipped at once.
- ``emit_champion_event`` (:class:`ChampionEventOperator`): every move of the champion alias
  made by a DAG (a promotion, forced or not; a release; an automatic rollback) records an event
  of the ``<domain>_champion`` asset whose ``extra`` names the version, the one it
  replaced, the run and the reason: the domain's serving DAG is scheduled on it
  (:mod:`pipeline_steps.orchestration.domains`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLOperator
from airflow.sdk import Asset, BaseOperator, Param

from pipeline_steps.core.manifests import PromoteManifest, ReleaseManifest
from pipeline_steps.core.settings import Settings
from pipeline_steps.core.step_registry import PROMOTE, RELEASE
from pipeline_steps.core.team_credentials import as_team

RELEASE_TASK = RELEASE.task_id
APPROVAL_TASK = "approve_release"
PROMOTE_TASK = PROMOTE.task_id


def champion_asset(settings: Settings) -> Asset:
    """The domain's champion asset, ``<domain.name>_champion``: every move of its registered
    model's champion alias updates it."""
    name = settings.domain.name
    return Asset(name=f"{name}_champion", uri=f"trainyard://champion/{name}")


def approval_body(manifest: ReleaseManifest) -> str:
    """What the approver reads (Markdown): the candidate, the champion, the pooled days, each
    metric's interval and the reasons, and where the full evidence is."""
    lines = [
        f"**Release version {manifest.candidate} over champion {manifest.champion_before}?**",
        "",
        f"Shadow days ({len(manifest.shadow_days)}): {', '.join(manifest.shadow_days)}",
        "",
        f"Gate on the pooled days: **{manifest.outcome}**",
        "",
        "Staged - champion (paired bootstrap):",
        *[f"- {metric}: {d.describe()}" for metric, d in manifest.differences.items()],
        "",
        "Reasons:",
        *[f"- {reason}" for reason in manifest.reasons],
        "",
        f"Evidence: `{manifest.report}` and `evaluation.json` beside it.",
    ]
    return "\n".join(lines)


def _responder(payload: Any) -> str:
    user = payload.get("responded_by_user") if isinstance(payload, dict) else None
    if isinstance(user, dict):
        return str(user.get("name") or user.get("id") or "unknown")
    return str(getattr(user, "name", None) or getattr(user, "id", None) or user or "unknown")


class ReleaseApprovalOperator(ApprovalOperator):
    """Approve or reject the release the ``release`` task left waiting (see the module)."""

    def __init__(self, *, settings: Settings, **kwargs: Any) -> None:
        hours = settings.release.approval_timeout_h
        super().__init__(
            subject="Release a staged model to champion?",
            body="Waiting for the release step's evidence.",
            response_timeout=timedelta(hours=hours),
            params={
                "comment": Param(
                    None,
                    type=["null", "string"],
                    title="Comment (optional, kept on the model version)",
                )
            },
            **kwargs,
        )
        self.settings = settings

    def execute(self, context: Any) -> Any:
        from airflow.sdk.exceptions import AirflowSkipException

        manifest = self._release(context)
        if manifest.action != "awaiting_approval":
            raise AirflowSkipException(
                f"the release decided {manifest.action!r}: no approval asked"
            )
        self.subject = (
            f"Release {manifest.registered_model} version {manifest.candidate} "
            f"over champion {manifest.champion_before}?"
        )
        self.body = approval_body(manifest)
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        from airflow.providers.standard.exceptions import HITLTimeoutError
        from airflow.sdk.exceptions import AirflowSkipException

        from pipeline_steps.steps.release import apply_approval

        try:
            answer = HITLOperator.execute_complete(self, context=context, event=event)
        except HITLTimeoutError as exc:
            raise AirflowSkipException(
                f"no answer within release.approval_timeout_h="
                f"{self.settings.release.approval_timeout_h}: the champion stays, the candidate "
                "stays staged"
            ) from exc
        approved = answer["chosen_options"][0] == self.APPROVE
        comment = str((answer.get("params_input") or {}).get("comment") or "")
        with as_team(self.settings.domain.team):
            done = apply_approval(
                self.settings,
                self._release(context),
                approved=approved,
                by=_responder(answer),
                comment=comment,
            )
        self.log.info("%s: %s", done.action, "; ".join(done.reasons))
        return done.to_json()

    @staticmethod
    def _release(context: Any) -> ReleaseManifest:
        from pipeline_steps.core.manifests import load_manifest

        payload = context["ti"].xcom_pull(task_ids=RELEASE_TASK)
        return load_manifest(ReleaseManifest, payload, f"XCom of task {RELEASE_TASK!r}")


def champion_move(payloads: dict[str, Any]) -> dict[str, Any] | None:
    """The champion's move in a DAG run, from the XComs of its tasks (``promote``, or
    ``release`` and ``approve_release``), as a champion event's ``extra``; None when it did not
    move."""
    from pipeline_steps.core.manifests import PROMOTED, load_manifest

    promote = payloads.get(PROMOTE_TASK)
    if promote is not None:
        p = load_manifest(PromoteManifest, promote, f"XCom of task {PROMOTE_TASK!r}")
        if p.decision not in PROMOTED or p.champion_after == p.champion_before:
            return None
        reason = p.reasons[-1] if p.reasons else p.decision
        return _extra(p.registered_model, p.champion_after, p.champion_before, p.decision, reason)
    for task in (APPROVAL_TASK, RELEASE_TASK):
        payload = payloads.get(task)
        if payload is None:
            continue
        r = load_manifest(ReleaseManifest, payload, f"XCom of task {task!r}")
        if not r.champion_moved:
            return None
        kind = "rollback" if r.action == "rolled_back" else "release"
        return _extra(r.registered_model, r.champion_after, r.champion_before, kind, r.reasons[0])
    return None


def _extra(
    model: str, version: str | None, before: str | None, kind: str, reason: str
) -> dict[str, Any]:
    return {
        "registered_model": model,
        "version": version,
        "from_version": before,
        "kind": kind,
        "reason": reason,
    }


class ChampionEventOperator(BaseOperator):
    """Emits a champion asset event when this DAG run moved the champion alias; otherwise ends
    skipped saying so."""

    ui_color = "#d6eaf8"

    def __init__(self, *, asset: Asset, sources: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(outlets=[asset], **kwargs)
        self.asset = asset
        self.sources = sources

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowSkipException

        ti = context["ti"]
        payloads = {task: ti.xcom_pull(task_ids=task) for task in self.sources}
        extra = champion_move(payloads)
        if extra is None:
            raise AirflowSkipException("the champion did not move in this run; no event")
        extra |= {"run_id": context["run_id"], "logical_date": context["ds"]}
        context["outlet_events"][self.asset].extra = extra
        self.log.info(
            "champion of %s moved from %s to %s (%s)",
            extra["registered_model"],
            extra["from_version"],
            extra["version"],
            extra["kind"],
        )
        return extra


def champion_event_task(settings: Settings, *sources: str) -> BaseOperator:
    """The task emitting the champion asset event of a run whose ``sources`` tasks may move the
    alias (runs even when the approval was skipped)."""
    return ChampionEventOperator(
        task_id="emit_champion_event",
        asset=champion_asset(settings),
        sources=sources,
        trigger_rule="none_failed",
    )


def approval_task(settings: Settings) -> BaseOperator:
    """The monitor DAG's human-in-the-loop approval of a release."""
    return ReleaseApprovalOperator(task_id=APPROVAL_TASK, settings=settings)


MONITOR_TRIGGER = (
    "{\"kind\": \"{{ 'backfill' if 'backfill' in (dag_run.run_type | string | lower) else "
    "('manual' if 'manual' in (dag_run.run_type | string | lower) else 'scheduled') }}\"}"
)
"""A monitor run's trigger as the release step reads it: a backfill never moves an alias."""


def monitor_run_args(config: str | None = None) -> list[str]:
    """The release step's argv after ``trainyard step release``: the run, the day, the trigger
    (and the domain's settings file, if given)."""
    from pipeline_steps.orchestration.runners import DEFAULT_RUN_ARGS

    config_args = ["--config", config] if config else []
    return [*DEFAULT_RUN_ARGS, "--trigger", MONITOR_TRIGGER, *config_args]
