"""Evaluate step: challenger and current champion scored on the same frozen holdout."""

from __future__ import annotations

import logging
from dataclasses import asdict

import numpy as np
import pandas as pd

from pipeline_steps.context import RunContext
from pipeline_steps.errors import StepError
from pipeline_steps.manifests import (
    EvaluateManifest,
    FeaturesManifest,
    HoldoutMetrics,
    HoldoutRef,
    ScoredChallenger,
    ScoredChampion,
    TrainManifest,
)
from pipeline_steps.metrics import classification_report

log = logging.getLogger(__name__)


def score(model_uri: str, holdout: pd.DataFrame, features: list[str]) -> np.ndarray:
    """The model's delay probabilities for the holdout rows."""
    import mlflow.pyfunc

    model = mlflow.pyfunc.load_model(model_uri)
    return np.asarray(model.predict(holdout[features]))


def evaluate(ctx: RunContext) -> EvaluateManifest:
    """Write ``runs/<run>/evaluation.json``: AUC, log loss and accuracy of both models.

    The champion is ``tracking.reference_champion``'s: the live alias, or in a backfill the
    champion as of the logical date; with none, only the challenger is scored. Raises
    ``StepError`` when the holdout is empty or a model won't load.
    """
    from pipeline_steps.tracking import connect, reference_champion

    features, trained = ctx.upstream(FeaturesManifest), ctx.upstream(TrainManifest)
    holdout_set = features.sets.holdout
    holdout = ctx.lake.read_table_at(holdout_set.path).to_pandas()
    if holdout.empty:
        raise StepError(f"holdout {holdout_set.path} has no rows")
    columns = features.feature_columns
    labels = holdout[features.label].to_numpy()

    client = connect(ctx.settings.mlflow)
    challenger = holdout_metrics(labels, score(trained.model_uri, holdout, columns))
    champion: ScoredChampion | None = None
    current = reference_champion(client, ctx.settings.mlflow, ctx.trigger, ctx.logical_date)
    if current is not None:
        uri = f"models:/{ctx.settings.mlflow.registered_model}/{current.version}"
        try:
            champion_metrics = holdout_metrics(labels, score(uri, holdout, columns))
        except Exception as exc:
            raise StepError(f"champion {uri} could not score the holdout: {exc}") from exc
        champion = ScoredChampion(
            version=str(current.version), model_uri=uri, metrics=champion_metrics
        )

    import mlflow

    with mlflow.start_run(run_id=trained.mlflow_run_id):
        mlflow.log_metrics(_prefixed("holdout_", challenger))
        if champion:
            mlflow.log_metrics(_prefixed("champion_holdout_", champion.metrics))
    report = EvaluateManifest(
        logical_date=ctx.logical_date.isoformat(),
        holdout=HoldoutRef(path=holdout_set.path, sha256=holdout_set.sha256, rows=len(holdout)),
        challenger=ScoredChallenger(
            model_uri=trained.model_uri, mlflow_run_id=trained.mlflow_run_id, metrics=challenger
        ),
        champion=champion,
    )
    ctx.lake.write_json(report.to_json(), ctx.run_dir, "evaluation.json")
    log.info("challenger %s; champion %s", challenger, champion.metrics if champion else "none")
    return ctx.record(report)


def holdout_metrics(labels: np.ndarray, probabilities: np.ndarray) -> HoldoutMetrics:
    """AUC, log loss, accuracy, positive rate and rows of one model on the holdout."""
    report = classification_report(labels, probabilities)
    return HoldoutMetrics(
        auc=report["auc"],
        log_loss=report["log_loss"],
        accuracy=report["accuracy"],
        positive_rate=report["positive_rate"],
        rows=int(report["rows"]),
    )


def _prefixed(prefix: str, metrics: HoldoutMetrics) -> dict[str, float]:
    return {f"{prefix}{k}": float(v) for k, v in asdict(metrics).items()}
