"""Release step (the drift monitor's, after ``monitor``): the staged candidate's fate and the
champion's health on the logical date D.

1. **Rollback.** The champion's days since it became the champion are compared, on the same
   rows, with the version it replaced (the monitor scores both, ``release.rollback_*``); after
   ``release.rollback_days`` degraded days in a row it goes back to that version, recorded on
   both.
2. **Release.** The staged version's shadow days (scored by the monitor beside the current
   champion) are pooled once there are ``release.shadow_days`` of them and judged by the gate:
   released, retired, kept waiting, or handed to a person (``release.approval``: the monitor
   DAG's ``approve_release`` task then applies the answer with :func:`apply_approval`).

The decision goes to ``reports/release/date=D/release.json`` (with the pooled evaluation beside
it), to the candidate's model version (stage records, the evidence) and beside the lineage of
the run that trained it (``runs/<run>/release.json``). A backfill never moves a live alias: its
release step decides nothing. Emitting the champion and retraining asset events is the
orchestration layer's job.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.manifests import (
    EvaluateManifest,
    ReleaseManifest,
    RollbackCheck,
    load_manifest,
    to_json,
)
from pipeline_steps.core.settings import Settings
from pipeline_steps.evaluation.gate import gate
from pipeline_steps.evaluation.release import (
    MONITOR_USER,
    approval_tags,
    consecutive_degraded,
    day_check,
    decide_release,
    describe_differences,
    record_stage,
    release_candidate,
    retire_candidate,
    shadow_evaluation,
)
from pipeline_steps.evaluation.shadow import DayScores, monitored_days, read_days

log = logging.getLogger(__name__)
SHOWN_DAYS = 7
"""The latest champion days a rollback check judges and lists."""


def report_folder(day: str) -> str:
    return f"reports/release/date={day}"


def release(ctx: RunContext) -> ReleaseManifest:
    """Check the champion's health, then decide on the staged candidate (see the module).

    Returns the manifest. Raises ``StepError`` when a model cannot be loaded or the aliases
    moved while deciding; nothing is moved then."""
    from pipeline_steps.core.tracking import aliased_version, champion_version, connect

    settings, day = ctx.settings, ctx.logical_date.isoformat()
    cfg = settings.mlflow
    if ctx.trigger.kind == "backfill":
        note = "a backfill never moves live aliases: nothing released or rolled back"
        return _finish(ctx, _unchanged(ctx, None, None, [note]))
    client = connect(cfg)
    current = champion_version(client, cfg)
    if current is None:
        return _finish(ctx, _unchanged(ctx, None, None, ["no champion yet"]))
    champion = str(current.version)
    # the rollback check and the shadow days both judge the current champion's days only
    days = read_days(ctx.lake, monitored_days(ctx.lake, day), champion=champion)
    health = rollback_check(ctx, client, current, days)
    if health is not None and health.due:
        return _finish(ctx, _roll_back(ctx, client, champion, health))
    staged = aliased_version(client, cfg, cfg.staging_alias)
    if staged is None or str(staged.version) == champion:
        manifest = _unchanged(ctx, champion, None, ["no candidate in staging"])
        return _finish(ctx, replace(manifest, rollback=health))
    candidate = str(staged.version)
    shadow = [d for d in days if d.staging_version == candidate]
    manifest = _decide(ctx, client, staged, champion, shadow)
    return _finish(ctx, replace(manifest, rollback=health))


def _unchanged(
    ctx: RunContext, champion: str | None, candidate: str | None, reasons: list[str]
) -> ReleaseManifest:
    """A decision that moves nothing (yet)."""
    return ReleaseManifest(
        logical_date=ctx.logical_date.isoformat(),
        registered_model=ctx.settings.mlflow.registered_model,
        action="none",
        candidate=candidate,
        champion_before=champion,
        champion_after=champion,
        reasons=reasons,
    )


def _decide(
    ctx: RunContext,
    client: Any,
    staged: Any,
    champion: str,
    shadow: list[DayScores],
) -> ReleaseManifest:
    settings, day = ctx.settings, ctx.logical_date.isoformat()
    cfg = settings.mlflow
    candidate = str(staged.version)
    evaluation = None
    verdict = None
    if len(shadow) >= settings.release.shadow_days:
        try:
            evaluation = shadow_evaluation(
                shadow,
                settings=settings,
                task=ctx.domain.task,
                classes=list(ctx.domain.classes),
                staged_uri=f"models:/{cfg.registered_model}/{candidate}",
                staged_run_id=staged.run_id or "",
                champion_version=champion,
                champion_uri=f"models:/{cfg.registered_model}/{champion}",
            )
        except ValueError as exc:
            raise StepError(f"shadow days of version {candidate}: {exc}") from exc
        verdict = gate(evaluation, settings.gate, evaluation.confidence)
        ctx.lake.write_json(evaluation.to_json(), report_folder(day), "evaluation.json")
    decision = decide_release(settings, len(shadow), verdict)
    manifest = replace(
        _unchanged(ctx, champion, candidate, decision.reasons),
        shadow_days=[d.day for d in shadow],
        outcome=decision.outcome,
        differences=evaluation.differences if evaluation else {},
    )
    if decision.action == "release":
        assert evaluation is not None
        release_candidate(
            client,
            settings,
            candidate=candidate,
            champion=champion,
            day=day,
            by=MONITOR_USER,
            reasons=decision.reasons,
            evaluation=evaluation,
        )
        return replace(manifest, action="released", champion_after=candidate)
    if decision.action == "retire":
        retire_candidate(
            client,
            settings,
            candidate=candidate,
            day=day,
            by=MONITOR_USER,
            reasons=[f"retired: {decision.reasons[0]}", *decision.reasons[1:]],
            evaluation=evaluation,
        )
        return replace(manifest, action="retired")
    if decision.action == "ask":
        return replace(manifest, action="awaiting_approval")
    return replace(manifest, action="waiting")


def rollback_check(
    ctx: RunContext, client: Any, champion: Any, days: list[DayScores]
) -> RollbackCheck | None:
    """The champion's monitored days (``days``: those it was scored on as the champion) since it
    became the champion, each against the version it replaced on the same rows; None when
    automatic rollback is off or it replaced none."""
    from pipeline_steps.evaluation.champion import champion_moves, replaced_version

    settings = ctx.settings
    cfg = settings.release
    if cfg.rollback_days == 0:
        return None
    version = str(champion.version)
    previous, since = replaced_version(champion_moves(client, settings.mlflow), version)
    if previous is None:
        return None
    mine = [
        d
        for d in days
        if d.previous_version == previous and d.previous is not None and d.scored_at >= since
    ]
    metric = cfg.metric_for(ctx.domain.task)
    checks = [
        day_check(
            d,
            metric=metric,
            margin=cfg.rollback_margin,
            task=ctx.domain.task,
            resamples=settings.evaluate.resamples,
            confidence=settings.evaluate.confidence,
            seed=settings.evaluate.seed,
        )
        for d in mine[-SHOWN_DAYS:]
    ]
    in_a_row = consecutive_degraded(checks)
    return RollbackCheck(
        version=version,
        previous=previous,
        metric=metric,
        margin=cfg.rollback_margin,
        days=checks,
        degraded_in_a_row=in_a_row,
        due=in_a_row >= cfg.rollback_days,
    )


def _roll_back(
    ctx: RunContext, client: Any, champion: str, health: RollbackCheck
) -> ReleaseManifest:
    from pipeline_steps.evaluation.champion import rollback

    settings, day = ctx.settings, ctx.logical_date.isoformat()
    last, target = health.days[-1], health.previous
    why = (
        f"champion {champion} worse than version {target}, the one it replaced, on "
        f"{health.degraded_in_a_row} monitored day(s) with none cleared between them "
        f"(release.rollback_days="
        f"{settings.release.rollback_days}): {health.metric} champion - replaced on {last.day} "
        f"{last.difference.describe()} beyond the margin {health.margin:g}"
    )
    rollback(settings, target, why, MONITOR_USER, expect_from=champion)
    record_stage(client, settings.mlflow, champion, "retired", by=MONITOR_USER, day=day, reason=why)
    log.warning("rolled the champion back from version %s to %s: %s", champion, target, why)
    reasons = [why, f"the champion is version {target} again; retraining asked"]
    return replace(
        _unchanged(ctx, champion, champion, reasons),
        action="rolled_back",
        champion_after=target,
        rollback=health,
    )


def _finish(ctx: RunContext, manifest: ReleaseManifest) -> ReleaseManifest:
    """Write the decision to the lake and record it; a decision about a candidate also goes to
    the folder of the run that trained it (``runs/<run>/release.json``)."""
    folder = report_folder(manifest.logical_date)
    report = ctx.lake.path(folder, "release.json")
    manifest = replace(manifest, report=report)
    ctx.lake.write_json({**to_json(manifest), "run_id": ctx.run_id}, folder, "release.json")
    if manifest.action != "none":
        log.info("release %s: %s", manifest.action, "; ".join(manifest.reasons))
        record_in_run(ctx.settings, manifest)
    return ctx.record(manifest)


def record_in_run(settings: Settings, manifest: ReleaseManifest) -> None:
    """Keep the decision beside the lineage of the run that trained the candidate."""
    from pipeline_steps.core.lake import Lake
    from pipeline_steps.core.tracking import RUN_TAG, connect

    if manifest.candidate is None:
        return
    cfg = settings.mlflow
    tags = connect(cfg).get_model_version(cfg.registered_model, manifest.candidate).tags or {}
    if RUN_TAG in tags:
        lake = Lake(settings.lake_root, settings.ingest.pins)
        lake.write_json(to_json(manifest), Lake.run_dir(tags[RUN_TAG]), "release.json")


def apply_approval(
    settings: Settings, manifest: ReleaseManifest, *, approved: bool, by: str, comment: str
) -> ReleaseManifest:
    """Apply a person's answer to a release that waited for approval: approved, the candidate
    becomes the champion (only from the champion the release compared it with); rejected, it is
    retired. The approver, their comment and the time become tags of the version. Returns the
    manifest of what happened; ``StepError`` when the release was not waiting for approval or
    the aliases moved meanwhile (nothing changes then)."""
    from pipeline_steps.core.lake import Lake
    from pipeline_steps.core.tracking import connect
    from pipeline_steps.evaluation.champion import now_utc

    if manifest.action != "awaiting_approval" or manifest.candidate is None:
        raise StepError(f"the release of {manifest.logical_date} was not waiting for approval")
    if manifest.champion_before is None:
        raise StepError("a release waiting for approval always has a champion to compare with")
    lake = Lake(settings.lake_root, settings.ingest.pins)
    folder = report_folder(manifest.logical_date)
    where = lake.path(folder, "evaluation.json")
    evaluation = load_manifest(EvaluateManifest, lake.read_json(folder, "evaluation.json"), where)
    client = connect(settings.mlflow)
    at = now_utc()
    who = f"{by} (Airflow approval)"
    tags = approval_tags(by, comment, at)
    said = f"{'approved' if approved else 'rejected'} by {by}" + (f": {comment}" if comment else "")
    reasons = [said, *manifest.reasons]
    if approved:
        release_candidate(
            client,
            settings,
            candidate=manifest.candidate,
            champion=manifest.champion_before,
            day=manifest.logical_date,
            by=who,
            reasons=reasons,
            evaluation=evaluation,
            approval=tags,
        )
        done = replace(manifest, action="released", champion_after=manifest.candidate)
    else:
        retired = retire_candidate(
            client,
            settings,
            candidate=manifest.candidate,
            day=manifest.logical_date,
            by=who,
            reasons=[f"retired: {said}", *manifest.reasons],
            evaluation=evaluation,
            extra=tags,
        )
        if not retired:
            raise StepError(
                f"version {manifest.candidate} is no longer in staging; nothing to reject"
            )
        done = replace(manifest, action="retired")
    done = replace(done, reasons=reasons)
    lake.write_json(to_json(done), folder, "release.json")
    record_in_run(settings, done)
    log.info("%s; %s", said, describe_differences(evaluation))
    return done
