"""The shipped network against the linear baseline, day after day, on frozen holdouts.

For every holdout day of a domain whose days are seeded (``trainyard seed``), the features,
train and evaluate steps run as the daily pipeline runs them (the domain's settings, the
defaults elsewhere, each day its own run and frozen holdout). Each day's evaluation scores the
challenger and the linear baseline (a logistic regression on the same features) on the same
holdout; the row per day is their log losses, the paired-bootstrap difference (challenger minus
baseline) and what the gate decides with ``gate.baselines_must_beat: [linear]``, the default,
and without it. The summary gives the median and the mean difference over the days, the days
the network wins, and the log loss of every holdout row pooled.

    .venv/bin/python benchmarks/mlp_vs_linear.py --home /tmp/flights-home \\
        --config examples/flight_delay/settings.yaml --start 2013-06-01 --days 20 \\
        --out /tmp/flights-mlp.json

Days without rows (a survey domain's nights off) are skipped; ``--dates`` names the holdout
days instead (a domain whose holdout spans several days judges days far enough apart that their
holdouts do not overlap). ``--set SECTION.KEY=VALUE``
compares other training settings on the same days (a separate run id per setting, so each
trains afresh).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path
from typing import Any


def run_day(settings: Any, day: date, tag: str) -> dict[str, Any] | None:
    """Features, train and evaluate for ``day``; its row, or None when the day has no rows."""
    from pipeline_steps.core.context import RunContext
    from pipeline_steps.core.errors import EmptyDay
    from pipeline_steps.core.manifests import EvaluateManifest, TrainManifest
    from pipeline_steps.core.tasks import task_spec
    from pipeline_steps.core.trigger import Trigger
    from pipeline_steps.evaluation.gate import gate
    from pipeline_steps.steps.registry import step_function

    ctx = RunContext(
        run_id=f"linear_{tag}__{day.isoformat()}",
        logical_date=day,
        settings=settings,
        trigger=Trigger(kind="manual", run_type="manual"),
    )
    ctx.record_trigger()
    try:
        for step in ("features", "train", "evaluate"):
            step_function(step)(ctx)
    except EmptyDay:
        return None
    evaluation = ctx.upstream(EvaluateManifest)
    trained = ctx.upstream(TrainManifest)
    linear = next(
        b for b in evaluation.baselines if b.name == task_spec(ctx.domain.task).linear_baseline
    )
    difference = linear.differences["log_loss"]
    held = gate(evaluation, settings.gate, settings.evaluate.confidence)
    free = gate(
        evaluation, replace(settings.gate, baselines_must_beat=()), settings.evaluate.confidence
    )
    return {
        "day": day.isoformat(),
        "rows": evaluation.holdout.rows,
        "challenger": round(evaluation.challenger.metrics.log_loss, 4),
        "linear": round(linear.metrics.log_loss, 4),
        "difference": round(difference.estimate, 4),
        "low": round(difference.low, 4),
        "high": round(difference.high, 4),
        "gate": held.outcome,
        "gate_without_linear": free.outcome,
        "refused_for_linear": [r for r in held.reasons if "baselines_must_beat" in r],
        "temperature": trained.calibration.temperature if trained.calibration else None,
        "epochs": trained.epochs,
        "steps": trained.steps,
    }


def summarise(rows: list[dict[str, Any]], minutes: float, overrides: list[str]) -> dict[str, Any]:
    import numpy as np

    differences = [r["difference"] for r in rows]
    rows_in_all = sum(r["rows"] for r in rows)
    # The mean difference's interval over days (days resampled: a day's rows move together).
    resampled = np.random.default_rng(0).choice(differences, (10_000, len(differences)))
    low, high = np.quantile(resampled.mean(axis=1), [0.025, 0.975])
    return {
        "days": len(rows),
        "minutes": round(minutes, 1),
        "settings": overrides,
        "median_difference": round(statistics.median(differences), 4),
        "mean_difference": round(statistics.fmean(differences), 4),
        "mean_difference_95": [round(float(low), 4), round(float(high), 4)],
        "network_better_days": sum(d < 0 for d in differences),
        "pooled_challenger": round(sum(r["challenger"] * r["rows"] for r in rows) / rows_in_all, 4),
        "pooled_linear": round(sum(r["linear"] * r["rows"] for r in rows) / rows_in_all, 4),
        "refused_for_linear": sum(bool(r["refused_for_linear"]) for r in rows),
        "passed_with_linear": sum(r["gate"] == "pass" for r in rows),
        "passed_without_linear": sum(r["gate_without_linear"] == "pass" for r in rows),
    }


def _days(start: date, end: date) -> Iterator[date]:
    day = start
    while day <= end:
        yield day
        day += timedelta(days=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True, help="TRAINYARD_HOME, days seeded")
    parser.add_argument("--config", type=Path, required=True, help="the domain's settings file")
    parser.add_argument("--start", type=date.fromisoformat)
    parser.add_argument("--days", type=int, default=20, help="holdout days with rows to judge")
    parser.add_argument("--end", type=date.fromisoformat, help="last day to look at")
    parser.add_argument(
        "--dates",
        type=lambda text: [date.fromisoformat(d) for d in text.split(",")],
        help="judge these holdout days (comma-separated) instead of --start/--days",
    )
    parser.add_argument("--tag", default="default", help="names the runs of this setting")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--set", action="append", default=[], help="settings overrides")
    args = parser.parse_args()
    os.environ["TRAINYARD_HOME"] = str(args.home)
    from pipeline_steps.core.settings import load_settings

    settings = load_settings(args.config, overrides=args.set)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    for day in args.dates or _days(args.start, args.end or date.max):
        if len(rows) == (len(args.dates) if args.dates else args.days):
            break
        row = run_day(settings, day, args.tag)
        if row is not None:
            rows.append(row)
            print(json.dumps(row), flush=True)
    summary = summarise(rows, (time.perf_counter() - started) / 60, args.set)
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "days": rows}, indent=2))


if __name__ == "__main__":
    main()
