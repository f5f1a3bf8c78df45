"""Monitor step: is the window ending at D drifting away from what the champion knows?

Runs after ingest and validate of D, trains nothing. The current window (``drift.current_days``
validated days ending at D) and the reference (the champion's training days before the window,
else the trailing validated days) are turned into the model's feature rows by the same Feast
service the features step joins, in a private Feast folder (the shared offline sources belong to
training runs). The champion scores both windows: its score distribution is the prediction
signal, and its metrics on D itself are logged to the MLflow monitoring experiment, one run per
day. ``quality/calibration.py`` measures every signal against thresholds calibrated on the
reference. The verdict goes to ``reports/monitor/date=D/monitor.json`` and the manifest; emitting
the Airflow asset event (and the cooldown) is the orchestration layer's job.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date
from typing import Any

import numpy as np
import pandas as pd

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.domain import Domain, ValidatedPartitions
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.feature_store import (
    ENTITY_PIECE_ROWS,
    scratch_store,
    write_entity_rows,
)
from pipeline_steps.core.manifests import ChampionDay, MonitorManifest
from pipeline_steps.core.scoring import scorer
from pipeline_steps.engines.base import Engine, open_engine
from pipeline_steps.evaluation.metrics import holdout_metrics, mlflow_metrics
from pipeline_steps.quality.calibration import (
    Verdict,
    measure_counts,
    sensitivity,
    split_windows,
)

log = logging.getLogger(__name__)
SENSITIVITY_ROWS = 2000  # reference rows the champion's permutation sensitivity is measured on


@dataclass(frozen=True, kw_only=True, slots=True)
class Champion:
    """The production model: its registry version, what loads it, its first and last training
    day (None when its run did not record them)."""

    version: str
    model_uri: str
    window: tuple[date, date] | None


def champion_model(ctx: RunContext) -> Champion | None:
    """The champion, or None when there is none."""
    from pipeline_steps.core.tracking import champion_version, connect

    mlflow_settings = ctx.settings.mlflow
    client = connect(mlflow_settings)
    version = champion_version(client, mlflow_settings)
    if version is None:
        return None
    uri = f"models:/{mlflow_settings.registered_model}/{version.version}"
    window = training_window(client, version.run_id)
    return Champion(version=str(version.version), model_uri=uri, window=window)


def staging_model(ctx: RunContext, champion: Champion | None) -> Champion | None:
    """The staged candidate (``mlflow.staging_alias``) the monitor scores beside the champion,
    or None when there is none or no champion to shadow."""
    from pipeline_steps.core.tracking import aliased_version, connect

    cfg = ctx.settings.mlflow
    version = aliased_version(connect(cfg), cfg, cfg.staging_alias)
    if champion is None or version is None or str(version.version) == champion.version:
        return None
    uri = f"models:/{cfg.registered_model}/{version.version}"
    return Champion(version=str(version.version), model_uri=uri, window=None)


def replaced_model(ctx: RunContext, champion: Champion) -> Champion | None:
    """The version the champion replaced (the latest move to it came from there), which the
    rollback check compares it with; None for a first champion."""
    from pipeline_steps.core.tracking import connect
    from pipeline_steps.evaluation.champion import champion_moves, replaced_version

    cfg = ctx.settings.mlflow
    version, _ = replaced_version(champion_moves(connect(cfg), cfg), champion.version)
    if version is None:
        return None
    uri = f"models:/{cfg.registered_model}/{version}"
    return Champion(version=version, model_uri=uri, window=None)


def training_window(client: Any, run_id: str | None) -> tuple[date, date] | None:
    """First and last training day of a model version, as its MLflow run recorded them (None
    without a run, or for a run that did not record them)."""
    if not run_id:
        return None
    tags = client.get_run(run_id).data.tags
    if "trainyard.train_first_day" not in tags:
        return None
    return (
        date.fromisoformat(tags["trainyard.train_first_day"]),
        date.fromisoformat(tags["trainyard.train_last_day"]),
    )


def _measure(
    ctx: RunContext,
    engine: Engine,
    champion: Champion | None,
    staging: Champion | None,
    reference_days: list[date],
    current_days: list[date],
) -> tuple[Verdict, ScoredDay | None]:
    """The window's verdict and the champion's day: the window's rows joined, scored and counted
    by ``engine``; only the counts, the sensitivity sample and D's rows come back here."""
    domain, cfg, day = ctx.domain, ctx.settings.drift, ctx.logical_date
    days = [*reference_days, *current_days]
    sources, _ = domain.feature_sources(ctx.lake, days)
    labelled = ValidatedPartitions(ctx.lake, domain.labelled_dataset, days)
    features_cfg = ctx.settings.features
    with (
        engine.scratch("trainyard-monitor-") as scratch,
        scratch_store(
            features_cfg,
            sources,
            offline=engine.feast_offline,
            place=lambda folder: engine.sources_folder(folder, scratch),
            domain=domain,
        ) as store,
    ):
        parts = ((d.isoformat(), rows) for d, rows in labelled.by_batch(ENTITY_PIECE_ROWS))
        files = write_entity_rows(scratch, domain, features_cfg, parts)
        with engine.window(
            store,
            domain,
            features_cfg,
            files,
            scratch,
            reference_days=reference_days,
            current_days=current_days,
            model_uri=champion.model_uri if champion else None,
        ) as window:
            if not window.reference_rows or not window.current_rows:
                which = "reference" if not window.reference_rows else "current"
                raise StepError(f"the {which} window has no rows to measure drift on")
            columns = window.columns
            features = [*columns.categorical, *columns.numeric]
            predict, importance = window.predict, None
            if predict is not None:
                importance = sensitivity(predict, window.sample(SENSITIVITY_ROWS), features)
            verdict = measure_counts(
                window.counts,
                reference_days=reference_days,
                numeric=columns.numeric,
                categorical=columns.categorical,
                label=domain.label,
                importance=importance,
                cfg=cfg,
                task=domain.task,
            )
            champion_day = None
            if champion is not None and predict is not None:
                today = window.day(day)
                champion_day = score_day(
                    ctx, champion, staging, today, predict(today), features, verdict
                )
    return verdict, champion_day


def monitor(ctx: RunContext) -> MonitorManifest:
    """Measure the drift of the window ending at D and score the champion on D.

    Returns the manifest with every signal, what crossed, and the champion's day (None without a
    champion: then no prediction signal and every input feature may trigger). Raises
    ``StepError`` when D is not validated or the reference is too short to calibrate.
    """
    lake, day, cfg, domain = ctx.lake, ctx.logical_date, ctx.settings.drift, ctx.domain
    champion = champion_model(ctx)
    staging = staging_model(ctx, champion)
    validated = lake.partition_dates("validated", domain.labelled_dataset)
    quarantined = quarantined_days(ctx, day)
    if day in quarantined:
        raise StepError(
            f"{day} was quarantined by validation (quarantine/{domain.labelled_dataset}/"
            f"date={day}): a day that failed its checks is not measured as drift"
        )
    champion_days = None
    if champion is not None and champion.window is not None:
        first, last = champion.window
        champion_days = [d for d in validated if first <= d <= last]
    reference_days, current_days, source = split_windows(day, validated, champion_days, cfg)
    skipped = [d for d in quarantined if (reference_days or current_days)[0] <= d <= day]
    if skipped:
        log.warning(
            "monitor %s: quarantined day(s) %s left out of the windows (failed validation)",
            day,
            ", ".join(d.isoformat() for d in skipped),
        )
    with open_engine(ctx.settings.engine) as engine:
        verdict, scored = _measure(ctx, engine, champion, staging, reference_days, current_days)
    folder = f"reports/monitor/date={day.isoformat()}"
    signals = verdict.signals
    manifest = MonitorManifest(
        logical_date=day.isoformat(),
        drift_detected=verdict.drift_detected,
        crossed=[s.name for s in verdict.crossed],
        current_days=[d.isoformat() for d in current_days],
        reference_days=[d.isoformat() for d in reference_days],
        reference=source,
        signals=signals,
        champion=scored.champion if scored else None,
        report=lake.path(folder, "monitor.json"),
        quarantined_days=[d.isoformat() for d in skipped],
        staging=scored.staging if scored else None,
        scores=scored.scores if scored else "",
    )
    lake.write_json({**manifest.to_json(), "run_id": ctx.run_id}, folder, "monitor.json")
    if verdict.drift_detected:
        log.warning("drift on the window ending %s: %s", day, describe(verdict))
    else:
        log.info("no drift on the window ending %s", day)
    return ctx.record(manifest)


def quarantined_days(ctx: RunContext, day: date) -> list[date]:
    """Days up to ``day`` whose partition of any dataset validation quarantined and that were
    not validated since."""
    lake = ctx.lake
    found: set[date] = set()
    for dataset in ctx.datasets:
        validated = set(lake.partition_dates("validated", dataset))
        found |= {d for d in lake.partition_dates("quarantine", dataset) if d <= day} - validated
    return sorted(found)


def describe(verdict: Verdict) -> str:
    """The crossed signals in one line, e.g. ``label rate_change 0.12 > 0.05 (p=0.002)``."""
    return "; ".join(
        f"{s.name} {s.statistic} {s.value:.4g} > {s.threshold:.4g} (p={s.p_value:.3g})"
        for s in verdict.crossed
    )


@dataclass(frozen=True, slots=True)
class ScoredDay:
    """The champion's (and the staged model's) score on D, and where D's scores were kept."""

    champion: ChampionDay
    staging: ChampionDay | None
    scores: str


def score_day(
    ctx: RunContext,
    champion: Champion,
    staging: Champion | None,
    today: pd.DataFrame,
    predicted: np.ndarray,
    features: list[str],
    verdict: Verdict,
) -> ScoredDay:
    """Score D's rows with the staged model too (its shadow day) and with the version the
    champion replaced (for the rollback check), log the champion's and staged model's metrics
    to the monitoring run of D and keep D's labels and predictions for the release step
    (:mod:`pipeline_steps.evaluation.shadow`)."""
    from pipeline_steps.evaluation.champion import now_utc
    from pipeline_steps.evaluation.shadow import DayScores, write_day

    domain = ctx.domain
    staged = scorer(staging.model_uri, features, domain)(today) if staging is not None else None
    replaced = replaced_model(ctx, champion) if ctx.settings.release.rollback_days else None
    previous = scorer(replaced.model_uri, features, domain)(today) if replaced is not None else None
    champion_day, staging_day = log_champion_day(
        ctx, champion, today, predicted, domain, verdict, staging, staged
    )
    slices = domain.slice_rows(today)
    for column in ctx.settings.evaluate.slices:
        if column in today.columns:
            slices[column] = today[column].astype("string")
    scores = DayScores(
        day=ctx.logical_date.isoformat(),
        champion_version=champion.version,
        staging_version=staging.version if staging else None,
        labels=today[domain.label].to_numpy(),
        champion=np.asarray(predicted, dtype=np.float64),
        staging=staged,
        slices=slices.reset_index(drop=True),
        previous_version=replaced.version if replaced else None,
        previous=previous,
        scored_at=now_utc(),
    )
    return ScoredDay(champion_day, staging_day, write_day(ctx.lake, scores))


def log_champion_day(
    ctx: RunContext,
    champion: Champion,
    today: pd.DataFrame,
    predicted: np.ndarray,
    domain: Domain,
    verdict: Verdict,
    staging: Champion | None = None,
    staged: np.ndarray | None = None,
) -> tuple[ChampionDay, ChampionDay | None]:
    """Log the champion's metrics on D (and the staged model's, ``staged`` its predictions) and
    the window's drift statistics as the monitoring experiment's run of D (the same run again
    when D is monitored again)."""
    from dataclasses import replace

    import mlflow

    from pipeline_steps.core.tracking import connect

    metrics = holdout_metrics(
        today[domain.label].to_numpy(), predicted, task=domain.task, classes=domain.classes
    )
    settings = replace(ctx.settings.mlflow, experiment=ctx.settings.mlflow.monitoring_experiment)
    client = connect(settings)
    experiment = client.get_experiment_by_name(settings.experiment)
    day = ctx.logical_date.isoformat()
    found = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.`trainyard.logical_date` = '{day}'",
        max_results=1,
    )
    values: dict[str, Any] = mlflow_metrics("champion_", metrics)
    values["champion_mean_score"] = float(np.mean(predicted)) if predicted.ndim == 1 else np.nan
    staged_metrics = None
    if staging is not None and staged is not None:
        labels = today[domain.label].to_numpy()
        staged_metrics = holdout_metrics(labels, staged, task=domain.task, classes=domain.classes)
        values |= mlflow_metrics("staging_", staged_metrics)
        values["staging_mean_score"] = float(np.mean(staged)) if staged.ndim == 1 else np.nan
    values["drift_crossed"] = float(len(verdict.crossed))
    for signal in verdict.signals:
        if signal.kind != "input":
            values[f"{signal.name}_{signal.statistic}"] = signal.value
            values[f"{signal.name}_threshold"] = signal.threshold
    tags = {
        "trainyard.logical_date": day,
        "trainyard.run_id": ctx.run_id,
        "trainyard.champion_version": champion.version,
        "trainyard.task": domain.task,
        "trainyard.drift_detected": str(verdict.drift_detected).lower(),
        "trainyard.drift_crossed": ",".join(s.name for s in verdict.crossed),
        "trainyard.staging_version": staging.version if staging else "none",
    }
    run_id = found[0].info.run_id if found else None
    with mlflow.start_run(run_id=run_id, run_name=None if run_id else f"monitor {day}") as run:
        mlflow.set_tags(tags)
        mlflow.log_metrics({k: v for k, v in values.items() if np.isfinite(v)})
        run_id = run.info.run_id
    champion_day = ChampionDay(
        version=champion.version,
        model_uri=champion.model_uri,
        metrics=metrics,
        mean_score=round(values["champion_mean_score"], 6),
        mlflow_run_id=run_id,
    )
    if staging is None or staged_metrics is None:
        return champion_day, None
    staging_day = ChampionDay(
        version=staging.version,
        model_uri=staging.model_uri,
        metrics=staged_metrics,
        mean_score=round(values["staging_mean_score"], 6),
        mlflow_run_id=run_id,
    )
    return champion_day, staging_day
