"""How often the automatic rollback fires over 2013, and how fast it reacts to a bad champion.

The rule is the release path's (``pipeline_steps.evaluation.release.day_check`` and
``consecutive_degraded``): on each monitored day the champion's AUC gets a stratified bootstrap
interval (``evaluate.resamples``, ``evaluate.confidence``, ``evaluate.seed``); the day is
degraded when the interval's upper bound is below ``baseline - margin``, and
``release.rollback_days`` degraded days in a row roll the champion back. The baseline is the
champion's release baseline as the rollback step reads it (``release_baseline``: the version's
``trainyard.baseline_auc``, else ``trainyard.challenger_auc``), or ``--baseline``.

Every day of 2013 is one monitored day: its flights, as ``year_rows`` of
``benchmarks/drift_trigger_rate.py`` builds them (the same Feast join the pipeline uses).

- **Fixed champion.** The registered model scores every day and is never retrained; each firing
  is counted and the streak restarts, as after a rollback. Any firing is a false alarm.
- **Degraded champions**, each scored on every day and put in place on the 1st of each month;
  the count is the monitored days until the rule fires (the day it fires included):

  - ``permuted``: the champion's predictions shuffled at random within each day (seeded), the
    scores of a model with no information (AUC about 0.5);
  - ``blend_<d>``: ``logit(p) + k * e`` with ``e ~ N(0, 1)`` drawn once per row (seeded) and
    ``k`` found by bisection so that the median over 2013 of the daily AUC drop (fixed minus
    blended) is ``d``.

``day_check`` runs once per day and scenario at the default margin; the other margins apply the
same comparison (upper bound below ``baseline - margin``) to the interval it returned.

    TRAINYARD_HOME=/work/main/.trainyard .venv/bin/python benchmarks/rollback_rate.py \\
        --model-uri models:/flight_delay/2 --rows-cache /tmp/rows_2013.parquet \\
        --out /tmp/rollback_2013.json

``make demo`` registers two versions; version 2 is the one promoted to champion. Add
``--baseline 0.6329`` (its median daily AUC over 2013) to judge the rule against a representative
baseline instead of the one-day holdout's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parent))
from drift_trigger_rate import year_rows

MARGINS = (0.04, 0.06, 0.08, 0.10, 0.12, 0.15, 0.20)
ROLLBACK_DAYS = (1, 2, 3, 5)
BLEND_DROPS = (0.05, 0.10)
SEED = 2013


@dataclass(frozen=True, slots=True)
class Day:
    """One monitored day's verdict for one scenario."""

    day: str
    rows: int
    auc: float
    low: float
    high: float
    degraded: bool
    """``day_check``'s own verdict at the default margin."""


def load_rows(cache: Path | None) -> tuple[pd.DataFrame, list[str]]:
    """The year's feature rows and the model's feature columns (parquet cache when asked)."""
    if cache is not None and cache.exists():
        columns = json.loads(cache.with_suffix(".json").read_text())
        return pd.read_parquet(cache), [*columns["categorical"], *columns["numeric"]]
    rows, categorical, numeric = year_rows(cache)
    if cache is not None:
        cache.with_suffix(".json").write_text(
            json.dumps({"categorical": categorical, "numeric": numeric})
        )
    return rows, [*categorical, *numeric]


def champion_baseline(model_uri: str) -> tuple[str, float, str]:
    """The registered version behind ``models:/name/N`` or ``models:/name@alias``, its release
    baseline of AUC and where that was measured."""
    import mlflow

    from pipeline_steps.evaluation.release import release_baseline

    client = mlflow.MlflowClient()
    name, _, ref = model_uri.removeprefix("models:/").partition("/")
    if "@" in name:
        name, alias = name.split("@", 1)
        version = client.get_model_version_by_alias(name, alias)
    else:
        version = client.get_model_version(name, ref)
    found = release_baseline(dict(version.tags or {}), "auc")
    if found is None:
        raise SystemExit(f"{model_uri} records no AUC baseline; pass --baseline")
    return str(version.version), *found


def daily_auc(
    labels: np.ndarray, scores: np.ndarray, bounds: Sequence[tuple[int, int]]
) -> np.ndarray:
    return np.array([roc_auc_score(labels[a:b], scores[a:b]) for a, b in bounds])


def blend_scale(
    labels: np.ndarray,
    logit: np.ndarray,
    noise: np.ndarray,
    bounds: Sequence[tuple[int, int]],
    drop: float,
) -> float:
    """``k`` such that the median daily AUC drop of ``logit + k * noise`` is ``drop``."""
    fixed = daily_auc(labels, logit, bounds)
    low, high = 0.0, 1.0
    while np.median(fixed - daily_auc(labels, logit + high * noise, bounds)) < drop:
        high *= 2
    for _ in range(30):
        middle = (low + high) / 2
        if np.median(fixed - daily_auc(labels, logit + middle * noise, bounds)) < drop:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def check_days(
    days: Sequence[str],
    labels: np.ndarray,
    scores: np.ndarray,
    bounds: Sequence[tuple[int, int]],
    *,
    baseline: float,
    margin: float,
    resamples: int,
    confidence: float,
    seed: int,
) -> list[Day]:
    """``day_check`` on every day, as the rollback step runs it."""
    from pipeline_steps.evaluation.release import day_check
    from pipeline_steps.evaluation.shadow import DayScores

    out = []
    for day, (a, b) in zip(days, bounds, strict=True):
        check = day_check(
            DayScores(
                day=day,
                champion_version="benchmark",
                staging_version=None,
                labels=labels[a:b],
                champion=scores[a:b],
                staging=None,
                slices=pd.DataFrame(),
            ),
            metric="auc",
            baseline=baseline,
            margin=margin,
            task="binary",
            resamples=resamples,
            confidence=confidence,
            seed=seed,
        )
        out.append(
            Day(
                day=day,
                rows=check.rows,
                auc=check.value,
                low=check.interval.low,
                high=check.interval.high,
                degraded=check.degraded,
            )
        )
    return out


def degraded_at(days: Sequence[Day], baseline: float, margin: float) -> list[bool]:
    """``day_check``'s comparison for AUC at another margin, on the intervals it returned."""
    return [d.high < baseline - margin for d in days]


def firings(degraded: Sequence[bool], in_a_row: int) -> list[int]:
    """Indices of the days the rule fires, the streak restarting after each firing."""
    fired, streak = [], 0
    for index, bad in enumerate(degraded):
        streak = streak + 1 if bad else 0
        if streak >= in_a_row:
            fired.append(index)
            streak = 0
    return fired


def days_to_fire(degraded: Sequence[bool], start: int, in_a_row: int) -> int | None:
    """Monitored days from ``start`` until the rule fires (that day included); None if it
    does not fire before the year ends."""
    streak = 0
    for offset, bad in enumerate(degraded[start:]):
        streak = streak + 1 if bad else 0
        if streak >= in_a_row:
            return offset + 1
    return None


def auc_summary(days: Sequence[Day]) -> dict[str, float]:
    values = np.array([d.auc for d in days])
    highs = np.array([d.high for d in days])
    return {
        "min": round(float(values.min()), 4),
        "p5": round(float(np.percentile(values, 5)), 4),
        "median": round(float(np.median(values)), 4),
        "max": round(float(values.max()), 4),
        "upper_bound_min": round(float(highs.min()), 4),
        "upper_bound_p5": round(float(np.percentile(highs, 5)), 4),
        "upper_bound_median": round(float(np.median(highs)), 4),
    }


def reaction(
    days: Sequence[Day], starts: Sequence[int], baseline: float, margins: Sequence[float]
) -> dict[str, dict[str, object]]:
    """Days to fire from each start, per margin and rollback_days."""
    out: dict[str, dict[str, object]] = {}
    for margin in margins:
        degraded = degraded_at(days, baseline, margin)
        for in_a_row in ROLLBACK_DAYS:
            counts = [days_to_fire(degraded, s, in_a_row) for s in starts]
            fired = [c for c in counts if c is not None]
            out[f"margin={margin:g},days={in_a_row}"] = {
                "per_start": counts,
                "fired": len(fired),
                "starts": len(counts),
                "median": float(np.median(fired)) if fired else None,
                "max": max(fired) if fired else None,
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-uri", default="models:/flight_delay@champion")
    parser.add_argument("--baseline", type=float, help="override the version's AUC baseline")
    parser.add_argument("--rows-cache", type=Path, help="parquet cache of the year's feature rows")
    parser.add_argument("--out", type=Path, help="write the summary and per-day verdicts here")
    args = parser.parse_args()

    from pipeline_steps.core.settings import load_settings
    from pipeline_steps.core.tracking import connect
    from pipeline_steps.domain.flights import DOMAIN
    from pipeline_steps.steps.monitor import scorer

    settings = load_settings()
    evaluate, release = settings.evaluate, settings.release
    started = time.perf_counter()
    rows, features = load_rows(args.rows_cache)
    rows = rows.sort_values([DOMAIN.date_column, DOMAIN.key], kind="stable").reset_index(drop=True)
    connect(settings.mlflow)
    version, baseline, source = champion_baseline(args.model_uri)
    if args.baseline is not None:
        baseline, source = args.baseline, "--baseline"
    predict: Callable[[pd.DataFrame], np.ndarray] = scorer(args.model_uri, features)
    scores = predict(rows)
    labels = rows[DOMAIN.label].to_numpy(dtype=np.int64)
    day_of = rows[DOMAIN.date_column].to_numpy()
    unique, first = np.unique(day_of, return_index=True)
    days = [str(d) for d in unique]
    bounds = list(zip(first.tolist(), [*first[1:].tolist(), len(rows)], strict=True))
    starts = [i for i, d in enumerate(days) if d.endswith("-01")]
    scored_s = time.perf_counter() - started

    rng = np.random.default_rng(SEED)
    permuted = scores.copy()
    for a, b in bounds:
        permuted[a:b] = rng.permutation(permuted[a:b])
    clipped = np.clip(scores, 1e-6, 1 - 1e-6)
    logit = np.log(clipped / (1 - clipped))
    noise = rng.standard_normal(len(scores))
    scenarios: dict[str, np.ndarray] = {"fixed": scores, "permuted": permuted}
    scales = {}
    for drop in BLEND_DROPS:
        k = blend_scale(labels, logit, noise, bounds, drop)
        scales[f"blend_{drop:g}"] = round(k, 4)
        scenarios[f"blend_{drop:g}"] = logit + k * noise

    checked: dict[str, list[Day]] = {}
    check_started = time.perf_counter()
    for name, values in scenarios.items():
        checked[name] = check_days(
            days,
            labels,
            values,
            bounds,
            baseline=baseline,
            margin=release.rollback_margin,
            resamples=evaluate.resamples,
            confidence=evaluate.confidence,
            seed=evaluate.seed,
        )
        own = [d.degraded for d in checked[name]]
        assert own == degraded_at(checked[name], baseline, release.rollback_margin), name
    check_s = time.perf_counter() - check_started

    fixed = checked["fixed"]
    false_alarms: dict[str, dict[str, object]] = {}
    for margin in MARGINS:
        degraded = degraded_at(fixed, baseline, margin)
        for in_a_row in ROLLBACK_DAYS:
            fired = [fixed[i].day for i in firings(degraded, in_a_row)]
            months: dict[str, int] = {}
            for day in fired:
                months[day[:7]] = months.get(day[:7], 0) + 1
            false_alarms[f"margin={margin:g},days={in_a_row}"] = {
                "degraded_days": sum(degraded),
                "firings": len(fired),
                "fired_on": fired,
                "by_month": months,
            }
    quiet = [m for m in MARGINS if not false_alarms[f"margin={m:g},days=3"]["firings"]]
    fixed_auc = np.array([d.auc for d in fixed])
    summary = {
        "model_uri": args.model_uri,
        "version": version,
        "baseline": baseline,
        "baseline_source": source,
        "settings": {
            "resamples": evaluate.resamples,
            "confidence": evaluate.confidence,
            "seed": evaluate.seed,
            "rollback_margin": release.rollback_margin,
            "rollback_days": release.rollback_days,
        },
        "days": len(days),
        "rows": len(rows),
        "starts": [days[s] for s in starts],
        "daily_auc": {name: auc_summary(checked[name]) for name in checked},
        "median_daily_drop": {
            name: round(float(np.median(fixed_auc - np.array([d.auc for d in checked[name]]))), 4)
            for name in checked
            if name != "fixed"
        },
        "blend_scale_k": scales,
        "false_alarms": false_alarms,
        "smallest_quiet_margin_at_3_days": quiet[0] if quiet else None,
        "reaction": {
            name: reaction(checked[name], starts, baseline, MARGINS)
            for name in checked
            if name != "fixed"
        },
        "seconds": {"rows_and_scores": round(scored_s, 1), "day_checks": round(check_s, 1)},
    }
    print_tables(summary)
    if args.out is not None:
        per_day = {name: [vars_of(d) for d in values] for name, values in checked.items()}
        args.out.write_text(json.dumps({"summary": summary, "days": per_day}, indent=1))


def vars_of(day: Day) -> dict[str, object]:
    return {f: getattr(day, f) for f in Day.__slots__}


def print_tables(summary: dict) -> None:
    print(
        f"champion {summary['model_uri']} (version {summary['version']}), baseline AUC "
        f"{summary['baseline']:.4f} ({summary['baseline_source']}), {summary['days']} days, "
        f"{summary['rows']} rows"
    )
    print("\ndaily AUC         min     p5  median    max | upper bound: min     p5  median")
    for name, s in summary["daily_auc"].items():
        print(
            f"  {name:<12} {s['min']:6.4f} {s['p5']:6.4f} {s['median']:6.4f} {s['max']:6.4f} |"
            f"              {s['upper_bound_min']:6.4f} {s['upper_bound_p5']:6.4f} "
            f"{s['upper_bound_median']:6.4f}"
        )
    print(f"median daily drop: {summary['median_daily_drop']}, blend k: {summary['blend_scale_k']}")
    print("\nfixed champion: degraded days / firings over 2013")
    print("  margin  " + "  ".join(f"days={n}" for n in ROLLBACK_DAYS))
    for margin in MARGINS:
        cells = [summary["false_alarms"][f"margin={margin:g},days={n}"] for n in ROLLBACK_DAYS]
        print(
            f"  {margin:<6g}  "
            + "  ".join(f"{c['degraded_days']:>3}/{c['firings']:<3}" for c in cells)
        )
    print(f"smallest quiet margin at 3 days: {summary['smallest_quiet_margin_at_3_days']}")
    for name, table in summary["reaction"].items():
        print(f"\n{name}: days to fire from the 1st of each month, median/max (fired of starts)")
        print("  margin  " + "  ".join(f"days={n:<8}" for n in ROLLBACK_DAYS))
        for margin in MARGINS:
            cells = [table[f"margin={margin:g},days={n}"] for n in ROLLBACK_DAYS]
            print(
                f"  {margin:<6g}  "
                + "  ".join(
                    f"{_num(c['median'])}/{_num(c['max'])} ({c['fired']}/{c['starts']})".ljust(13)
                    for c in cells
                )
            )


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


if __name__ == "__main__":
    main()
