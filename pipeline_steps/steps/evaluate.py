"""Evaluate step: challenger, champion and baselines scored on the same frozen holdout.

Besides each model's metrics it records the paired-bootstrap intervals of the challenger's
differences from the champion and from the baselines, the metrics per slice, and writes the HTML
report (``reports/evaluation/date=D/run=<run>/``), also logged to the challenger's MLflow run
under ``evaluation/``. The promote step's gate decides on what is recorded here. Metrics,
baselines, intervals and plots are those of the features' task (``FeaturesManifest.task``).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

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
from pipeline_steps.core.settings import SettingsError
from pipeline_steps.core.tasks import task_spec
from pipeline_steps.evaluation.baselines import linear, trivial
from pipeline_steps.evaluation.bootstrap import paired_differences
from pipeline_steps.evaluation.gate import Verdict, gate, near_perfect
from pipeline_steps.evaluation.metrics import (
    HIGHER_IS_BETTER,
    holdout_metrics,
    mlflow_metrics,
    unjudged_classes,
)
from pipeline_steps.evaluation.slices import slice_results
from pipeline_steps.evaluation.suspects import shuffled_scores
from pipeline_steps.evaluation.training_set import read_sample
from pipeline_steps.tasks import TaskError

log = logging.getLogger(__name__)

SCORE_ROWS = 16_384
"""Holdout rows a model scores at once: its activations stay bounded however large the
holdout (a shipped domain's day is scored in one call)."""


def score(
    model_uri: str,
    holdout: pd.DataFrame,
    features: list[str],
    task: str | None = None,
    classes: Sequence[str] = (),
    loaded: Any = None,
) -> np.ndarray:
    """The model's predictions for the holdout rows, ``SCORE_ROWS`` at a time: probabilities
    of 1 (``binary``), each class's probability ([rows, K], ``multiclass``, ``ordinal``) or
    values (``regression``). With ``task`` the class probabilities are taken in the order of
    ``classes`` (the model's columns are class names) and a shape that does not fit the task is
    a ``StepError``; without it they are as the model gives them. ``loaded``: the model, loaded
    already (else it is loaded from ``model_uri``)."""
    import mlflow.pyfunc

    model = loaded if loaded is not None else mlflow.pyfunc.load_model(model_uri)
    rows = holdout[features]
    parts = [
        model.predict(rows.iloc[start : start + SCORE_ROWS])
        for start in range(0, max(len(rows), 1), SCORE_ROWS)
    ]
    predicted = (
        pd.concat(parts, ignore_index=True)
        if isinstance(parts[0], pd.DataFrame | pd.Series)
        else np.concatenate([np.asarray(part) for part in parts])
    )
    if task is None:
        return np.asarray(predicted)
    spec = task_spec(task)
    try:
        values = spec.read_predictions(predicted, classes)
    except TaskError as exc:
        raise StepError(f"{model_uri}: {exc}") from exc
    expected = spec.expected_shape(len(holdout), classes)
    if values.shape != expected:
        raise StepError(
            f"{model_uri} predicted shape {values.shape} for a {task} task on {len(holdout)} "
            f"rows; expected {expected}"
        )
    return values


def suspect_columns(
    model_uri: str,
    holdout: pd.DataFrame,
    columns: list[str],
    labels: np.ndarray,
    features: FeaturesManifest,
) -> dict[str, float]:
    """The feature columns the near-perfect challenger leans on, each with its near-perfect
    metric with that column shuffled (:mod:`pipeline_steps.evaluation.suspects`)."""
    import mlflow.pyfunc

    task, classes = features.task, features.classes
    metric = task_spec(task).near_perfect_metric
    model = mlflow.pyfunc.load_model(model_uri)
    return shuffled_scores(
        lambda rows: score(model_uri, rows, columns, task, classes, loaded=model),
        holdout,
        columns,
        lambda predicted: float(getattr(holdout_metrics(labels, predicted, task, classes), metric)),
        higher_is_better=HIGHER_IS_BETTER[metric],
    )


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
    task, classes = features.task, features.classes
    spec = task_spec(task)
    try:
        ctx.settings.gate.metrics_for(task)  # the gate's metrics fit the task: fail before scoring
    except SettingsError as exc:
        raise StepError(str(exc)) from exc
    holdout_set = features.sets.holdout
    holdout = ctx.lake.read_table_at(holdout_set.path).to_pandas()
    if holdout.empty:
        raise StepError(f"holdout {holdout_set.path} has no rows")
    columns = features.feature_columns
    labels = holdout[features.label].to_numpy()
    min_class_rows = ctx.settings.gate.min_class_rows

    def differences(first: np.ndarray, second: np.ndarray) -> dict[str, Interval]:
        return paired_differences(
            labels,
            first,
            second,
            resamples=settings.resamples,
            confidence=settings.confidence,
            seed=settings.seed,
            task=task,
            min_class_rows=min_class_rows,
        )

    def scored(predictions: np.ndarray) -> HoldoutMetrics:
        return holdout_metrics(labels, predictions, task, classes, min_class_rows)

    client = connect(ctx.settings.mlflow)
    curves = {"challenger": score(trained.model_uri, holdout, columns, task, classes)}
    champion: ScoredChampion | None = None
    current = reference_champion(client, ctx.settings.mlflow, ctx.trigger, ctx.logical_date)
    if current is not None:
        uri = f"models:/{ctx.settings.mlflow.registered_model}/{current.version}"
        try:
            curves["champion"] = score(uri, holdout, columns, task, classes)
        except Exception as exc:
            raise StepError(f"champion {uri} could not score the holdout: {exc}") from exc
        champion = ScoredChampion(
            version=str(current.version), model_uri=uri, metrics=scored(curves["champion"])
        )
    baselines = []
    for name, predictions in baseline_predictions(ctx, features, holdout).items():
        curves[name.replace("_", " ")] = predictions
        rate = name == "trivial" and spec.counts_positives  # the one probability it gives
        baselines.append(
            ScoredBaseline(
                name=name,
                metrics=scored(predictions),
                differences=differences(curves["challenger"], predictions),
                rate=round(float(predictions[0]), 6) if rate else None,
            )
        )
    report = EvaluateManifest(
        logical_date=ctx.logical_date.isoformat(),
        holdout=HoldoutRef(
            path=holdout_set.path,
            sha256=holdout_set.sha256,
            rows=len(holdout),
            positives=spec.positives(labels),
            days=features.holdout_days or [features.holdout_day],
        ),
        challenger=ScoredChallenger(
            model_uri=trained.model_uri,
            mlflow_run_id=trained.mlflow_run_id,
            metrics=scored(curves["challenger"]),
        ),
        champion=champion,
        unjudged_classes=unjudged_classes(labels, classes, min_class_rows) if classes else {},
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
            task=task,
        ),
    )
    scored_models = [report.challenger.metrics, *(b.metrics for b in baselines)]
    if any(near_perfect(m, ctx.settings.gate) for m in scored_models):
        report = replace(
            report, suspects=suspect_columns(trained.model_uri, holdout, columns, labels, features)
        )
    verdict = gate(report, ctx.settings.gate, settings.confidence)
    if settings.report:
        written = write_report(ctx, report, labels, curves, verdict, classes)
        report = replace(report, report=written)
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
    """The baselines' holdout predictions by name: the trivial model (every training row's
    label), and the task's linear model (its ``linear_baseline``) fitted on at most
    ``evaluate.baseline_rows`` training rows when ``evaluate.logistic_baseline`` is on and those
    rows' labels can fit it (both classes, two or more classes, two or more values)."""
    settings = ctx.settings.evaluate
    task, classes = features.task, len(features.classes)
    spec = task_spec(task)
    sample = read_sample(
        ctx.lake.fs,
        features.sets.train.path,
        [*features.categorical, *features.numeric],
        features.label,
        settings.baseline_rows,
        settings.seed,
        classes if spec.has_classes else 0,
    )
    out = {"trivial": trivial(sample.labels, len(holdout), task)}
    if sample.sampled:
        log.info(
            "linear baseline fitted on %d of the %d training rows (evaluate.baseline_rows)",
            len(sample.frame),
            sample.labels.rows,
        )
    distinct = len(np.unique(sample.frame[features.label].to_numpy()))
    if settings.logistic_baseline and spec.baseline_fits(distinct):
        out[spec.linear_baseline] = linear(
            task,
            sample.frame,
            holdout,
            features.categorical,
            features.numeric,
            features.label,
            settings.seed,
            classes,
        )
    return out


def write_report(
    ctx: RunContext,
    evaluation: EvaluateManifest,
    labels: np.ndarray,
    curves: dict[str, np.ndarray],
    verdict: Verdict,
    classes: Sequence[str] = (),
) -> str:
    """Render the report into the lake (all files or none) and log it to the challenger's
    MLflow run under ``evaluation/``; returns the report's path in the lake. ``classes`` names
    a multiclass task's classes."""
    import mlflow

    from pipeline_steps.evaluation.report import REPORT, render

    folder = report_dir(evaluation.logical_date, ctx.run_id)
    with tempfile.TemporaryDirectory(prefix="trainyard-evaluation-") as tmp:
        files = render(evaluation, ctx.run_id, labels, curves, verdict, Path(tmp), classes)
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

    values = mlflow_metrics("holdout_", evaluation.challenger.metrics)
    if evaluation.champion:
        values |= mlflow_metrics("champion_holdout_", evaluation.champion.metrics)
    for metric, interval in evaluation.differences.items():
        values |= {
            f"diff_{metric}": interval.estimate,
            f"diff_{metric}_low": interval.low,
            f"diff_{metric}_high": interval.high,
        }
    for baseline in evaluation.baselines:
        values |= mlflow_metrics(f"baseline_{baseline.name}_", baseline.metrics)
    with mlflow.start_run(run_id=evaluation.challenger.mlflow_run_id):
        mlflow.log_metrics({k: v for k, v in values.items() if v == v})
        mlflow.log_dict(
            {"slices": [asdict(s) for s in evaluation.slices]}, "evaluation/slices.json"
        )
