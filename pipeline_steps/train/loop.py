"""Train step: the frozen training set → a PyTorch model, launched by torchrun.

Reads top to bottom: detect DDP from torchrun's environment, load and preprocess the data, build
the model, resume from the newest checkpoint, run the epochs, and (rank 0 only) log to MLflow,
checkpoint and package the model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from pipeline_steps.context import RunContext, StepError
from pipeline_steps.metrics import roc_auc
from pipeline_steps.train import checkpoint
from pipeline_steps.train.data import Preprocessor, TensorSet, batches, tensor_set
from pipeline_steps.train.models import build_model

log = logging.getLogger(__name__)


def _predict(
    model: torch.nn.Module, data: TensorSet, device: torch.device, batch_size: int = 8192
) -> np.ndarray:
    model.eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(data), batch_size):
            part = data.take(torch.arange(start, min(start + batch_size, len(data))))
            out.append(torch.sigmoid(model(part.codes.to(device), part.numeric.to(device))).cpu())
    return torch.cat(out).numpy() if out else np.empty(0)


def train(ctx: RunContext) -> dict[str, Any]:
    """Train on ``training_sets/<run>/train.parquet``; return the step manifest (rank 0).

    Raises ``StepError`` when the training set is missing or empty. Resumes from the newest
    valid checkpoint of the same run and settings, so a retried task recomputes no finished epoch.
    """
    cfg, lake = ctx.settings.train, ctx.lake
    features = ctx.upstream("features")

    # -- processes: torchrun sets RANK / WORLD_SIZE / LOCAL_RANK; without them, one process ----
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise StepError("train.device is 'cuda' but no CUDA device is visible")
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    distributed = world_size > 1
    # Same settings and training set as a finished run of this run id: nothing to recompute.
    config_hash = hashlib.sha256(
        json.dumps(
            [ctx.settings.to_dict()["train"], features["training_set_sha256"]],
            sort_keys=True,
            default=list,
        ).encode()
    ).hexdigest()
    if lake.exists(ctx.run_dir, "train.json"):
        done = lake.read_json(ctx.run_dir, "train.json")
        if done.get("config_hash") == config_hash:
            log.info("run %s already trained with these settings and data: cached", ctx.run_id)
            return {**done, "status": "cached"} if rank == 0 else {}
    if distributed:
        dist.init_process_group("nccl" if use_cuda else "gloo")
    master = rank == 0

    # -- data: fit preprocessing on the training rows only ----------------------------------
    frame = lake.read_table_at(features["sets"]["train"]["path"]).to_pandas()
    if frame.empty:
        raise StepError(f"training set {features['sets']['train']['path']} has no rows")
    is_validation = np.random.default_rng(cfg.seed).random(len(frame)) < cfg.validation_fraction
    pre = Preprocessor.fit(frame[~is_validation], features["categorical"], features["numeric"])
    fit_set = tensor_set(frame[~is_validation], pre, features["label"])
    val_set = tensor_set(frame[is_validation], pre, features["label"])

    # -- model and optimizer ----------------------------------------------------------------
    torch.manual_seed(cfg.seed)
    model_config = {
        "cardinalities": pre.cardinalities,
        "numeric_width": pre.numeric_width,
        "embedding_dim": cfg.embedding_dim,
        "hidden_dims": list(cfg.hidden_dims),
        "dropout": cfg.dropout,
    }
    model = build_model(cfg.model, **model_config).to(device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay
    )
    loss_fn = torch.nn.BCEWithLogitsLoss()

    # -- resume -------------------------------------------------------------------------------
    checkpoints = f"{ctx.run_dir}/checkpoints"
    start_epoch, history = 0, []
    state = checkpoint.load_latest(lake, checkpoints, config_hash)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch, history = state["epoch"] + 1, state["history"]
    ddp_model = DistributedDataParallel(model) if distributed else model

    run = None
    if master:
        run = _start_mlflow_run(ctx, features, world_size, resumed=state is not None)

    # -- epochs -------------------------------------------------------------------------------
    for epoch in range(start_epoch, cfg.epochs):
        # Dropout noise depends only on (seed, epoch, rank): a resumed epoch replays exactly.
        torch.manual_seed(cfg.seed + 1_000 * epoch + rank)
        ddp_model.train()
        started, seen, loss_sum = time.perf_counter(), 0, torch.zeros((), device=device)
        for batch in batches(
            fit_set, cfg.batch_size, seed=cfg.seed, epoch=epoch, rank=rank, world_size=world_size
        ):
            logits = ddp_model(batch.codes.to(device), batch.numeric.to(device))
            loss = loss_fn(logits, batch.labels.to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            loss_sum += loss.detach() * len(batch)
            seen += len(batch)
        totals = torch.tensor([loss_sum.item(), float(seen)], device=device)
        if distributed:
            dist.all_reduce(totals)
        elapsed = time.perf_counter() - started
        probabilities = _predict(model, val_set, device)
        labels = val_set.labels.numpy()
        val_loss = float(
            loss_fn(
                torch.logit(torch.from_numpy(probabilities).clamp(1e-7, 1 - 1e-7)), val_set.labels
            ).item()
        )
        metrics = {
            "train_loss": float(totals[0] / totals[1]),
            "val_loss": val_loss,
            "val_auc": roc_auc(labels, probabilities),
            "samples_per_s": float(totals[1]) / elapsed,
        }
        history.append({"epoch": epoch, **metrics})
        if master:
            import mlflow

            mlflow.log_metrics(metrics, step=epoch)
            checkpoint.save(
                lake,
                checkpoints,
                epoch,
                {
                    "epoch": epoch,
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "history": history,
                    "config_hash": config_hash,
                },
            )
            log.info("epoch %d: %s", epoch, {k: round(v, 4) for k, v in metrics.items()})
        if distributed:
            dist.barrier()

    manifest: dict[str, Any] = {}
    if master:
        manifest = _finish(
            ctx, run, model.cpu(), pre, model_config, features, history, world_size, config_hash
        )
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return manifest


def _start_mlflow_run(
    ctx: RunContext, features: dict[str, Any], world_size: int, resumed: bool
) -> Any:
    import mlflow

    from pipeline_steps.tracking import RUN_TAG, connect, find_run

    client = connect(ctx.settings.mlflow)
    previous = find_run(client, ctx.settings.mlflow, ctx.run_id)
    if previous is not None and previous.info.status != "FINISHED":
        return mlflow.start_run(run_id=previous.info.run_id)
    run = mlflow.start_run(
        run_name=f"train {ctx.logical_date.isoformat()}",
        tags={
            RUN_TAG: ctx.run_id,
            "trainyard.logical_date": ctx.logical_date.isoformat(),
            "trainyard.training_set_sha256": features["training_set_sha256"],
            "trainyard.train_first_day": features["train_days"][0],
            "trainyard.train_last_day": features["train_days"][-1],
            "trainyard.resumed": str(resumed).lower(),
        },
    )
    params = {f"train.{k}": v for k, v in ctx.settings.to_dict()["train"].items()}
    params.update(
        {
            "features.window_days": ctx.settings.features.window_days,
            "train_rows": features["sets"]["train"]["rows"],
            "train_days": len(features["train_days"]),
            "world_size": world_size,
        }
    )
    mlflow.log_params(params)
    return run


def _finish(
    ctx: RunContext,
    run: Any,
    model: torch.nn.Module,
    pre: Preprocessor,
    model_config: dict[str, Any],
    features: dict[str, Any],
    history: list[dict[str, Any]],
    world_size: int,
    config_hash: str,
) -> dict[str, Any]:
    """Package the model as an MLflow pyfunc, close the run, record the manifest."""
    import mlflow

    from pipeline_steps.train.packaging import BUNDLE, ENTRY_POINT, bundle

    example = ctx.lake.read_table_at(features["sets"]["holdout"]["path"]).to_pandas().head(5)
    example = example[[*features["categorical"], *features["numeric"]]]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model_bundle.pt"
        torch.save(bundle(model, pre, ctx.settings.train.model, model_config), path)
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=ENTRY_POINT,
            artifacts={BUNDLE: str(path)},
            input_example=example,
            pip_requirements=[
                f"torch=={torch.__version__.split('+')[0]}",
                "pandas",
                "numpy",
                f"mlflow=={mlflow.__version__}",
            ],
        )
    final = history[-1]
    mlflow.end_run()
    manifest = {
        "step": "train",
        "status": "trained",
        "config_hash": config_hash,
        "logical_date": ctx.logical_date.isoformat(),
        "mlflow_run_id": run.info.run_id,
        "model_uri": info.model_uri,
        "world_size": world_size,
        "epochs": len(history),
        "train_rows": features["sets"]["train"]["rows"],
        "training_set_sha256": features["training_set_sha256"],
        "metrics": {k: round(v, 6) for k, v in final.items() if k != "epoch"},
        "checkpoints": ctx.lake.path(ctx.run_dir, "checkpoints"),
    }
    return ctx.record("train", manifest)
