"""The release path: a gated challenger waits in ``staging``, shadows the champion on live days,
and becomes the champion on the evidence of the pooled days; a champion that degrades goes back.

- **Staged.** With ``release.mode: staged`` the promote step moves the ``staging`` alias (not
  ``champion``) to a challenger that passed the gate; a newer one replaces a waiting one
  (:func:`stage`).
- **Shadow days.** The drift monitor scores the staged model beside the champion on each new
  day (:mod:`pipeline_steps.evaluation.shadow`).
- **Release decision.** After ``release.shadow_days`` days the same gate as the promote step's
  judges the pooled days (:func:`shadow_evaluation`, paired-bootstrap intervals, margins,
  slices): ``pass`` releases the candidate, ``refuse`` retires it, ``undecided`` keeps it
  waiting until ``release.max_shadow_days``. ``release.approval`` may put a person's
  Approve/Reject before the move (:func:`apply_approval`).
- **Rollback.** The monitor scores the version the champion replaced beside it; the champion's
  day is ``degraded`` when the paired interval of champion minus replaced lies beyond
  ``release.rollback_margin``; after ``release.rollback_days`` such days in a row the champion
  goes back to the version it replaced (:func:`day_check`, the release step).

Every stage a version enters is a record on it (``trainyard.stages.<n>``, JSON) and a line of
its description in the MLflow UI; the champion's moves stay those of
:mod:`pipeline_steps.evaluation.champion`. No Airflow here.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.manifests import (
    DayCheck,
    EvaluateManifest,
    HoldoutRef,
    ScoredChallenger,
    ScoredChampion,
)
from pipeline_steps.core.settings import MlflowSettings, Settings
from pipeline_steps.core.stages import (
    STAGE_RECORD_PREFIX,
    STAGE_TAG,
    Stage,
    stage_records,
)
from pipeline_steps.core.tasks import task_spec
from pipeline_steps.evaluation.bootstrap import paired_differences
from pipeline_steps.evaluation.champion import fit_description, now_utc
from pipeline_steps.evaluation.gate import NAMES, RELATIVE, Verdict
from pipeline_steps.evaluation.metrics import HIGHER_IS_BETTER, holdout_metrics, unjudged_classes
from pipeline_steps.evaluation.shadow import DayScores, pooled
from pipeline_steps.evaluation.slices import slice_results

log = logging.getLogger(__name__)

APPROVED_BY_TAG = "trainyard.approved_by"
APPROVAL_COMMENT_TAG = "trainyard.approval_comment"
APPROVED_AT_TAG = "trainyard.approved_at"
RELEASE_TAG = "trainyard.release"
"""The latest release decision on the version, as JSON (outcome, days, intervals, reasons)."""
MONITOR_USER = "trainyard monitor"


# -- records on a version -------------------------------------------------------------------------


def record_stage(
    client: Any,
    cfg: MlflowSettings,
    version: str,
    stage: Stage,
    *,
    by: str,
    reason: str,
    day: str | None,
    record_fields: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Append a stage record to ``version`` (tag and a line of its description) with
    ``record_fields`` in it, set its current stage and the ``extra`` tags; returns the
    record."""
    current = client.get_model_version(cfg.registered_model, version)
    tags = dict(current.tags or {})
    count = len(stage_records(tags))
    record = {
        "stage": stage,
        "at": now_utc(),
        "by": by,
        "day": day,
        "reason": reason,
        **(record_fields or {}),
    }
    written = {
        f"{STAGE_RECORD_PREFIX}{count + 1}": json.dumps(record, sort_keys=True),
        STAGE_TAG: stage,
        **(extra or {}),
    }
    for key, value in written.items():
        client.set_model_version_tag(cfg.registered_model, version, key, value)
    line = f"Stage **{stage}** on {record['at']} ({day or 'no logical date'}) by {by}: {reason}"
    client.update_model_version(
        cfg.registered_model,
        version,
        description=fit_description(current.description or "", line),
    )
    return record


# -- staging ---------------------------------------------------------------------------------------


def stage(
    client: Any, settings: Settings, version: str, *, by: str, day: str, reasons: list[str]
) -> str | None:
    """Move the staging alias to ``version`` (called under the promotion lock); a version that
    was waiting there is recorded as ``replaced``. Returns the replaced version, if any."""
    from pipeline_steps.core.tracking import aliased_version

    cfg = settings.mlflow
    waiting = aliased_version(client, cfg, cfg.staging_alias)
    replaced = str(waiting.version) if waiting is not None else None
    if replaced == version:
        return None
    record_stage(
        client,
        cfg,
        version,
        "staging",
        by=by,
        day=day,
        reason="passed the gate; shadows the champion for release.shadow_days="
        f"{settings.release.shadow_days} monitored day(s)"
        + (f"; replaces waiting version {replaced}" if replaced else ""),
    )
    client.set_registered_model_alias(cfg.registered_model, cfg.staging_alias, version)
    if replaced is not None:
        record_stage(
            client,
            cfg,
            replaced,
            "replaced",
            by=by,
            day=day,
            reason=f"version {version} passed the gate and replaced it in staging",
        )
    return replaced


# -- the release decision --------------------------------------------------------------------------


def shadow_evaluation(
    days: list[DayScores],
    *,
    settings: Settings,
    task: str,
    classes: list[str],
    staged_uri: str,
    staged_run_id: str,
    champion_version: str,
    champion_uri: str,
) -> EvaluateManifest:
    """The pooled shadow days as one evaluation of the staged model (challenger) against the
    champion, as the evaluate step records one: metrics, paired-bootstrap intervals, slices."""
    cfg, judged = settings.evaluate, settings.gate.min_class_rows
    labels, staged, champion, slices = pooled(days)
    digest = hashlib.sha256()
    for array in (labels, staged, champion):
        digest.update(np.ascontiguousarray(array, dtype=np.float64).tobytes())
    return EvaluateManifest(
        logical_date=days[-1].day,
        holdout=HoldoutRef(
            path="reports/monitor/" + ",".join(f"date={d.day}" for d in days),
            sha256=digest.hexdigest(),
            rows=len(labels),
            positives=task_spec(task).positives(labels),
            days=[d.day for d in days],
        ),
        challenger=ScoredChallenger(
            model_uri=staged_uri,
            mlflow_run_id=staged_run_id,
            metrics=holdout_metrics(labels, staged, task, classes, judged),
        ),
        champion=ScoredChampion(
            version=champion_version,
            model_uri=champion_uri,
            metrics=holdout_metrics(labels, champion, task, classes, judged),
        ),
        unjudged_classes=unjudged_classes(labels, classes, judged) if classes else {},
        confidence=cfg.confidence,
        resamples=cfg.resamples,
        differences=paired_differences(
            labels,
            staged,
            champion,
            resamples=cfg.resamples,
            confidence=cfg.confidence,
            seed=cfg.seed,
            task=task,
            min_class_rows=judged,
        ),
        slices=slice_results(
            slices,
            labels,
            staged,
            champion,
            min_rows=settings.gate.min_slice_rows,
            resamples=cfg.resamples,
            confidence=cfg.confidence,
            seed=cfg.seed,
            task=task,
        ),
    )


ReleaseAction = Literal["release", "retire", "wait", "ask"]


@dataclass(frozen=True, slots=True)
class ReleaseDecision:
    action: ReleaseAction
    """``release``: move champion to the candidate; ``retire``: drop it from staging; ``wait``:
    more shadow days; ``ask``: a person decides (``release.approval``)."""
    outcome: str
    """The gate's outcome on the pooled days (``pass``, ``refuse``, ``undecided``), or
    ``waiting`` before ``release.shadow_days``."""
    reasons: list[str]


def decide_release(
    settings: Settings, shadow_days: int, verdict: Verdict | None
) -> ReleaseDecision:
    """The release's action from the pooled verdict (None before enough days) and the
    ``release`` settings."""
    cfg = settings.release
    if verdict is None:
        return ReleaseDecision(
            "wait",
            "waiting",
            [f"{shadow_days} of release.shadow_days={cfg.shadow_days} shadow day(s) so far"],
        )
    reasons = [f"pooled {shadow_days} shadow day(s): gate {verdict.outcome}", *verdict.reasons]
    if verdict.outcome == "pass":
        if cfg.approval == "always":
            return ReleaseDecision("ask", "pass", [*reasons, "release.approval=always"])
        return ReleaseDecision("release", "pass", reasons)
    if verdict.outcome == "refuse":
        return ReleaseDecision("retire", "refuse", reasons)
    if shadow_days < cfg.max_shadow_days:
        return ReleaseDecision(
            "wait",
            "undecided",
            [*reasons, f"waiting up to release.max_shadow_days={cfg.max_shadow_days}"],
        )
    if cfg.approval in ("undecided", "always"):
        return ReleaseDecision(
            "ask", "undecided", [*reasons, f"still undecided after {shadow_days} day(s)"]
        )
    return ReleaseDecision(
        "retire",
        "undecided",
        [*reasons, f"still undecided after release.max_shadow_days={cfg.max_shadow_days}"],
    )


def describe_differences(evaluation: EvaluateManifest) -> str:
    """Staged minus champion per metric with its interval, in one line."""
    level = f"{2 * evaluation.confidence - 1:.0%}"
    shown = ", ".join(
        f"{NAMES.get(m, m)} {d.describe()}" for m, d in evaluation.differences.items()
    )
    return f"staged - champion ({level} intervals): {shown}"


# -- rollback --------------------------------------------------------------------------------------


def day_check(
    day: DayScores,
    *,
    metric: str,
    margin: float,
    task: str,
    resamples: int,
    confidence: float,
    seed: int,
) -> DayCheck:
    """Whether the champion is worse than the version it replaced (``day.previous``) on the
    day's rows beyond ``margin`` with ``confidence``: the paired interval of champion minus
    replaced lies entirely below ``-margin`` (AUC) or above ``+margin`` (log loss; for RMSE and
    MAE ``margin`` is a fraction of the replaced version's value). Paired on the same rows, the
    day's difficulty cancels out. A day on which the metric is undefined (one class) is not
    degraded."""
    assert day.previous is not None, "a rollback check needs the replaced version's scores"
    labels = day.labels
    champion = float(getattr(holdout_metrics(labels, day.champion, task), metric))
    previous = float(getattr(holdout_metrics(labels, day.previous, task), metric))
    (difference,) = paired_differences(
        labels,
        day.champion,
        day.previous,
        resamples=resamples,
        confidence=confidence,
        seed=seed,
        metrics=(metric,),
        task=task,
    ).values()
    allowed = margin * previous if metric in RELATIVE else margin
    if difference.estimate != difference.estimate:
        degraded = cleared = False
    elif HIGHER_IS_BETTER[metric]:
        degraded = bool(difference.high < -allowed)
        cleared = bool(difference.low >= -allowed)
    else:
        degraded = bool(difference.low > allowed)
        cleared = bool(difference.high <= allowed)
    return DayCheck(
        day=day.day,
        rows=len(labels),
        champion=round(champion, 6),
        previous=round(previous, 6),
        difference=difference,
        degraded=degraded,
        cleared=cleared,
    )


def consecutive_degraded(checks: list[DayCheck]) -> int:
    """How many degraded days the latest days hold since the last cleared one: a day too
    uncertain to tell (a quiet day, one class nearly absent) neither counts nor breaks the run,
    a day on which the champion is, with confidence, within the margin ends it."""
    count = 0
    for check in reversed(checks):
        if check.degraded:
            count += 1
        elif check.cleared:
            break
    return count


# -- moves -----------------------------------------------------------------------------------


def release_candidate(
    client: Any,
    settings: Settings,
    *,
    candidate: str,
    champion: str,
    day: str,
    by: str,
    reasons: list[str],
    evaluation: EvaluateManifest,
    approval: dict[str, str] | None = None,
) -> None:
    """Move ``champion`` from version ``champion`` to the staged ``candidate`` and clear staging,
    under the promotion lock and only if neither alias moved meanwhile (``StepError`` saying
    which did). The candidate's record holds the pooled evidence."""
    from pipeline_steps.core.locks import exclusive
    from pipeline_steps.core.tracking import aliased_version, champion_version

    cfg = settings.mlflow
    with exclusive(
        settings.promotion.lock, f"promotion.{cfg.registered_model}", setting="promotion.lock"
    ):
        current = champion_version(client, cfg)
        staged = aliased_version(client, cfg, cfg.staging_alias)
        now_champion = str(current.version) if current else None
        now_staged = str(staged.version) if staged else None
        if (now_champion, now_staged) != (champion, candidate):
            raise StepError(
                f"the aliases moved since the release decided (champion {champion} -> "
                f"{now_champion or 'none'}, staging {candidate} -> {now_staged or 'none'}); "
                "nothing released"
            )
        extra = {
            RELEASE_TAG: json.dumps(release_record(evaluation, "release", reasons), sort_keys=True),
            **(approval or {}),
        }
        record_stage(
            client,
            cfg,
            candidate,
            "champion",
            by=by,
            day=day,
            reason=f"released over version {champion} on {len(evaluation.holdout.days)} shadow "
            f"day(s): {describe_differences(evaluation)}",
            record_fields={"kind": "release", "from": champion},
            extra=extra,
        )
        client.set_registered_model_alias(cfg.registered_model, cfg.champion_alias, candidate)
        client.delete_registered_model_alias(cfg.registered_model, cfg.staging_alias)


def retire_candidate(
    client: Any,
    settings: Settings,
    *,
    candidate: str,
    day: str,
    by: str,
    reasons: list[str],
    evaluation: EvaluateManifest | None,
    extra: dict[str, str] | None = None,
) -> bool:
    """Take ``candidate`` out of staging with its record (nothing when staging moved on
    meanwhile; returns whether it was retired). The champion is untouched."""
    from pipeline_steps.core.locks import exclusive
    from pipeline_steps.core.tracking import aliased_version

    cfg = settings.mlflow
    with exclusive(
        settings.promotion.lock, f"promotion.{cfg.registered_model}", setting="promotion.lock"
    ):
        staged = aliased_version(client, cfg, cfg.staging_alias)
        if staged is None or str(staged.version) != candidate:
            return False
        tags = dict(extra or {})
        if evaluation is not None:
            record = release_record(evaluation, "retire", reasons)
            tags[RELEASE_TAG] = json.dumps(record, sort_keys=True)
        record_stage(
            client,
            cfg,
            candidate,
            "retired",
            by=by,
            day=day,
            reason="; ".join(reasons[:4]),
            extra=tags,
        )
        client.delete_registered_model_alias(cfg.registered_model, cfg.staging_alias)
    return True


def release_record(evaluation: EvaluateManifest, action: str, reasons: list[str]) -> dict:
    """The release decision as recorded on the candidate: action, days, rows, intervals."""
    return {
        "action": action,
        "days": evaluation.holdout.days,
        "rows": evaluation.holdout.rows,
        "differences": {m: d.describe() for m, d in evaluation.differences.items()},
        "reasons": reasons[:8],
    }


def approval_tags(by: str, comment: str, at: str) -> dict[str, str]:
    """What a person's answer leaves on the version."""
    return {
        APPROVED_BY_TAG: by,
        APPROVAL_COMMENT_TAG: comment or "(no comment)",
        APPROVED_AT_TAG: at,
    }
