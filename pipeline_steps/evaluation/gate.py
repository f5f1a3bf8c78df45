"""The promotion gate: may the challenger replace the champion, judged on intervals?

A pure function of the evaluation (metrics, paired-bootstrap intervals, baselines, slices) and
the gate settings; the task is the evaluation's (``HoldoutMetrics.task``), its metrics those of
:mod:`pipeline_steps.core.tasks`. Outcomes:

- ``undecided``: the holdout has fewer than ``gate.min_positives`` positives (``binary``) or
  ``gate.min_rows`` rows (the other tasks); nothing is decided and the champion stays;
- ``refuse``: the challenger does not beat the trivial model (its interval of each of the task's
  ``trivial_metrics`` differences must exclude zero in its favour), or, with a champion, is worse
  beyond a primary metric's margin with ``evaluate.confidence``, or
  (``gate.require_improvement``) better on none, or worse beyond the slice margin of the task's
  slice metric on a slice of at least ``gate.min_slice_rows`` rows (``regression``: a fraction
  of the champion's RMSE on that slice); without a champion, below
  the ``gate.min_auc`` floor (``binary``; for the other tasks beating the trivial model is the
  floor);
- ``refuse`` too when the challenger is worse than a baseline of ``gate.baselines_must_beat``
  (default ``linear``: the task's linear baseline) beyond a primary metric's margin with
  ``evaluate.confidence`` (the whole interval), with or without a champion;
- ``refuse`` too when the challenger or a baseline is near perfect on the holdout
  (``gate.suspect_auc``, ``suspect_accuracy``, ``suspect_r2``): a leak, unless
  ``gate.easy_task_reason`` says why the task is this easy;
- ``pass`` otherwise.

Every check adds a readable reason, so the recorded decision says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline_steps.core.manifests import EvaluateManifest, HoldoutMetrics, Interval, SliceResult
from pipeline_steps.core.settings import GateSettings
from pipeline_steps.core.tasks import task_spec
from pipeline_steps.evaluation.metrics import HIGHER_IS_BETTER, best, worst
from pipeline_steps.tasks import BUILTIN_TASKS, Metric

Outcome = Literal["pass", "refuse", "undecided"]

_DECLARED: list[Metric] = [m for name in BUILTIN_TASKS for m in task_spec(name).metric_list]
NAMES = {m.name: m.label for m in _DECLARED}
"""How reasons and reports name each built-in task's metrics."""
RELATIVE = tuple(dict.fromkeys(m.name for m in _DECLARED if m.relative))
PER_CLASS = tuple(dict.fromkeys(m.name for m in _DECLARED if m.per_class))
"""Metrics averaged over the judged classes (``gate.min_class_rows``)."""
"""Metrics whose margins are fractions of the champion's value (their units are the label's)."""


def _name(metric: str, task: str) -> str:
    """How reasons name ``metric`` (``AUC``, ``log loss``, ``RMSE``...), as its task declares."""
    return task_spec(task).metric(metric).label


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


def _surely_worse(metric: str, interval: Interval, margin: float) -> bool:
    """Whether the difference is, with the interval's confidence, worse than ``margin``."""
    bound = best(interval, metric)
    return bound < -margin if HIGHER_IS_BETTER[metric] else bound > margin


def _margin(margin: float, metric: str, champion: float, of: str) -> tuple[float, str]:
    """A ``gate`` margin in the metric's units (RMSE's and MAE's are fractions of ``champion``,
    the champion's value) and how a reason shows it: ``-0.01``, ``+0.01``, or
    ``+0.2436 (2% of the champion's RMSE 12.1809)``."""
    if metric in RELATIVE:
        shown = f"+{margin * champion:.4f} ({100 * margin:g}% of {of} {champion:.4f})"
        return margin * champion, shown
    return margin, f"-{margin:g}" if HIGHER_IS_BETTER[metric] else f"+{margin:g}"


def _slice_margin(
    settings: GateSettings, metric: str, piece: SliceResult, champion: HoldoutMetrics
) -> tuple[float, str]:
    """``_margin`` of a slice: RMSE's is a fraction of the champion's RMSE on the slice itself
    (where the champion errs more, a difference in the label's units means less); a slice
    recorded without it (before the slices held it) falls back to the champion's holdout
    RMSE."""
    value = float(getattr(piece.champion, metric)) if piece.champion else float("nan")
    name = _name(metric, champion.task)
    of = f"the champion's {name} on the slice"
    if value != value:  # NaN: not recorded
        value, of = float(getattr(champion, metric)), f"the champion's holdout {name}"
    return _margin(settings.slice_margin(metric), metric, value, of)


def _trivial(evaluation: EvaluateManifest, task: str) -> tuple[bool, str] | None:
    baseline = next((b for b in evaluation.baselines if b.name == "trivial"), None)
    if baseline is None:
        return None
    checks = [(m, baseline.differences.get(m)) for m in task_spec(task).trivial_metrics]
    beats = all(d is not None and _better(m, d) for m, d in checks)
    shown = "; ".join(f"{_name(m, task)} {d.describe()}" for m, d in checks if d is not None)
    spec = task_spec(task)
    if baseline.rate is not None:
        what = f" ({spec.trivial_description} {baseline.rate:.3f})"
    else:
        what = "" if spec.counts_positives else f" ({spec.trivial_description})"
    return beats, (
        f"challenger {'beats' if beats else 'does not beat'} the trivial model{what}: {shown}"
    )


def _worse_than_trivial(evaluation: EvaluateManifest, task: str) -> str | None:
    """Why the challenger is worse than the trivial model with confidence on one of the task's
    trivial metrics (the whole interval on the losing side), or None: a holdout too small to
    promote on can still show that."""
    baseline = next((b for b in evaluation.baselines if b.name == "trivial"), None)
    if baseline is None:
        return None
    for metric in task_spec(task).trivial_metrics:
        interval = baseline.differences.get(metric)
        if interval is None:
            continue
        favourable = best(interval, metric)
        if favourable < 0 if HIGHER_IS_BETTER[metric] else favourable > 0:  # NaN never is
            return (
                f"challenger is worse than the trivial model with confidence: "
                f"{_name(metric, task)} {interval.describe()}; refused"
            )
    return None


def _baselines(
    evaluation: EvaluateManifest,
    settings: GateSettings,
    task: str,
    primary: tuple[str, ...],
    level: str,
) -> tuple[bool, list[str]]:
    """Whether the challenger loses to none of ``gate.baselines_must_beat``, and a reason per
    baseline: on a primary metric, challenger - baseline loses when the whole interval lies
    beyond the metric's margin (``_surely_worse``; RMSE's and MAE's margin a fraction of the
    baseline's value). Not the champion's non-inferiority: a baseline is no incumbent to
    protect, and a network that ties a linear model within noise cannot prove itself within a
    margin on one holdout (a shipped example would be refused on 12 of 20 ordinary days,
    docs/benchmarks.md);
    one that is worse with confidence is refused. A baseline the evaluation did not score is
    named and not held to; a metric without an interval refuses, as it does against the
    champion."""
    ok, reasons = True, []
    scored = {b.name: b for b in evaluation.baselines}
    for name in settings.baselines_for(task):
        shown = f"the {name.replace('_', ' ')} baseline"
        baseline = scored.get(name)
        if baseline is None:
            reasons.append(f"{shown} was not scored on this holdout; not held to it")
            continue
        judged, lost = [], []
        for metric in primary:
            interval = baseline.differences.get(metric)
            label = _name(metric, task)
            if interval is None or interval.estimate != interval.estimate:
                lost.append(f"{label}: no interval of challenger - baseline recorded")
                continue
            margin, bound = _margin(
                settings.margin(metric),
                metric,
                float(getattr(baseline.metrics, metric)),
                f"{shown}'s {label}",
            )
            described = f"{label} {interval.describe()}"
            if _surely_worse(metric, interval, margin):
                lost.append(f"{described} is worse than the margin {bound}")
            else:
                judged.append(described)
        if lost:
            ok = False
            reasons.append(
                f"challenger - {shown}: {'; '.join(lost)} ({level}); refused: "
                "gate.baselines_must_beat"
            )
        else:
            reasons.append(f"challenger does not lose to {shown} ({level}): {'; '.join(judged)}")
    return ok, reasons


def _undefined(challenger: HoldoutMetrics, task: str, metrics: tuple[str, ...]) -> str | None:
    """Why the challenger's metrics cannot be judged, or None."""
    return task_spec(task).undefined(challenger, metrics)


def _too_small(evaluation: EvaluateManifest, settings: GateSettings, task: str) -> str | None:
    """Why the holdout is too small to decide on, or None."""
    holdout = evaluation.holdout
    if task_spec(task).counts_positives:
        if 0 <= holdout.positives < settings.min_positives:
            return (
                f"the holdout has {holdout.positives} positive rows, fewer than "
                f"gate.min_positives={settings.min_positives}: too few to tell the models "
                "apart; the champion stays"
            )
        return None
    if holdout.rows < settings.min_rows:
        return (
            f"the holdout has {holdout.rows} rows, fewer than gate.min_rows={settings.min_rows}: "
            "too few to tell the models apart; the champion stays"
        )
    return None


def near_perfect(metrics: HoldoutMetrics, settings: GateSettings) -> bool:
    """Whether a model with ``metrics`` is near perfect on the holdout: its task's
    ``near_perfect_metric`` at least the gate's ``suspect_<metric>`` (NaN never is)."""
    metric = task_spec(metrics.task).near_perfect_metric
    return float(getattr(metrics, metric)) >= float(getattr(settings, f"suspect_{metric}"))


def _near_perfect(evaluation: EvaluateManifest, settings: GateSettings, task: str) -> str | None:
    """Which of the challenger and the baselines score near perfect on the holdout, and how
    much, and the columns the challenger leans on (``EvaluateManifest.suspects``), or None: a
    leak is the usual cause."""
    metric = task_spec(task).near_perfect_metric
    floor = float(getattr(settings, f"suspect_{metric}"))
    models = [("challenger", evaluation.challenger.metrics)]
    models += [(f"{b.name} baseline", b.metrics) for b in evaluation.baselines]
    found = [
        f"{who} {float(getattr(m, metric)):.4f}" for who, m in models if near_perfect(m, settings)
    ]
    if not found:
        return None
    name = _name(metric, task)
    ranked = sorted(
        evaluation.suspects.items(), key=lambda item: item[1], reverse=not HIGHER_IS_BETTER[metric]
    )
    leaning = ", ".join(
        f"{column} ({name} {score:.4f} with it shuffled)" for column, score in ranked
    )
    suspects = (
        f"; the challenger leans on {leaning}: the suspect columns"
        if leaning
        else "; no one column's shuffling spoils the challenger's score, so look for a combination"
    )
    return (
        f"near perfect on the holdout: {name} of the {', '.join(found)} >= "
        f"gate.suspect_{metric}={floor:g}; a score this high usually means a leak, a "
        f"column or a combination of columns that gives the label away{suspects} (review "
        "them, the columns init-domain marked 'kept, review', and LEFT_OUT in the domain "
        "module)"
    )


def gate(evaluation: EvaluateManifest, settings: GateSettings, confidence: float) -> Verdict:
    """The gate's verdict on ``evaluation``'s challenger; ``confidence`` is the intervals'
    (recorded in the evaluation), named in the reasons. ``SettingsError`` when
    ``gate.primary_metrics`` names a metric the evaluation's task does not have."""
    challenger = evaluation.challenger.metrics
    task = challenger.task
    spec = task_spec(task)
    primary = settings.metrics_for(task)
    undefined = _undefined(challenger, task, tuple(dict.fromkeys(primary + spec.trivial_metrics)))
    if undefined is not None:
        return Verdict("refuse", [undefined])
    too_small = _too_small(evaluation, settings, task)
    if too_small is not None:
        losing = _worse_than_trivial(evaluation, task)
        if losing is not None:  # too few rows to promote on, enough to see it lose
            return Verdict("refuse", [losing, too_small.replace("; the champion stays", "")])
        return Verdict("undecided", [too_small])
    level = f"{confidence:.0%} confidence"
    reasons: list[str] = []
    ok = True
    suspect = _near_perfect(evaluation, settings, task)
    if suspect is not None:
        if not settings.easy_task_reason:
            return Verdict(
                "refuse",
                [
                    f"{suspect}; refused. If the task is genuinely this easy, say why in "
                    "gate.easy_task_reason (recorded with the decision)"
                ],
            )
        reasons.append(f"{suspect}; accepted: {settings.easy_task_reason} (gate.easy_task_reason)")
    trivial = _trivial(evaluation, task)
    if trivial is not None:
        beats, reason = trivial
        ok &= beats
        reasons.append(reason)
    holds, baseline_reasons = _baselines(evaluation, settings, task, primary, level)
    ok &= holds
    reasons += baseline_reasons
    champion = evaluation.champion
    if champion is None:
        if spec.counts_positives:
            floor = challenger.auc >= settings.min_auc
            ok &= floor
            reasons.append(
                f"no champion yet; challenger AUC {challenger.auc:.4f} "
                f"{'>=' if floor else '<'} floor {settings.min_auc}"
            )
        elif trivial is None:
            ok = False
            reasons.append("no champion yet and no trivial model scored to hold the first to")
        else:
            reasons.append(
                f"no champion yet; for a {task} task beating the trivial model is the floor"
            )
        return Verdict("pass" if ok else "refuse", reasons)

    averaged = [_name(m, task) for m in primary if m in PER_CLASS]
    if averaged and evaluation.unjudged_classes:
        left = ", ".join(f"{c} ({n} rows)" for c, n in evaluation.unjudged_classes.items())
        reasons.append(
            f"{', '.join(averaged)} judged on the classes with at least "
            f"gate.min_class_rows={settings.min_class_rows} holdout rows; not judged: {left}"
        )
    improved = []
    for metric in primary:
        interval = evaluation.differences.get(metric)
        name = _name(metric, task)
        if interval is None or interval.estimate != interval.estimate:
            ok = False
            reasons.append(f"{name}: no interval of challenger - champion recorded; refused")
            continue
        margin, bound = _margin(
            settings.margin(metric),
            metric,
            float(getattr(champion.metrics, metric)),
            f"the champion's {name}",
        )
        worse = _worse_beyond(metric, interval, margin)
        ok &= not worse
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

    metric = spec.slice_metric
    for piece in evaluation.slices:
        interval = piece.differences.get(metric)
        if interval is None or interval.estimate != interval.estimate:
            continue
        margin, bound = _slice_margin(settings, metric, piece, champion.metrics)
        if _surely_worse(metric, interval, margin):
            ok = False
            reasons.append(
                f"slice {piece.column}={piece.value} ({piece.rows} rows): {_name(metric, task)} "
                f"challenger - champion {interval.describe()} is worse than the slice margin "
                f"{bound} ({level})"
            )
    return Verdict("pass" if ok else "refuse", reasons)
