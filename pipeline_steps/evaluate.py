"""Evaluate step: challenger and current champion scored on the same frozen holdout."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from pipeline_steps.context import RunContext, StepError
from pipeline_steps.metrics import classification_report

log = logging.getLogger(__name__)


def score(model_uri: str, holdout: pd.DataFrame, features: list[str]) -> Any:
    import mlflow.pyfunc

    model = mlflow.pyfunc.load_model(model_uri)
    return model.predict(holdout[features])


def evaluate(ctx: RunContext) -> dict[str, Any]:
    """Write ``runs/<run>/evaluation.json``: AUC, log loss and accuracy of both models.

    The champion is whatever the ``champion`` alias points at now; with none, only the
    challenger is scored. Raises ``StepError`` when the holdout is empty or a model won't load.
    """
    from pipeline_steps.tracking import champion_version, connect

    features, trained = ctx.upstream("features"), ctx.upstream("train")
    holdout = ctx.lake.read_table_at(features["sets"]["holdout"]["path"]).to_pandas()
    if holdout.empty:
        raise StepError(f"holdout {features['sets']['holdout']['path']} has no rows")
    columns = [*features["categorical"], *features["numeric"]]
    labels = holdout[features["label"]].to_numpy()

    client = connect(ctx.settings.mlflow)
    challenger = classification_report(labels, score(trained["model_uri"], holdout, columns))
    champion_entry: dict[str, Any] | None = None
    current = champion_version(client, ctx.settings.mlflow)
    if current is not None:
        uri = f"models:/{ctx.settings.mlflow.registered_model}/{current.version}"
        try:
            champion_metrics = classification_report(labels, score(uri, holdout, columns))
        except Exception as exc:
            raise StepError(f"champion {uri} could not score the holdout: {exc}") from exc
        champion_entry = {
            "version": str(current.version),
            "model_uri": uri,
            "metrics": champion_metrics,
        }

    import mlflow

    with mlflow.start_run(run_id=trained["mlflow_run_id"]):
        mlflow.log_metrics({f"holdout_{k}": v for k, v in challenger.items()})
        if champion_entry:
            mlflow.log_metrics(
                {f"champion_holdout_{k}": v for k, v in champion_entry["metrics"].items()}
            )
    report = {
        "step": "evaluate",
        "logical_date": ctx.logical_date.isoformat(),
        "holdout": {
            "path": features["sets"]["holdout"]["path"],
            "sha256": features["sets"]["holdout"]["sha256"],
            "rows": len(holdout),
        },
        "challenger": {
            "model_uri": trained["model_uri"],
            "mlflow_run_id": trained["mlflow_run_id"],
            "metrics": challenger,
        },
        "champion": champion_entry,
    }
    ctx.lake.write_json(report, ctx.run_dir, "evaluation.json")
    log.info(
        "challenger %s; champion %s",
        challenger,
        champion_entry["metrics"] if champion_entry else "none",
    )
    return ctx.record("evaluate", report)
