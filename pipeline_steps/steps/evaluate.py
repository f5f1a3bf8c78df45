"""Evaluate step: challenger, champion and baselines scored on the same frozen holdout.

Besides each model's metrics it records the paired-bootstrap intervals of the challenger's
differences from the champion and from the baselines, the metrics per slice, and writes the HTML
report (``reports/evaluation/date=D/run=<run>/``), also logged to the challenger's MLflow run
under ``evaluation/``. The promote step's gate decides on what is recorded here.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.lake import safe_run_key
from pipeline_steps.core.manifests import (
    EvaluateManifest,
    FeaturesManifest,
    HoldoutMetrics,
    HoldoutRef,
    Interval,
    ScoredBaseline,
    ScoredChallenger,
    ScoredChampion,
    TrainManifest,
)
from pipeline_steps.evaluation.baselines import logistic_regression, trivial
from pipeline_steps.evaluation.bootstrap import paired_differences
from pipeline_steps.evaluation.gate import Verdict, gate
from pipeline_steps.evaluation.metrics import holdout_metrics
from pipeline_steps.evaluation.slices import slice_results

log = logging.getLogger(__name__)


def score(model_uri: str, holdout: pd.DataFrame, features: list[str]) -> np.ndarray:
    """The model's delay probabilities for the holdout rows."""
    import mlflow.pyfunc

    model = mlflow.pyfunc.load_model(model_uri)
    return np.asarray(model.predict(holdout[features]))


def report_dir(logical_date: str, run_id: str) -> str:
    """The lake folder of a run's evaluation report."""
    return f"reports/evaluation/date={logical_date}/run={safe_run_key(run_id)}"


def slice_frame(ctx: RunContext, holdout: pd.DataFrame) -> pd.DataFrame:
    """The domain's slice columns of the holdout, then those of ``evaluate.slices``."""
    extra = list(ctx.settings.evaluate.slices)
    unknown = [c for c in extra if c not in holdout.columns]
    if unknown:
        raise StepError(
            f"evaluate.slices names column(s) {unknown} the holdout does not have; "
            f"it has: {', '.join(map(str, holdout.columns))}"
        )
    slices = ctx.domain.slice_rows(holdout)
    for column in extra:
        slices[column] = holdout[column].astype("string")
    return slices


def evaluate(ctx: RunContext) -> EvaluateManifest:
    """Score the challenger, the champion and the baselines on the holdout and write
    ``runs/<run>/evaluation.json`` and the report.

    The champion is ``tracking.reference_champion``'s: the live alias, or in a backfill the
    champion as of the logical date; with none, only the challenger and the baselines are
    scored. Raises ``StepError`` when the holdout is empty or a model won't load.
    """
    from pipeline_steps.core.tracking import connect, reference_champion

    settings = ctx.settings.evaluate
    features, trained = ctx.upstream(FeaturesManifest), ctx.upstream(TrainManifest)
    holdout_set = features.sets.holdout
    holdout = ctx.lake.read_table_at(holdout_set.path).to_pandas()
    if holdout.empty:
        raise StepError(f"holdout {holdout_set.path} has no rows")
    columns = features.feature_columns
    labels = holdout[features.label].to_numpy()

    def differences(first: np.ndarray, second: np.ndarray) -> dict[str, Interval]:
        return paired_differences(
            labels,
            first,
            second,
            resamples=settings.resamples,
            confidence=settings.confidence,
            seed=settings.seed,
        )

    client = connect(ctx.settings.mlflow)
    curves = {"challenger": score(trained.model_uri, holdout, columns)}
    champion: ScoredChampion | None = None
    current = reference_champion(client, ctx.settings.mlflow, ctx.trigger, ctx.logical_date)
    if current is not None:
        uri = f"models:/{ctx.settings.mlflow.registered_model}/{current.version}"
        try:
            curves["champion"] = score(uri, holdout, columns)
        except Exception as exc:
            raise StepError(f"champion {uri} could not score the holdout: {exc}") from exc
        champion_metrics = holdout_metrics(labels, curves["champion"])
        champion = ScoredChampion(
            version=str(current.version), model_uri=uri, metrics=champion_metrics
        )
    baselines = []
    for name, probabilities in baseline_predictions(ctx, features, holdout).items():
        curves[name.replace("_", " ")] = probabilities
        baselines.append(
            ScoredBaseline(
                name=name,
                metrics=holdout_metrics(labels, probabilities),
                differences=differences(curves["challenger"], probabilities),
                rate=round(float(probabilities[0]), 6) if name == "trivial" else None,
            )
        )
    report = EvaluateManifest(
        logical_date=ctx.logical_date.isoformat(),
        holdout=HoldoutRef(
            path=holdout_set.path,
            sha256=holdout_set.sha256,
            rows=len(holdout),
            positives=int(labels.sum()),
            days=features.holdout_days or [features.holdout_day],
        ),
        challenger=ScoredChallenger(
            model_uri=trained.model_uri,
            mlflow_run_id=trained.mlflow_run_id,
            metrics=holdout_metrics(labels, curves["challenger"]),
        ),
        champion=champion,
        confidence=settings.confidence,
        resamples=settings.resamples,
        differences=differences(curves["challenger"], curves["champion"]) if champion else {},
        baselines=baselines,
        slices=slice_results(
            slice_frame(ctx, holdout),
            labels,
            curves["challenger"],
            curves.get("champion"),
            min_rows=ctx.settings.gate.min_slice_rows,
            resamples=settings.resamples,
            confidence=settings.confidence,
            seed=settings.seed,
        ),
    )
    verdict = gate(report, ctx.settings.gate, settings.confidence)
    if settings.report:
        report = replace(report, report=write_report(ctx, report, labels, curves, verdict))
    log_to_mlflow(report)
    ctx.lake.write_json(report.to_json(), ctx.run_dir, "evaluation.json")
    log.info("challenger %s; champion %s", report.challenger.metrics, champion or "none")
    for metric, interval in report.differences.items():
        log.info("challenger - champion %s: %s", metric, interval.describe())
    log.info("gate: %s (%s)", verdict.outcome, "; ".join(verdict.reasons))
    return ctx.record(report)


def baseline_predictions(
    ctx: RunContext, features: FeaturesManifest, holdout: pd.DataFrame
) -> dict[str, np.ndarray]:
    """The baselines' holdout probabilities: the trivial model, and the logistic regression
    when ``evaluate.logistic_baseline`` is on."""
    train = ctx.lake.read_table_at(features.sets.train.path).to_pandas()
    labels = train[features.label].to_numpy()
    out = {"trivial": trivial(labels, len(holdout))}
    if ctx.settings.evaluate.logistic_baseline and len(np.unique(labels)) == 2:
        out["logistic_regression"] = logistic_regression(
            train,
            holdout,
            features.categorical,
            features.numeric,
            features.label,
            ctx.settings.evaluate.seed,
        )
    return out


def write_report(
    ctx: RunContext,
    evaluation: EvaluateManifest,
    labels: np.ndarray,
    curves: dict[str, np.ndarray],
    verdict: Verdict,
) -> str:
    """Render the report into the lake (all files or none) and log it to the challenger's
    MLflow run under ``evaluation/``; returns the report's path in the lake."""
    import mlflow

    from pipeline_steps.evaluation.report import REPORT, render

    folder = report_dir(evaluation.logical_date, ctx.run_id)
    with tempfile.TemporaryDirectory(prefix="trainyard-evaluation-") as tmp:
        files = render(evaluation, ctx.run_id, labels, curves, verdict, Path(tmp))
        with ctx.lake.staged_dir(folder) as staged:
            for path in files:
                ctx.lake.fs.put_file(str(path), f"{staged}/{path.name}")
        with mlflow.start_run(run_id=evaluation.challenger.mlflow_run_id):
            mlflow.log_artifacts(tmp, artifact_path="evaluation")
    return ctx.lake.path(folder, REPORT)


def log_to_mlflow(evaluation: EvaluateManifest) -> None:
    """The metrics, the differences with their bounds and the slice table, on the challenger's
    MLflow run."""
    import mlflow

    values = _prefixed("holdout_", evaluation.challenger.metrics)
    if evaluation.champion:
        values |= _prefixed("champion_holdout_", evaluation.champion.metrics)
    for metric, interval in evaluation.differences.items():
        values |= {
            f"diff_{metric}": interval.estimate,
            f"diff_{metric}_low": interval.low,
            f"diff_{metric}_high": interval.high,
        }
    for baseline in evaluation.baselines:
        values |= _prefixed(f"baseline_{baseline.name}_", baseline.metrics)
    with mlflow.start_run(run_id=evaluation.challenger.mlflow_run_id):
        mlflow.log_metrics({k: v for k, v in values.items() if v == v})
        mlflow.log_dict(
            {"slices": [asdict(s) for s in evaluation.slices]}, "evaluation/slices.json"
        )


def _prefixed(prefix: str, metrics: HoldoutMetrics) -> dict[str, float]:
    return {f"{prefix}{k}": float(v) for k, v in asdict(metrics).items()}
