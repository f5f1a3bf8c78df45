"""Promote step: register the challenger; move the champion alias only if the gate passes
(with ``release.mode: staged``, the staging alias: :mod:`pipeline_steps.evaluation.release`).

The decision and its reasons are recorded as tags on the new model version and as its
description (its page in the MLflow UI); the ``challenger`` alias marks it as the latest evaluated
candidate. The champion alias moves compare-and-swap style: if the champion changed since
evaluation, nothing is promoted. A backfill run never moves either alias: its gate compares with
the champion as of its logical date and its decision is ``passed`` or ``rejected`` (see
``docs/reproducibility.md``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, cast

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.locks import exclusive
from pipeline_steps.core.manifests import (
    Decision,
    EvaluateManifest,
    PromoteManifest,
    TrainManifest,
    to_json,
)
from pipeline_steps.core.provenance import LINEAGE_INPUTS, build_lineage
from pipeline_steps.core.tasks import task_spec
from pipeline_steps.evaluation.gate import Verdict, gate

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PromotionDecision:
    decision: Decision
    reasons: list[str]
    champion: bool
    """Whether the challenger is the champion afterwards."""
    moves_alias: bool
    stages: bool = False
    """Whether the challenger goes to the staging alias (``release.mode: staged``)."""


def decide(
    ctx: RunContext,
    verdict: Verdict,
    evaluated_against: str | None,
    current_version: str | None,
    version: str,
) -> PromotionDecision:
    """The decision from the gate's verdict, the run's promotion settings and the champion now.

    The alias moves only from the version the run compared against (the registry has no
    compare-and-set); ``promotion.skip`` never moves it; ``promotion.force`` moves it whatever
    the gate said, with the reason recorded. A backfill never moves it (force included): its
    decision is the gate's verdict against the champion as of its date. An ``undecided``
    verdict (too few positives to decide) never moves it unless forced. With
    ``release.mode: staged`` a pass over a champion goes to staging instead (``staged``); the
    first champion is promoted directly (nothing to shadow)."""
    promotion = ctx.settings.promotion
    passed, reasons = verdict.passed, verdict.reasons
    said = {"pass": "passed", "refuse": "refused", "undecided": "was undecided"}[verdict.outcome]
    if ctx.trigger.kind == "backfill":
        note = (
            f"backfill: compared with the champion as of {ctx.logical_date.isoformat()} "
            f"(version {evaluated_against or 'none'}); a backfill never moves the live alias "
            f"(it stays on version {current_version or 'none'})"
        )
        if promotion.force:
            note += "; promotion.force does not apply to backfills"
        decided: Decision = (
            "skipped"
            if promotion.skip
            else "undecided"
            if verdict.outcome == "undecided"
            else "passed"
            if passed
            else "rejected"
        )
        return PromotionDecision(decided, [*reasons, note], champion=False, moves_alias=False)
    if current_version == version:
        return PromotionDecision(
            "promoted",
            [*reasons, "this version is already the champion"],
            champion=True,
            moves_alias=False,
        )
    if promotion.skip:
        return PromotionDecision(
            "skipped",
            [*reasons, f"promotion skipped by request (promotion.skip); the gate {said}"],
            champion=False,
            moves_alias=False,
        )
    if promotion.force:
        who = ctx.trigger.user or "unknown user"
        return PromotionDecision(
            "forced",
            [*reasons, f"promotion forced by {who} (the gate {said}): {promotion.reason}"],
            champion=True,
            moves_alias=True,
        )
    if passed and current_version != evaluated_against:
        return PromotionDecision(
            "rejected",
            [
                *reasons,
                f"champion changed from {evaluated_against} to {current_version} since "
                "evaluation; not promoting over a model this run did not compare against",
            ],
            champion=False,
            moves_alias=False,
        )
    if verdict.outcome == "undecided":
        return PromotionDecision("undecided", reasons, champion=False, moves_alias=False)
    if passed and current_version is not None and ctx.settings.release.mode == "staged":
        note = (
            f"staged: shadows champion {current_version} on the next "
            f"release.shadow_days={ctx.settings.release.shadow_days} monitored day(s) before "
            "the release decides (release.mode=staged)"
        )
        return PromotionDecision(
            "staged", [*reasons, note], champion=False, moves_alias=False, stages=True
        )
    return PromotionDecision(
        "promoted" if passed else "rejected", reasons, champion=passed, moves_alias=passed
    )


def _registered_version(client: Any, name: str, mlflow_run_id: str) -> Any | None:
    versions = client.search_model_versions(f"name = '{name}' and run_id = '{mlflow_run_id}'")
    return versions[0] if versions else None


def _identical_version(ctx: RunContext, client: Any, fingerprint: str) -> tuple[str, str] | None:
    """The champion or staged version (its alias and number) trained from what this challenger
    was (``TrainManifest.fingerprint``); None when there is none, the fingerprint is unknown,
    the run is a backfill (it registers what it reproduces) or asks to force a promotion."""
    from pipeline_steps.core.tracking import FINGERPRINT_TAG, aliased_version

    cfg = ctx.settings.mlflow
    if not fingerprint or ctx.trigger.kind == "backfill" or ctx.settings.promotion.force:
        return None
    for alias in (cfg.champion_alias, cfg.staging_alias):
        found = aliased_version(client, cfg, alias)
        if found is not None and (found.tags or {}).get(FINGERPRINT_TAG) == fingerprint:
            return alias, str(found.version)
    return None


def _record_identical(
    ctx: RunContext,
    client: Any,
    evaluation: EvaluateManifest,
    fingerprint: str,
    alias: str,
    twin: str,
) -> PromoteManifest:
    """Nothing new to register: say so on the challenger's training run (its decision and the
    version it repeats) and in the run's manifest and lineage; the aliases stay."""
    from pipeline_steps.core.tracking import DECISION_TAG, aliased_version, champion_version

    cfg = ctx.settings.mlflow
    current = champion_version(client, cfg)
    current_version = str(current.version) if current else None
    staged = aliased_version(client, cfg, cfg.staging_alias)
    reasons = [
        f"identical to {alias} version {twin}: the same training set, train settings and code "
        f"(fingerprint {fingerprint[:12]}); nothing new to register, {gate_summary(evaluation)}"
    ]
    run_id = evaluation.challenger.mlflow_run_id
    client.set_tag(run_id, DECISION_TAG, "identical")
    client.set_tag(run_id, "trainyard.identical_to", f"{cfg.registered_model}/{twin}")
    log.info("identical: not registered; %s", reasons[0])
    manifest = PromoteManifest(
        logical_date=ctx.logical_date.isoformat(),
        registered_model=cfg.registered_model,
        version=None,
        decision="identical",
        reasons=reasons,
        champion_before=current_version,
        champion_after=current_version,
        staging_after=str(staged.version) if staged is not None else None,
    )
    lineage = build_lineage(ctx, manifest.decision, None)
    ctx.lake.write_json(to_json(lineage), ctx.run_dir, "lineage.json")
    return ctx.record(manifest)


def _recorded_promotion(
    version: Any, current_version: str | None
) -> tuple[PromotionDecision, str | None] | None:
    """When the version is the live champion because its own promote step moved the alias (a
    retried task after that step got that far): the decision and reasons recorded then, and
    the version the alias left. None otherwise: the step decides afresh."""
    from pipeline_steps.core.manifests import PROMOTED
    from pipeline_steps.core.tracking import (
        DECISION_TAG,
        MOVED_AT_TAG,
        MOVED_FROM_TAG,
        recorded_reasons,
    )

    tags = dict(version.tags or {})
    mine = str(version.version) == current_version and MOVED_AT_TAG in tags
    if not mine or tags.get(DECISION_TAG) not in PROMOTED:
        return None
    reasons = recorded_reasons(tags)
    moved_from = tags.get(MOVED_FROM_TAG, "none")
    decided = cast(Decision, tags[DECISION_TAG])
    decision = PromotionDecision(decided, reasons, champion=True, moves_alias=False)
    return decision, None if moved_from == "none" else moved_from


def gate_summary(evaluation: EvaluateManifest) -> str:
    """The challenger's differences from the champion with their intervals, in one line."""
    if not evaluation.differences:
        return "no champion to compare with"
    level = f"{2 * evaluation.confidence - 1:.0%}"
    shown = ", ".join(f"{m} {d.describe()}" for m, d in evaluation.differences.items())
    return f"challenger - champion ({level} intervals): {shown}"


def record_decision(
    ctx: RunContext,
    client: Any,
    decision: PromotionDecision,
    version: str,
    evaluation: EvaluateManifest,
    current_version: str | None = None,
) -> str | None:
    """Tag the version with the decision and its evidence, describe it on its page in the
    MLflow UI, point the challenger alias at it (not in a backfill), then move the champion
    alias from ``current_version`` if the decision says so (recording when and from where), or
    the staging alias. Tags first: a
    backfill looking for the champion as of its date finds a moved alias's version by its
    decision tag. Returns the staged version this one replaced, if any."""
    from pipeline_steps.core.tracking import (
        COMPARED_WITH_TAG,
        DATE_TAG,
        DECISION_TAG,
        KIND_TAG,
        MOVED_AT_TAG,
        MOVED_FROM_TAG,
        REASONS_TAG,
    )
    from pipeline_steps.evaluation.champion import decision_description, now_utc
    from pipeline_steps.evaluation.release import stage

    cfg = ctx.settings.mlflow
    challenger, champion = evaluation.challenger, evaluation.champion
    tags = {
        DECISION_TAG: decision.decision,
        KIND_TAG: ctx.trigger.kind,
        REASONS_TAG: " | ".join(decision.reasons),
        DATE_TAG: ctx.logical_date.isoformat(),
        COMPARED_WITH_TAG: champion.version if champion else "none",
        "trainyard.holdout_sha256": evaluation.holdout.sha256,
        "trainyard.gate": gate_summary(evaluation),
        "trainyard.trigger": ctx.trigger.describe(),
    }
    # The task's default gate metrics of both models (binary: AUC and log loss).
    for metric in task_spec(challenger.metrics.task).gate_metrics:
        tags[f"trainyard.challenger_{metric}"] = str(getattr(challenger.metrics, metric))
        tags[f"trainyard.champion_{metric}"] = (
            str(getattr(champion.metrics, metric)) if champion else "none"
        )
    if decision.decision == "forced":
        tags["trainyard.forced_reason"] = ctx.settings.promotion.reason
        tags["trainyard.forced_by"] = ctx.trigger.user or "unknown"
    if decision.moves_alias:
        tags[MOVED_AT_TAG] = now_utc()
        tags[MOVED_FROM_TAG] = current_version or "none"
    for key, value in tags.items():
        client.set_model_version_tag(cfg.registered_model, version, key, value)
    description = decision_description(
        decision=decision.decision,
        reasons=decision.reasons,
        logical_date=ctx.logical_date.isoformat(),
        run_id=ctx.run_id,
        trigger=ctx.trigger.describe(),
        compared_with=champion.version if champion else None,
    )
    client.update_model_version(cfg.registered_model, version, description=description)
    if ctx.trigger.kind != "backfill":  # a backfill never moves a live alias
        client.set_registered_model_alias(cfg.registered_model, cfg.challenger_alias, version)
    if decision.moves_alias:
        client.set_registered_model_alias(cfg.registered_model, cfg.champion_alias, version)
    if decision.stages:
        return stage(
            client,
            ctx.settings,
            version,
            by=ctx.trigger.describe(),
            day=ctx.logical_date.isoformat(),
            reasons=decision.reasons,
        )
    return None


def promote(ctx: RunContext) -> PromoteManifest:
    """Register the challenger, apply the gate, move ``champion`` if it passes.

    Returns the decision manifest. Idempotent: a retried promote reuses the registered version.
    """
    import mlflow

    from pipeline_steps.core.tracking import (
        FINGERPRINT_TAG,
        RUN_TAG,
        champion_version,
        connect,
        log_run_cost,
    )

    cfg = ctx.settings.mlflow
    evaluation = ctx.upstream(EvaluateManifest)
    for earlier in LINEAGE_INPUTS:  # what the lineage reads, before the registry changes
        ctx.upstream(earlier)
    fingerprint = ctx.upstream(TrainManifest).fingerprint
    client = connect(cfg)
    challenger, champion = evaluation.challenger, evaluation.champion

    version = _registered_version(client, cfg.registered_model, challenger.mlflow_run_id)
    if version is None:
        twin = _identical_version(ctx, client, fingerprint)
        if twin is not None:
            return _record_identical(ctx, client, evaluation, fingerprint, *twin)
        tags = {RUN_TAG: ctx.run_id, FINGERPRINT_TAG: fingerprint}
        version = mlflow.register_model(challenger.model_uri, cfg.registered_model, tags=tags)
    verdict = gate(evaluation, ctx.settings.gate, evaluation.confidence)

    evaluated_against = champion.version if champion else None
    # Read, compare and set under one lock: between reading the champion and moving the alias
    # no other promotion of this model may move it.
    with exclusive(
        ctx.settings.promotion.lock, f"promotion.{cfg.registered_model}", setting="promotion.lock"
    ):
        current = champion_version(client, cfg)
        current_version = str(current.version) if current else None
        recorded = _recorded_promotion(version, current_version)
        replaced = None
        if recorded is not None:  # a retry after this run's own promotion: keep its record
            decision, current_version = recorded
        else:
            decision = decide(
                ctx, verdict, evaluated_against, current_version, str(version.version)
            )
            replaced = record_decision(
                ctx, client, decision, str(version.version), evaluation, current_version
            )
    reasons = decision.reasons
    log.info("%s version %s: %s", decision.decision, version.version, "; ".join(reasons))
    manifest = PromoteManifest(
        logical_date=ctx.logical_date.isoformat(),
        registered_model=cfg.registered_model,
        version=str(version.version),
        decision=decision.decision,
        reasons=reasons,
        champion_before=current_version,
        champion_after=str(version.version) if decision.champion else current_version,
        staging_after=str(version.version) if decision.stages else None,
        staging_replaced=replaced,
    )
    lineage = build_lineage(ctx, manifest.decision, manifest.version)
    ctx.lake.write_json(to_json(lineage), ctx.run_dir, "lineage.json")
    if lineage.cost is not None:
        try:
            log_run_cost(client, lineage.mlflow_run_id, lineage.cost)
        except Exception as exc:  # the cost is for reading: it never fails a promotion
            log.warning("cost not logged to MLflow run %s: %s", lineage.mlflow_run_id, exc)
    return ctx.record(manifest)
