"""How often the automatic rollback fires over 2013 with healthy models, and how fast it reacts to
a bad champion.

The rule is the release path's (``pipeline_steps.evaluation.release.day_check`` and
``consecutive_degraded``, as ``pipeline_steps.steps.release.rollback_check`` applies them): on
each monitored day the champion and the version it replaced score the same rows; the paired
bootstrap interval of champion minus replaced AUC (``evaluate.resamples``, ``evaluate.confidence``,
``evaluate.seed``) makes the day

- *degraded* when its upper bound is below ``-margin``,
- *cleared* when its lower bound is at or above ``-margin``,
- *inconclusive* otherwise.

The rollback is due when the latest ``SHOWN_DAYS`` (7) days of the champion hold
``release.rollback_days`` degraded days since their last cleared one (inconclusive days neither
count nor break the run).

Every day of 2013 is one monitored day: its flights, as ``year_rows`` of
``benchmarks/drift_trigger_rate.py`` builds them (the same Feast join the pipeline uses), scored
by both registered versions.

- **Healthy pairs** (false firings): ``v<champion>_over_v<replaced>`` (``--champion`` in place
  of ``--replaced``) and the reverse pair. The pair is fixed all year; each firing is counted
  and the champion's days start again after it, as after a rollback. Any firing is a false
  alarm.
- **Degraded champions** against the healthy ``--champion`` as the replaced version, each scored
  on every day and put in place on the 1st of each month; the count is the monitored days until
  the rule fires (the day it fires included):

  - ``permuted``: the healthy scores shuffled at random within each day (seeded), a model with
    no information (AUC about 0.5);
  - ``blend_<d>``: ``logit(p) + k * e`` with ``e ~ N(0, 1)`` drawn once per row (seeded) and
    ``k`` found by bisection so that the median over 2013 of the daily AUC drop (healthy minus
    blended) is ``d``.

``day_check`` runs once per day and scenario at ``release.rollback_margin``; the other margins
apply the same comparisons to the interval it returned.

    TRAINYARD_HOME=/work/main/.trainyard .venv/bin/python benchmarks/rollback_rate.py \\
        --champion models:/flight_delay/2 --replaced models:/flight_delay/1 \\
        --rows-cache /tmp/rows_2013.parquet --out /tmp/rollback_2013.json

``make demo`` registers the two versions (1 trained for 2013-06-01, 2 for 2013-06-02).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parent))
from drift_trigger_rate import year_rows

if TYPE_CHECKING:
    from pipeline_steps.core.manifests import DayCheck

MARGINS = (0.0, 0.01, 0.02, 0.03, 0.05)
ROLLBACK_DAYS = (1, 2, 3, 5)
BLEND_DROPS = (0.05, 0.10)
SEED = 2013


@dataclass(frozen=True, slots=True)
class Pair:
    """A champion's scores and those of the version it replaced, on every row of the year."""

    champion_version: str
    previous_version: str
    champion: np.ndarray
    previous: np.ndarray


@dataclass(frozen=True, slots=True)
class Year:
    """The year's rows, one monitored day per date."""

    labels: np.ndarray
    days: list[str]
    bounds: list[tuple[int, int]]
    """Row range of each day."""


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


def registered(model_uri: str) -> tuple[str, str, float]:
    """The version behind ``models:/name/N``, its logical date and its holdout AUC as recorded
    (``trainyard.challenger_auc``), to check that the benchmark scores as the pipeline did."""
    import mlflow

    name, _, ref = model_uri.removeprefix("models:/").partition("/")
    version = mlflow.MlflowClient().get_model_version(name, ref)
    tags = dict(version.tags or {})
    recorded = float(tags["trainyard.challenger_auc"])
    return str(version.version), tags["trainyard.logical_date"], recorded


def daily_auc(year: Year, scores: np.ndarray) -> np.ndarray:
    return np.array([roc_auc_score(year.labels[a:b], scores[a:b]) for a, b in year.bounds])


def blend_scale(year: Year, logit: np.ndarray, noise: np.ndarray, drop: float) -> float:
    """``k`` such that the median daily AUC drop of ``logit + k * noise`` is ``drop``."""
    healthy = daily_auc(year, logit)

    def median_drop(k: float) -> float:
        return float(np.median(healthy - daily_auc(year, logit + k * noise)))

    low, high = 0.0, 1.0
    while median_drop(high) < drop:
        high *= 2
    for _ in range(30):
        middle = (low + high) / 2
        if median_drop(middle) < drop:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def check_days(
    year: Year, pair: Pair, *, margin: float, resamples: int, confidence: float, seed: int
) -> list[DayCheck]:
    """``day_check`` on every day, as the rollback step runs it."""
    from pipeline_steps.evaluation.release import day_check
    from pipeline_steps.evaluation.shadow import DayScores

    return [
        day_check(
            DayScores(
                day=day,
                champion_version=pair.champion_version,
                staging_version=None,
                labels=year.labels[a:b],
                champion=pair.champion[a:b],
                staging=None,
                slices=pd.DataFrame(),
                previous_version=pair.previous_version,
                previous=pair.previous[a:b],
            ),
            metric="auc",
            margin=margin,
            task="binary",
            resamples=resamples,
            confidence=confidence,
            seed=seed,
        )
        for day, (a, b) in zip(year.days, year.bounds, strict=True)
    ]


def at_margin(checks: Sequence[DayCheck], margin: float) -> list[DayCheck]:
    """``day_check``'s verdicts for AUC at another margin, on the intervals it returned."""
    return [
        replace(
            c,
            degraded=bool(c.difference.high < -margin),
            cleared=bool(c.difference.low >= -margin),
        )
        for c in checks
    ]


def due(checks: Sequence[DayCheck], since: int, today: int, in_a_row: int) -> bool:
    """Whether the rollback step, run on ``today``, rolls back a champion in place since
    ``since``: its latest ``SHOWN_DAYS`` days hold ``in_a_row`` degraded ones."""
    from pipeline_steps.evaluation.release import consecutive_degraded
    from pipeline_steps.steps.release import SHOWN_DAYS

    window = list(checks[max(since, today - SHOWN_DAYS + 1) : today + 1])
    return consecutive_degraded(window) >= in_a_row


def firings(checks: Sequence[DayCheck], in_a_row: int) -> list[int]:
    """Indices of the days the rule fires, the champion's days starting again after each."""
    fired: list[int] = []
    since = 0
    for today in range(len(checks)):
        if due(checks, since, today, in_a_row):
            fired.append(today)
            since = today + 1
    return fired


def days_to_fire(checks: Sequence[DayCheck], start: int, in_a_row: int) -> int | None:
    """Monitored days from ``start`` until the rule fires (that day included); None if it
    does not fire before the year ends."""
    for today in range(start, len(checks)):
        if due(checks, start, today, in_a_row):
            return today - start + 1
    return None


def _stats(values: np.ndarray) -> dict[str, float]:
    return {
        "min": round(float(values.min()), 4),
        "p5": round(float(np.percentile(values, 5)), 4),
        "median": round(float(np.median(values)), 4),
        "p95": round(float(np.percentile(values, 95)), 4),
        "max": round(float(values.max()), 4),
    }


def difference_summary(checks: Sequence[DayCheck]) -> dict[str, Any]:
    """The daily paired AUC difference (champion minus replaced) and its interval."""
    estimate = np.array([c.difference.estimate for c in checks])
    width = np.array([c.difference.high - c.difference.low for c in checks])
    return {
        "estimate": _stats(estimate),
        "upper_bound": _stats(np.array([c.difference.high for c in checks])),
        "interval_width": _stats(width),
        "champion_auc": _stats(np.array([c.champion for c in checks])),
        "replaced_auc": _stats(np.array([c.previous for c in checks])),
    }


def false_alarms(checks: Sequence[DayCheck]) -> dict[str, dict[str, Any]]:
    """Per margin and rollback_days: degraded, cleared and inconclusive days, and the firings."""
    out: dict[str, dict[str, Any]] = {}
    for margin in MARGINS:
        judged = at_margin(checks, margin)
        degraded = sum(c.degraded for c in judged)
        cleared = sum(c.cleared for c in judged)
        for in_a_row in ROLLBACK_DAYS:
            out[f"margin={margin:g},days={in_a_row}"] = {
                "degraded_days": degraded,
                "cleared_days": cleared,
                "inconclusive_days": len(judged) - degraded - cleared,
                "firings": len(fired := firings(judged, in_a_row)),
                "fired_on": [judged[i].day for i in fired],
            }
    return out


def reaction(checks: Sequence[DayCheck], starts: Sequence[int]) -> dict[str, dict[str, Any]]:
    """Days to fire from each start, per margin and rollback_days."""
    out: dict[str, dict[str, Any]] = {}
    for margin in MARGINS:
        judged = at_margin(checks, margin)
        for in_a_row in ROLLBACK_DAYS:
            counts = [days_to_fire(judged, s, in_a_row) for s in starts]
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
    parser.add_argument("--champion", default="models:/flight_delay/2", help="models:/name/N")
    parser.add_argument("--replaced", default="models:/flight_delay/1", help="models:/name/N")
    parser.add_argument("--rows-cache", type=Path, help="parquet cache of the year's feature rows")
    parser.add_argument("--out", type=Path, help="write the summary and per-day checks here")
    args = parser.parse_args()

    from flight_delay.domain import DOMAIN

    from pipeline_steps.core.settings import load_settings
    from pipeline_steps.core.tracking import connect
    from pipeline_steps.steps.monitor import scorer

    settings = load_settings()
    evaluate, release = settings.evaluate, settings.release
    started = time.perf_counter()
    rows, features = load_rows(args.rows_cache)
    rows = rows.sort_values([DOMAIN.date_column, DOMAIN.key], kind="stable").reset_index(drop=True)
    connect(settings.mlflow)
    day_of = rows[DOMAIN.date_column].to_numpy()
    unique, first = np.unique(day_of, return_index=True)
    year = Year(
        labels=rows[DOMAIN.label].to_numpy(dtype=np.int64),
        days=[str(d) for d in unique],
        bounds=list(zip(first.tolist(), [*first[1:].tolist(), len(rows)], strict=True)),
    )
    versions: dict[str, str] = {}
    scores: dict[str, np.ndarray] = {}
    scoring_check: dict[str, dict[str, Any]] = {}
    for role, uri in (("champion", args.champion), ("replaced", args.replaced)):
        version, holdout_day, recorded = registered(uri)
        versions[role] = version
        scores[role] = scorer(uri, features)(rows)
        a, b = year.bounds[year.days.index(holdout_day)]
        scoring_check[version] = {
            "holdout_day": holdout_day,
            "recorded_auc": recorded,
            "benchmark_auc": round(float(roc_auc_score(year.labels[a:b], scores[role][a:b])), 6),
        }
    starts = [i for i, d in enumerate(year.days) if d.endswith("-01")]
    scored_s = time.perf_counter() - started

    healthy, other = scores["champion"], scores["replaced"]
    rng = np.random.default_rng(SEED)
    permuted = healthy.copy()
    for a, b in year.bounds:
        permuted[a:b] = rng.permutation(permuted[a:b])
    clipped = np.clip(healthy, 1e-6, 1 - 1e-6)
    logit = np.log(clipped / (1 - clipped))
    noise = rng.standard_normal(len(healthy))
    one, two = versions["champion"], versions["replaced"]
    forward, reverse = f"v{one}_over_v{two}", f"v{two}_over_v{one}"
    pairs = {
        forward: Pair(one, two, healthy, other),
        reverse: Pair(two, one, other, healthy),
        "permuted": Pair("permuted", one, permuted, healthy),
    }
    scales: dict[str, float] = {}
    for drop in BLEND_DROPS:
        k = blend_scale(year, logit, noise, drop)
        scales[f"blend_{drop:g}"] = round(k, 4)
        pairs[f"blend_{drop:g}"] = Pair(f"blend_{drop:g}", one, logit + k * noise, healthy)

    checked: dict[str, list[DayCheck]] = {}
    check_started = time.perf_counter()
    for name, pair in pairs.items():
        checked[name] = check_days(
            year,
            pair,
            margin=release.rollback_margin,
            resamples=evaluate.resamples,
            confidence=evaluate.confidence,
            seed=evaluate.seed,
        )
        own = [(c.degraded, c.cleared) for c in checked[name]]
        again = at_margin(checked[name], release.rollback_margin)
        assert own == [(c.degraded, c.cleared) for c in again], name
    check_s = time.perf_counter() - check_started

    alarms = {name: false_alarms(checked[name]) for name in (forward, reverse)}
    quiet = [
        m for m in MARGINS if not any(a[f"margin={m:g},days=3"]["firings"] for a in alarms.values())
    ]
    summary: dict[str, Any] = {
        "champion": args.champion,
        "replaced": args.replaced,
        "versions": versions,
        "scoring_check": scoring_check,
        "settings": {
            "resamples": evaluate.resamples,
            "confidence": evaluate.confidence,
            "seed": evaluate.seed,
            "rollback_margin": release.rollback_margin,
            "rollback_days": release.rollback_days,
        },
        "days": len(year.days),
        "rows": len(rows),
        "starts": [year.days[s] for s in starts],
        "difference": {name: difference_summary(checked[name]) for name in checked},
        "blend_scale_k": scales,
        "false_alarms": alarms,
        "smallest_quiet_margin_at_3_days": quiet[0] if quiet else None,
        "reaction": {
            name: reaction(checked[name], starts) for name in checked if name not in alarms
        },
        "seconds": {"rows_and_scores": round(scored_s, 1), "day_checks": round(check_s, 1)},
    }
    print_tables(summary)
    if args.out is not None:
        per_day = {
            name: [
                {
                    "day": c.day,
                    "rows": c.rows,
                    "champion": c.champion,
                    "replaced": c.previous,
                    "estimate": c.difference.estimate,
                    "low": c.difference.low,
                    "high": c.difference.high,
                }
                for c in values
            ]
            for name, values in checked.items()
        }
        args.out.write_text(json.dumps({"summary": summary, "days": per_day}, indent=1))


def print_tables(summary: dict[str, Any]) -> None:
    print(
        f"champion {summary['champion']}, replaced {summary['replaced']}: {summary['days']} days, "
        f"{summary['rows']} rows; scoring check {summary['scoring_check']}"
    )
    print(f"settings {summary['settings']}, blend k {summary['blend_scale_k']}")
    print("\n                 champion - replaced AUC: min     p5  median     p95     max | width")
    for name, s in summary["difference"].items():
        e, w = s["estimate"], s["interval_width"]
        print(
            f"  {name:<12} {'':<24}{e['min']:+.4f} {e['p5']:+.4f} {e['median']:+.4f} "
            f"{e['p95']:+.4f} {e['max']:+.4f} | {w['median']:.4f}   "
            f"(champion median {s['champion_auc']['median']:.4f}, "
            f"replaced {s['replaced_auc']['median']:.4f})"
        )
    for name, table in summary["false_alarms"].items():
        print(f"\n{name}: degraded/cleared/inconclusive days, firings per rollback_days")
        print("  margin  days       " + "  ".join(f"days={n}" for n in ROLLBACK_DAYS))
        for margin in MARGINS:
            cells = [table[f"margin={margin:g},days={n}"] for n in ROLLBACK_DAYS]
            c = cells[0]
            print(
                f"  {margin:<6g}  {c['degraded_days']:>3}/{c['cleared_days']:>3}/"
                f"{c['inconclusive_days']:>3}  "
                + "  ".join(f"{x['firings']:>6}" for x in cells)
                + f"   3 days: {table[f'margin={margin:g},days=3']['fired_on']}"
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
