"""Readable summaries of recorded runs, from the step manifests in ``runs/<run>/``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date

from pipeline_steps.lake import Lake
from pipeline_steps.manifests import (
    EvaluateManifest,
    FeaturesManifest,
    HoldoutMetrics,
    IngestManifest,
    M,
    ManifestError,
    PromoteManifest,
    TrainManifest,
    Trigger,
    ValidateManifest,
    load_manifest,
    load_record,
)
from pipeline_steps.settings import Settings

log = logging.getLogger(__name__)
SEED_PREFIX = "seed__"


@dataclass(frozen=True, kw_only=True)
class RecordedRun:
    """The manifests one pipeline run recorded, as far as it got."""

    ingest: IngestManifest
    validate: ValidateManifest | None = None
    features: FeaturesManifest | None = None
    train: TrainManifest | None = None
    evaluate: EvaluateManifest | None = None
    promote: PromoteManifest | None = None
    trigger: Trigger | None = None


def read_run(lake: Lake, name: str) -> RecordedRun | None:
    """The manifests of ``runs/<name>/``; None when ingest never completed there."""

    def load(cls: type[M]) -> M | None:
        if not lake.exists("runs", name, f"{cls.STEP}.json"):
            return None
        payload = lake.read_json("runs", name, f"{cls.STEP}.json")
        return load_manifest(cls, payload, lake.path("runs", name, f"{cls.STEP}.json"))

    ingest = load(IngestManifest)
    if ingest is None:
        return None
    return RecordedRun(
        ingest=ingest,
        validate=load(ValidateManifest),
        features=load(FeaturesManifest),
        train=load(TrainManifest),
        evaluate=load(EvaluateManifest),
        promote=load(PromoteManifest),
        trigger=load_record(Trigger, lake.read_json("runs", name, "trigger.json"), name)
        if lake.exists("runs", name, "trigger.json")
        else None,
    )


def recorded_runs(lake: Lake) -> list[RecordedRun]:
    """Every run folder's step manifests, oldest first (by when ingest was recorded). A run
    whose manifests this version cannot read is left out with a warning naming the file."""
    if not lake.exists("runs"):
        return []
    runs = []
    for folder in lake.fs.ls(lake.path("runs"), detail=False):
        name = folder.rstrip("/").rsplit("/", 1)[-1]
        if name.startswith(SEED_PREFIX):  # history loaded by `trainyard seed`, not a run
            continue
        try:
            run = read_run(lake, name)
        except ManifestError as exc:
            log.warning("left out of the report: %s", exc)
            continue
        if run is not None:
            runs.append(run)
    return sorted(runs, key=lambda r: r.ingest.recorded_at or "")


def _metrics(metrics: HoldoutMetrics) -> str:
    return (
        f"auc {metrics.auc:.4f}, log_loss {metrics.log_loss:.4f}, accuracy {metrics.accuracy:.4f}"
    )


def summarise(run: RecordedRun, rows_label: str = "flights") -> list[str]:
    """The run's lines: rows ingested (counted in ``rows_label``), then what each step did."""
    ingest = run.ingest
    lines = [
        f"run {ingest.run_id or '?'}  (logical date {ingest.logical_date})",
    ]
    if run.trigger:
        lines.append(f"  trigger              {run.trigger.describe()}")
        lines.append(f"  settings             {run.trigger.describe_overrides()}")
    lines.append(f"  rows ingested        {ingest.rows} {rows_label}")
    if run.validate:
        checks = sum(d.evaluated for d in run.validate.datasets.values())
        cached = all(d.status == "cached" for d in run.validate.datasets.values())
        how = (
            "cached: these partitions were validated before" if cached else f"{checks} expectations"
        )
        lines.append(f"  validation           {run.validate.verdict} ({how})")
        drift = run.validate.drift
        verdict = (
            ("detected on " + ", ".join(drift.crossed))
            if drift.drift_detected
            else "none above thresholds"
        )
        lines.append(f"  drift of the day     {verdict} ({drift.reference}; {drift.report})")
    else:
        lines.append("  validation           not passed (see reports/validation/)")
    if run.features:
        sets = run.features.sets
        lines.append(
            f"  training set         {sets.train.rows} rows over "
            f"{len(run.features.train_days)} days; holdout {sets.holdout.rows}"
            f" rows ({run.features.holdout_day})"
        )
    if run.train:
        m = run.train.metrics
        lines.append(
            f"  training             {run.train.epochs} epochs, val AUC "
            f"{m['val_auc']:.4f}, val loss {m['val_loss']:.4f} "
            f"(MLflow run {run.train.mlflow_run_id})"
        )
        tuned = run.train.tuned_from
        if tuned is not None:
            values = ", ".join(f"{k}={v}" for k, v in sorted(tuned.params.items()))
            lines.append(
                f"  tuned parameters     trial {tuned.trial} of study {tuned.study} "
                f"(validation loss {tuned.value:.5f}): {values}"
            )
    if run.evaluate:
        champion = run.evaluate.champion
        lines.append(f"  challenger           {_metrics(run.evaluate.challenger.metrics)}")
        lines.append(
            "  champion             "
            + (f"v{champion.version}: {_metrics(champion.metrics)}" if champion else "none yet")
        )
    if run.promote:
        p = run.promote
        lines.append(f"  decision             {p.decision.upper()}: {'; '.join(p.reasons)}")
        lines.append(
            f"  registered           {p.registered_model} version {p.version}; "
            + (f"champion is now version {p.champion_after}" if p.champion_after else "no champion")
        )
    return lines


def print_report(settings: Settings, logical_date: date | None = None) -> None:
    """Print the latest run of ``logical_date`` (or of every date) to stdout."""
    runs = recorded_runs(Lake(settings.lake.root))
    if logical_date:
        runs = [r for r in runs if r.ingest.logical_date == logical_date.isoformat()]
    latest = {run.ingest.logical_date: run for run in runs}
    if not latest:
        print("no recorded runs" + (f" for {logical_date}" if logical_date else ""))
        return
    for _, run in sorted(latest.items()):
        print("\n".join(summarise(run)))
        print()
