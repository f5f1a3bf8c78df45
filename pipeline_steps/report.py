"""Readable summaries of recorded runs, from the step manifests in ``runs/<run>/``."""

from __future__ import annotations

from datetime import date
from typing import Any

from pipeline_steps.lake import Lake
from pipeline_steps.settings import Settings

SEED_PREFIX = "seed__"
STEPS = ("ingest", "validate", "features", "train", "evaluate", "promote")


def recorded_runs(lake: Lake) -> list[dict[str, dict[str, Any]]]:
    """Every run folder's step manifests, oldest first (by when ingest was recorded)."""
    if not lake.exists("runs"):
        return []
    runs = []
    for folder in lake.fs.ls(lake.path("runs"), detail=False):
        name = folder.rstrip("/").rsplit("/", 1)[-1]
        steps = {
            s: lake.read_json("runs", name, f"{s}.json")
            for s in STEPS
            if lake.exists("runs", name, f"{s}.json")
        }
        # History loaded by `trainyard seed` is not a pipeline run.
        if "ingest" in steps and not name.startswith(SEED_PREFIX):
            runs.append(steps)
    return sorted(runs, key=lambda r: r["ingest"].get("recorded_at", ""))


def _metrics(metrics: dict[str, Any] | None) -> str:
    if not metrics:
        return "-"
    return ", ".join(
        f"{k} {metrics[k]:.4f}" for k in ("auc", "log_loss", "accuracy") if k in metrics
    )


def summarise(run: dict[str, dict[str, Any]]) -> list[str]:
    ingest = run["ingest"]
    lines = [
        f"run {ingest.get('run_id', '?')}  (logical date {ingest['logical_date']})",
        f"  rows ingested        {ingest['rows']} flights",
    ]
    if "validate" in run:
        checks = sum(d["evaluated"] for d in run["validate"]["datasets"].values())
        lines.append(f"  validation           {run['validate']['verdict']} ({checks} expectations)")
        drift = run["validate"].get("drift")
        if drift:
            verdict = (
                ("detected on " + ", ".join(drift["crossed"]))
                if drift["drift_detected"]
                else "none above thresholds"
            )
            lines.append(
                f"  drift                {verdict} ({drift['reference']}; {drift['report']})"
            )
    else:
        lines.append("  validation           not passed (see reports/validation/)")
    if "features" in run:
        sets = run["features"]["sets"]
        lines.append(
            f"  training set         {sets['train']['rows']} rows over "
            f"{len(run['features']['train_days'])} days; holdout {sets['holdout']['rows']}"
            f" rows ({run['features']['holdout_day']})"
        )
    if "train" in run:
        m = run["train"]["metrics"]
        lines.append(
            f"  training             {run['train']['epochs']} epochs, val AUC "
            f"{m['val_auc']:.4f}, val loss {m['val_loss']:.4f} "
            f"(MLflow run {run['train']['mlflow_run_id']})"
        )
    if "evaluate" in run:
        evaluation = run["evaluate"]
        champion = evaluation["champion"]
        lines.append(f"  challenger           {_metrics(evaluation['challenger']['metrics'])}")
        lines.append(
            "  champion             "
            + (
                f"v{champion['version']}: {_metrics(champion['metrics'])}"
                if champion
                else "none yet"
            )
        )
    if "promote" in run:
        p = run["promote"]
        lines.append(f"  decision             {p['decision'].upper()}: {'; '.join(p['reasons'])}")
        lines.append(
            f"  registered           {p['registered_model']} version {p['version']}; "
            f"champion is now version {p['champion_after']}"
        )
    return lines


def print_report(settings: Settings, logical_date: date | None = None) -> None:
    """Print the latest run of ``logical_date`` (or of every date) to stdout."""
    runs = recorded_runs(Lake(settings.lake.root))
    if logical_date:
        runs = [r for r in runs if r["ingest"]["logical_date"] == logical_date.isoformat()]
    latest: dict[str, dict[str, dict[str, Any]]] = {}
    for run in runs:
        latest[run["ingest"]["logical_date"]] = run
    if not latest:
        print("no recorded runs" + (f" for {logical_date}" if logical_date else ""))
        return
    for _, run in sorted(latest.items()):
        print("\n".join(summarise(run)))
        print()
