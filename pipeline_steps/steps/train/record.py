"""The end of a training, on rank 0 alone: the MLflow run finished and the manifest recorded.

``Trained``   what the loop ends with: the ``Fit``, its MLflow run, the epoch the model's
              weights are from, where it resumed, whether a tuning pruner stopped it.
``finish``    package the model in the run and end it (a tuning trial's run ends with nothing
              packaged), then record the train manifest.
``manifest``  the train manifest of a training that ``Trained`` describes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.manifests import (
    Calibration,
    FeaturesManifest,
    LoopPosition,
    TrainManifest,
    TunedParameters,
    ValidationSplit,
)
from pipeline_steps.core.provenance import model_fingerprint
from pipeline_steps.steps.train import mlflow_run
from pipeline_steps.steps.train.data import Preprocessor
from pipeline_steps.steps.train.state import Fit, weights_sha256


@dataclass(frozen=True, kw_only=True, slots=True)
class Trained:
    """A finished training loop, as its manifest records it."""

    fit: Fit
    config_hash: str
    mlflow_run_id: str
    world_size: int
    resumed_from: LoopPosition | None
    """Where this attempt resumed from a checkpoint (None: it started fresh)."""
    model_epoch: int
    """The epoch the model's weights are from: the last, or the best (``train.restore_best``)."""
    pruned_at: int | None
    """The epoch after which a tuning trial's pruner stopped it."""
    tuned: TunedParameters | None
    calibration: Calibration | None = None
    """The temperature the packaged model predicts with (``train.calibrate``)."""
    validation: ValidationSplit | None = None
    """The validation rows it was judged on."""


def finish(
    ctx: RunContext,
    features: FeaturesManifest,
    pre: Preprocessor,
    model_config: dict[str, Any],
    trained: Trained,
) -> TrainManifest:
    """Package the model with its preprocessing and end the MLflow run (a tuning trial's result
    is its validation loss: nothing is packaged, the model is trained again if chosen), then
    record the train manifest; returns it."""
    model = trained.fit.model
    if ctx.trial is None:
        if trained.calibration is not None:
            mlflow_run.log_calibration(trained.calibration)
        if trained.validation is not None:
            mlflow_run.log_validation(trained.validation)
        model_uri = mlflow_run.finish(
            ctx, model.cpu(), pre, model_config, features, trained.model_epoch
        )
    else:
        model_uri = mlflow_run.finish_trial(trained.pruned_at)
    return ctx.record(manifest(ctx, features, trained, model_uri))


def manifest(
    ctx: RunContext, features: FeaturesManifest, trained: Trained, model_uri: str
) -> TrainManifest:
    """The train manifest: the model epoch's metrics, the early-stopping outcome, every epoch's
    metrics, the model's weights hash and its temperature."""
    fit = trained.fit
    final = next(h for h in fit.history if h["epoch"] == trained.model_epoch)
    return TrainManifest(
        status="trained" if trained.pruned_at is None else "pruned",
        config_hash=trained.config_hash,
        logical_date=ctx.logical_date.isoformat(),
        mlflow_run_id=trained.mlflow_run_id,
        model_uri=model_uri,
        world_size=trained.world_size,
        epochs=len(fit.history),
        train_rows=features.sets.train.rows,
        training_set_sha256=features.training_set_sha256,
        metrics={k: round(v, 6) for k, v in final.items() if k != "epoch"},
        resumed_from=trained.resumed_from,
        steps=fit.position.step,
        stopped_early=fit.stopping.stopped_early,
        best_val_loss=round(fit.stopping.best_val_loss, 6),
        best_epoch=fit.stopping.best_epoch,
        model_epoch=trained.model_epoch,
        checkpoints=ctx.lake.path(ctx.run_dir, "checkpoints"),
        precision=fit.precision.name,
        weights_sha256=weights_sha256(fit.model),
        fingerprint=model_fingerprint(trained.config_hash),
        history=[{k: float(v) for k, v in h.items()} for h in fit.history],
        trial=ctx.trial,
        pruned_at_epoch=trained.pruned_at,
        tuned_from=trained.tuned,
        calibration=trained.calibration,
        validation=trained.validation,
    )
