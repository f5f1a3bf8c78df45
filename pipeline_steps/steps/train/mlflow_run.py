"""The training run in MLflow, kept by rank 0 alone: started (or resumed after a restart),
one request of metrics per epoch, and finished with the packaged pyfunc model.

MLflow is imported inside the functions: the other ranks never load it.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.manifests import (
    Calibration,
    FeaturesManifest,
    LoopPosition,
    TunedParameters,
    ValidationSplit,
)
from pipeline_steps.core.trigger import Trigger
from pipeline_steps.steps.train.data import Preprocessor


def start(
    ctx: RunContext,
    features: FeaturesManifest,
    world_size: int,
    resumed: LoopPosition | None,
    tuned: TunedParameters | None = None,
    parent_run_id: str | None = None,
) -> str:
    """The MLflow run of this pipeline run, active in this process; returns its id.

    An unfinished run of the same pipeline run (a restarted worker, a retried task) is resumed;
    otherwise a new one is started, tagged with the run, the logical date and the training set,
    with the train settings and the set's size as parameters. A tuning trial's run is a child
    of its study's run (``parent_run_id``) in the tuning experiment; a run trained with tuned
    parameters is tagged with the trial they came from.
    """
    import mlflow

    from pipeline_steps.core.tracking import RUN_TAG, connect, find_run

    mlflow_cfg = ctx.settings.mlflow
    extra: dict[str, str] = trigger_tags(ctx.trigger)
    name = f"train {ctx.logical_date.isoformat()}"
    if ctx.trial is not None:
        mlflow_cfg = replace(mlflow_cfg, experiment=ctx.settings.tuning.experiment)
        name = f"trial {ctx.trial.number}"
        extra = {
            "trainyard.study": ctx.trial.study,
            "trainyard.trial": str(ctx.trial.number),
            "trainyard.trial_state": "RUNNING",
        }
        if parent_run_id:
            extra["mlflow.parentRunId"] = parent_run_id
    if tuned is not None:
        extra |= {
            "trainyard.tuned_study": tuned.study,
            "trainyard.tuned_trial": str(tuned.trial),
            "trainyard.tuned_run_id": tuned.mlflow_run_id,
        }
    client = connect(mlflow_cfg)
    previous = find_run(client, mlflow_cfg, ctx.run_key)
    resumed_tags = {
        "trainyard.resumed": str(resumed is not None).lower(),
        **({"trainyard.resumed_from_step": str(resumed.step)} if resumed is not None else {}),
    }
    if previous is not None and previous.info.status != "FINISHED":
        # a restart of this run's training: its run goes on, saying where this attempt resumed
        run_id: str = mlflow.start_run(run_id=previous.info.run_id).info.run_id
        mlflow.set_tags(resumed_tags)
        return run_id
    run = mlflow.start_run(
        run_name=name,
        tags={
            RUN_TAG: ctx.run_key,
            "trainyard.logical_date": ctx.logical_date.isoformat(),
            "trainyard.training_set_sha256": features.training_set_sha256,
            "trainyard.train_first_day": features.train_days[0],
            "trainyard.train_last_day": features.train_days[-1],
            **resumed_tags,
            **extra,
        },
    )
    params: dict[str, Any] = {f"train.{k}": v for k, v in ctx.settings.to_dict()["train"].items()}
    params.update(
        {
            "features.window_days": ctx.settings.features.window_days,
            "train_rows": features.sets.train.rows,
            "train_days": len(features.train_days),
            "world_size": world_size,
        }
    )
    mlflow.log_params(params)
    run_id = run.info.run_id
    return run_id


def logged_steps(run_id: str) -> dict[str, int]:
    """The last step of each metric the run holds: a restarted attempt, which replays the steps
    after its checkpoint, logs none of them again (their points are already there)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    keys = client.get_run(run_id).data.metrics
    return {key: max(m.step for m in client.get_metric_history(run_id, key)) for key in keys}


def finish_trial(pruned_at: int | None) -> str:
    """End a tuning trial's run (nothing packaged); tag where the pruner stopped it."""
    import mlflow

    if pruned_at is not None:
        mlflow.set_tags(
            {"trainyard.pruned_at_epoch": str(pruned_at), "trainyard.trial_state": "PRUNED"}
        )
    mlflow.end_run()
    return ""


def preempted(at: LoopPosition) -> None:
    """End the active run as KILLED when the training stops on SIGTERM (an unfinished run: the
    retry resumes it), tagged with the step its checkpoint holds."""
    import mlflow

    mlflow.set_tag("trainyard.preempted_at_step", str(at.step))
    mlflow.end_run(status="KILLED")


def failed(error: BaseException) -> None:
    """End the active run as FAILED when the training stops on an error, tagged with it. Left
    open, MLflow's exit handler would end it as FINISHED, and a restarted worker (torchrun's
    ``--max-restarts``) or a retried task would start a second run instead of resuming this one."""
    import mlflow

    if mlflow.active_run() is None:
        return
    mlflow.set_tag("trainyard.failed", f"{type(error).__name__}: {error}"[:5000])
    mlflow.end_run(status="FAILED")


def trigger_tags(trigger: Trigger) -> dict[str, str]:
    """MLflow tags saying why the run trained: the trigger, its overrides and evidence."""
    tags = {
        "trainyard.trigger": trigger.kind,
        "trainyard.trigger_detail": trigger.describe(),
        "trainyard.overrides": trigger.describe_overrides(),
    }
    if trigger.user:
        tags["trainyard.triggered_by"] = trigger.user
    if trigger.evidence:
        # MLflow caps tag values (8,000 characters); the full evidence is in lineage.json.
        tags["trainyard.trigger_evidence"] = json.dumps(trigger.evidence, sort_keys=True)[:8000]
    return tags


def log_epoch(
    run_id: str, epoch: int, metrics: dict[str, float], step_losses: list[tuple[int, float]]
) -> None:
    """One MLflow request per epoch: the epoch's (finite) metrics at step ``epoch`` and the
    sampled step losses as ``train_loss_step`` at their optimizer steps."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    now = int(time.time() * 1000)
    batch = [Metric(k, v, now, epoch) for k, v in metrics.items() if math.isfinite(v)]
    batch += [Metric("train_loss_step", v, now, s) for s, v in step_losses]
    MlflowClient().log_batch(run_id, metrics=batch)


def log_validation(split: ValidationSplit) -> None:
    """How the validation rows were chosen, as tags of the active run (``validation_split``,
    ``validation_days``, ``validation_rows``)."""
    import mlflow

    mlflow.set_tags(
        {
            "validation_split": split.by,
            "validation_days": ",".join(split.days),
            "validation_rows": str(split.rows),
        }
    )


def log_calibration(calibration: Calibration) -> None:
    """The fitted temperature and the validation log loss before and after it, as metrics of
    the active run (a metric, not a parameter: a resumed run may log it again)."""
    import mlflow

    mlflow.log_metrics(
        {
            "calibration_temperature": calibration.temperature,
            "val_log_loss_uncalibrated": calibration.val_log_loss_before,
            "val_log_loss_calibrated": calibration.val_log_loss_after,
        }
    )


def finish(
    ctx: RunContext,
    model: torch.nn.Module,
    pre: Preprocessor,
    model_config: dict[str, Any],
    features: FeaturesManifest,
    model_epoch: int,
) -> str:
    """Package ``model`` (on the CPU) with its preprocessing as an MLflow pyfunc in the active
    run, tag the epoch its weights are from, end the run; returns the model's URI."""
    import mlflow

    from pipeline_steps.core.models import code_paths
    from pipeline_steps.steps.train.packaging import BUNDLE, ENTRY_POINT, bundle

    example = ctx.lake.read_table_at(features.sets.holdout.path).to_pandas().head(5)
    example = example[features.feature_columns]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model_bundle.pt"
        torch.save(bundle(model, pre, ctx.settings.train.model, model_config), path)
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=ENTRY_POINT,
            artifacts={BUNDLE: str(path)},
            input_example=example,
            code_paths=code_paths(ctx.settings.train.model) or None,
            pip_requirements=[
                f"torch=={torch.__version__.split('+')[0]}",
                "pandas",
                "numpy",
                f"mlflow=={mlflow.__version__}",
            ],
        )
    mlflow.set_tag("trainyard.model_epoch", str(model_epoch))
    mlflow.end_run()
    model_uri: str = info.model_uri
    return model_uri
