"""The promotion gate: may the challenger replace the champion, judged on intervals?

A pure function of the evaluation (metrics, paired-bootstrap intervals, baselines, slices) and
the gate settings. Outcomes:

- ``undecided``: the holdout has fewer than ``gate.min_positives`` positives; nothing is decided
  and the champion stays;
- ``refuse``: the challenger does not beat the trivial model (its interval of log loss and AUC
  differences must exclude zero in its favour), or, with a champion, is worse beyond a primary
  metric's margin with ``evaluate.confidence``, or (``gate.require_improvement``) better on none,
  or worse beyond ``gate.max_slice_auc_drop`` on a slice of at least ``gate.min_slice_rows``
  rows; without a champion, below the ``gate.min_auc`` floor;
- ``pass`` otherwise.

Every check adds a readable reason, so the recorded decision says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline_steps.core.manifests import EvaluateManifest, Interval
from pipeline_steps.core.settings import GateSettings
from pipeline_steps.evaluation.metrics import HIGHER_IS_BETTER, best, worst

Outcome = Literal["pass", "refuse", "undecided"]
NAMES = {"auc": "AUC", "log_loss": "log loss", "brier": "Brier score", "accuracy": "accuracy"}


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    reasons: list[str]

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"


def _worse_beyond(metric: str, interval: Interval, margin: float) -> bool:
    """Whether the difference may, with the interval's confidence, be worse than ``margin``."""
    bound = worst(interval, metric)
    return bound < -margin if HIGHER_IS_BETTER[metric] else bound > margin


def _better(metric: str, interval: Interval) -> bool:
    """Whether the first model is better, with the interval's confidence."""
    bound = worst(interval, metric)
    return bound > 0 if HIGHER_IS_BETTER[metric] else bound < 0


def _trivial(evaluation: EvaluateManifest) -> tuple[bool, str] | None:
    baseline = next((b for b in evaluation.baselines if b.name == "trivial"), None)
    if baseline is None:
        return None
    checks = [(m, baseline.differences.get(m)) for m in ("auc", "log_loss")]
    beats = all(d is not None and _better(m, d) for m, d in checks)
    shown = "; ".join(f"{NAMES[m]} {d.describe()}" for m, d in checks if d is not None)
    what = "" if baseline.rate is None else f" (the training window's rate {baseline.rate:.3f})"
    return beats, (
        f"challenger {'beats' if beats else 'does not beat'} the trivial model{what}: {shown}"
    )


def gate(evaluation: EvaluateManifest, settings: GateSettings, confidence: float) -> Verdict:
    """The gate's verdict on ``evaluation``'s challenger; ``confidence`` is the intervals'
    (recorded in the evaluation), named in the reasons."""
    challenger = evaluation.challenger.metrics
    if challenger.auc != challenger.auc:  # NaN: one class only
        return Verdict("refuse", ["challenger AUC is undefined on this holdout (one class only)"])
    positives = evaluation.holdout.positives
    if 0 <= positives < settings.min_positives:
        return Verdict(
            "undecided",
            [
                f"the holdout has {positives} positive rows, fewer than gate.min_positives="
                f"{settings.min_positives}: too few to tell the models apart; the champion stays"
            ],
        )
    level = f"{confidence:.0%} confidence"
    reasons: list[str] = []
    ok = True
    trivial = _trivial(evaluation)
    if trivial is not None:
        beats, reason = trivial
        ok &= beats
        reasons.append(reason)
    champion = evaluation.champion
    if champion is None:
        floor = challenger.auc >= settings.min_auc
        ok &= floor
        reasons.append(
            f"no champion yet; challenger AUC {challenger.auc:.4f} "
            f"{'>=' if floor else '<'} floor {settings.min_auc}"
        )
        return Verdict("pass" if ok else "refuse", reasons)

    improved = []
    for metric in settings.primary_metrics:
        interval = evaluation.differences.get(metric)
        name = NAMES[metric]
        if interval is None or interval.estimate != interval.estimate:
            ok = False
            reasons.append(f"{name}: no interval of challenger - champion recorded; refused")
            continue
        margin = settings.margin(metric)
        worse = _worse_beyond(metric, interval, margin)
        ok &= not worse
        bound = f"-{margin:g}" if HIGHER_IS_BETTER[metric] else f"+{margin:g}"
        reasons.append(
            f"{name} challenger - champion {interval.describe()}: "
            + (
                f"may be worse than the margin {bound} ({level})"
                if worse
                else f"not worse than the margin {bound} ({level})"
            )
        )
        if _better(metric, interval):
            improved.append(name)
    if settings.require_improvement:
        ok &= bool(improved)
        reasons.append(
            f"better on {', '.join(improved)} ({level})"
            if improved
            else f"better on none of the primary metrics ({level}); gate.require_improvement"
        )

    for piece in evaluation.slices:
        interval = piece.differences.get("auc")
        if interval is None or interval.estimate != interval.estimate:
            continue
        if best(interval, "auc") < -settings.max_slice_auc_drop:
            ok = False
            reasons.append(
                f"slice {piece.column}={piece.value} ({piece.rows} rows): AUC challenger - "
                f"champion {interval.describe()} is worse than the slice margin "
                f"-{settings.max_slice_auc_drop:g} ({level})"
            )
    return Verdict("pass" if ok else "refuse", reasons)
