"""Train step: the frozen training set → a PyTorch model, launched by torchrun.

Reads top to bottom: detect DDP from torchrun's environment, stream the training set and fit the
preprocessing, build the model, optimizer and schedule, resume from the newest checkpoint, run
the epochs (accumulate, clip, step; checkpoint every N steps), validate and stop early, and
(rank 0 only) log to MLflow and package the model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import tempfile
import time
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from pipeline_steps.context import RunContext
from pipeline_steps.errors import StepError
from pipeline_steps.metrics import binned_auc
from pipeline_steps.steps.train import checkpoint
from pipeline_steps.steps.train.data import Preprocessor, TrainingTable, epoch_batches
from pipeline_steps.steps.train.models import build_model, model_config
from pipeline_steps.steps.train.step import (
    AUC_BINS,
    apply_gradients,
    gpu_metrics,
    learn,
    make_optimizer,
    make_schedule,
    validation_sums,
)

log = logging.getLogger(__name__)


def train(ctx: RunContext) -> dict[str, Any]:
    """Train on ``training_sets/<run>/train.parquet``; return the step manifest (rank 0).

    Raises ``StepError`` when the training set is missing, empty or too small for the ranks.
    Resumes from the newest valid checkpoint of the same run, settings and world size, so a
    restarted worker or a retried task recomputes no finished step.
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
    if use_cuda:
        torch.cuda.set_device(device)
    distributed, master = world_size > 1, rank == 0

    # -- data: the frozen set, streamed by row groups --------------------------------------------
    columns = [*features["categorical"], *features["numeric"], features["label"]]
    path = features["sets"]["train"]["path"]
    if not lake.fs.exists(path):
        raise StepError(f"training set {path} does not exist; run the features step first")
    table = TrainingTable(path, lake.fs, columns, cfg.seed, cfg.validation_fraction)
    if table.rows == 0:
        raise StepError(f"training set {path} has no rows")
    if len(table.group_rows) < world_size:
        raise StepError(
            f"training set {path} has {len(table.group_rows)} row group(s), fewer than the "
            f"{world_size} training processes; lower features.row_group_rows or the process count"
        )
    # Same settings, data layout and world size as a finished run of this run id: nothing to do.
    config_hash = hashlib.sha256(
        json.dumps(
            [
                ctx.settings.to_dict()["train"],
                features["training_set_sha256"],
                table.group_rows,
                world_size,
            ],
            sort_keys=True,
            default=list,
        ).encode()
    ).hexdigest()
    if lake.exists(ctx.run_dir, "train.json"):
        done = lake.read_json(ctx.run_dir, "train.json")
        if done.get("config_hash") == config_hash:
            log.info("run %s already trained with these settings and data: cached", ctx.run_id)
            return {**done, "status": "cached"} if master else {}
    if distributed:
        join_process_group(
            "nccl" if use_cuda else "gloo", rank, world_size, cfg.collective_timeout_s
        )
    # Preprocessing is fitted on the fitting rows of the training window only, by rank 0 in
    # one streaming pass; the other ranks receive it and read only their own shards.
    fitted: list[Any] = [None]
    if master:
        everything = list(range(len(table.group_rows)))
        fitted[0] = Preprocessor.fit(
            table.frames(everything, validation=False),
            features["categorical"],
            features["numeric"],
        ).to_dict()
    if distributed:
        dist.broadcast_object_list(fitted, src=0)
    pre = Preprocessor.from_dict(fitted[0])
    label = features["label"]

    # -- model, optimizer, schedule ----------------------------------------------------------------
    torch.manual_seed(cfg.seed)
    config = model_config(cfg, pre.cardinalities, pre.numeric_width)
    model = build_model(cfg.model, **config).to(device)
    parameters = list(model.parameters())
    optimizer = make_optimizer(model, cfg.learning_rate, cfg.weight_decay)
    micro_batches = [
        table.steps_per_epoch(e, cfg.batch_size, world_size)
        // cfg.grad_accumulation
        * cfg.grad_accumulation
        for e in range(cfg.epochs)
    ]
    if micro_batches[0] == 0:
        raise StepError(
            f"training set {path} has too few rows per process for one step of "
            f"train.batch_size={cfg.batch_size} x train.grad_accumulation={cfg.grad_accumulation}"
        )
    total_steps = sum(micro_batches) // cfg.grad_accumulation
    scheduler = make_schedule(optimizer, round(cfg.warmup_fraction * total_steps), total_steps)
    amp = use_cuda and cfg.amp
    scaler = torch.amp.GradScaler("cuda", enabled=False)  # bfloat16 needs no loss scaling
    loss_fn = torch.nn.BCEWithLogitsLoss()

    # -- resume -----------------------------------------------------------------------------------
    folder = f"{ctx.run_dir}/checkpoints"
    position = {"epoch": 0, "epoch_batches": 0, "step": 0}
    history: list[dict[str, Any]] = []
    stopping = {
        "best_val_loss": math.inf,
        "best_epoch": -1,
        "bad_epochs": 0,
        "stopped_early": False,
    }
    best_weights: dict[str, torch.Tensor] | None = None  # the lowest validation loss's model
    state = checkpoint.load_latest(lake, folder, config_hash)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        position = {k: state[k] for k in position}
        history, stopping = state["history"], {**stopping, **state["stopping"]}
        best_weights = state.get("best_model")
        set_rng_state(state["rng"][rank])
    resumed_from = dict(position) if state is not None else None
    ddp_model: Any = (
        DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
        if distributed
        else model
    )

    def save_checkpoint() -> None:
        rng = [get_rng_state()] * world_size
        if distributed:
            dist.all_gather_object(rng, get_rng_state())
        if master:
            checkpoint.save(
                lake,
                folder,
                position["step"],
                {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "scaler": scaler.state_dict(),
                    **position,
                    "history": history,
                    "stopping": stopping,
                    "best_model": best_weights,
                    "rng": rng,
                    "world_size": world_size,
                    "config_hash": config_hash,
                },
                keep=cfg.keep_checkpoints,
            )

    run = _start_mlflow_run(ctx, features, world_size, resumed_from) if master else None

    # -- epochs -----------------------------------------------------------------------------------
    while position["epoch"] < cfg.epochs and not stopping["stopped_early"]:
        epoch = position["epoch"]
        if position["epoch_batches"] == 0:
            # Dropout noise depends only on (seed, epoch, rank); mid-epoch, the checkpoint's
            # RNG states carry on instead.
            torch.manual_seed(cfg.seed + 1_000 * epoch + rank)
        ddp_model.train()
        started, seen = time.perf_counter(), 0
        loss_sum = torch.zeros((), device=device)
        step_losses: list[tuple[int, float]] = []
        stream = epoch_batches(
            table,
            pre,
            label,
            batch_size=cfg.batch_size,
            epoch=epoch,
            rank=rank,
            world_size=world_size,
            shuffle_buffer=cfg.shuffle_buffer,
            skip=position["epoch_batches"],
            prefetch_buffers=cfg.prefetch,
            workers=cfg.data_workers,
            pin_memory=use_cuda,
        )
        for batch in stream:
            if position["epoch_batches"] == micro_batches[epoch]:
                break
            batch = batch.to(device) if use_cuda else batch
            stepping = (position["epoch_batches"] + 1) % cfg.grad_accumulation == 0
            quiet = ddp_model.no_sync() if distributed and not stepping else nullcontext()
            with quiet:  # gradients of a non-final accumulation batch stay local
                loss = learn(ddp_model, loss_fn, batch, cfg.grad_accumulation, amp)
            loss_sum += loss * len(batch)
            seen += len(batch)
            position["epoch_batches"] += 1
            if not stepping:
                continue
            apply_gradients(parameters, optimizer, scheduler, cfg.grad_clip)
            position["step"] += 1
            if position["step"] % cfg.log_every == 0:
                step_losses.append((position["step"], float(loss.detach())))
            mid_epoch = position["epoch_batches"] < micro_batches[epoch]
            if cfg.checkpoint_every and position["step"] % cfg.checkpoint_every == 0 and mid_epoch:
                save_checkpoint()
        elapsed = time.perf_counter() - started

        sums = torch.cat(
            [
                torch.tensor([loss_sum.item(), float(seen)], dtype=torch.float64),
                validation_sums(
                    model, table, pre, label, cfg.batch_size, device, amp, rank, world_size
                ),
            ]
        )
        if distributed:  # nccl reduces GPU tensors only; gloo takes them where they are
            sums = sums.to(device)
            dist.all_reduce(sums)
        train_loss, rows, val_loss, val_rows, *hist = sums.tolist()
        metrics: dict[str, float] = {
            "train_loss": train_loss / max(rows, 1.0),
            "val_loss": val_loss / max(val_rows, 1.0),
            "val_auc": binned_auc(hist[:AUC_BINS], hist[AUC_BINS:]),
            "samples_per_s": rows / max(elapsed, 1e-9),
            "learning_rate": float(scheduler.get_last_lr()[0]),
        }
        if use_cuda:
            metrics |= gpu_metrics(device)
        history.append({"epoch": epoch, **metrics})
        if metrics["val_loss"] < stopping["best_val_loss"] - 1e-6:
            stopping |= {"best_val_loss": metrics["val_loss"], "best_epoch": epoch, "bad_epochs": 0}
            best_weights = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        else:
            stopping["bad_epochs"] += 1
            stopping["stopped_early"] = (
                bool(cfg.patience) and stopping["bad_epochs"] >= cfg.patience
            )
        position = {"epoch": epoch + 1, "epoch_batches": 0, "step": position["step"]}
        save_checkpoint()
        if master:
            _log_epoch(run, epoch, metrics, step_losses)
            log.info("epoch %d: %s", epoch, {k: round(v, 4) for k, v in metrics.items()})

    manifest: dict[str, Any] = {}
    model_epoch = history[-1]["epoch"]
    if cfg.restore_best and best_weights is not None and stopping["best_epoch"] != model_epoch:
        model.load_state_dict(best_weights)  # the registered model: the best epoch's
        model_epoch = stopping["best_epoch"]
        log.info("restored the weights of epoch %d (lowest val_loss)", model_epoch)
    if master:
        manifest = _finish(
            ctx,
            run,
            model.cpu(),
            pre,
            config,
            features,
            history,
            world_size,
            config_hash,
            {
                "resumed_from": resumed_from,
                "steps": position["step"],
                "model_epoch": model_epoch,
                **stopping,
            },
        )
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return manifest


def join_process_group(backend: str, rank: int, world_size: int, timeout_s: int) -> None:
    """Join the job's process group through torchrun's store, under a prefix per attempt.

    After torchrun restarts the workers, the store still holds the previous attempt's keys
    (the old workers' addresses); a fresh prefix keeps the new group from connecting to them.
    """
    timeout = timedelta(seconds=timeout_s)
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world_size,
        is_master=rank == 0 and not agent_store,
        timeout=timeout,
    )
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group(
        backend,
        store=dist.PrefixStore(f"trainyard/attempt-{attempt}", store),
        rank=rank,
        world_size=world_size,
        timeout=timeout,
    )


def get_rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        # this process's own GPU only: reading every device's state would open a CUDA
        # context on each GPU of the node from every rank
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        cuda = state["cuda"]
        if isinstance(cuda, list):  # checkpoints that held every device's state
            torch.cuda.set_rng_state_all(cuda)
        else:
            torch.cuda.set_rng_state(cuda)


def _log_epoch(
    run: Any, epoch: int, metrics: dict[str, float], step_losses: list[tuple[int, float]]
) -> None:
    """One MLflow request per epoch: the epoch's metrics and the sampled step losses."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    now = int(time.time() * 1000)
    batch = [Metric(k, v, now, epoch) for k, v in metrics.items() if math.isfinite(v)]
    batch += [Metric("train_loss_step", v, now, s) for s, v in step_losses]
    MlflowClient().log_batch(run.info.run_id, metrics=batch)


def _start_mlflow_run(
    ctx: RunContext, features: dict[str, Any], world_size: int, resumed: dict[str, int] | None
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
            "trainyard.resumed": str(resumed is not None).lower(),
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
    progress: dict[str, Any],
) -> dict[str, Any]:
    """Package the model as an MLflow pyfunc, close the run, record the manifest."""
    import mlflow

    from pipeline_steps.steps.train.packaging import BUNDLE, ENTRY_POINT, bundle

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
    final = next(h for h in history if h["epoch"] == progress["model_epoch"])
    mlflow.set_tag("trainyard.model_epoch", str(progress["model_epoch"]))
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
        "resumed_from": progress["resumed_from"],
        "steps": progress["steps"],
        "stopped_early": progress["stopped_early"],
        "best_val_loss": round(progress["best_val_loss"], 6),
        "best_epoch": progress["best_epoch"],
        "model_epoch": progress["model_epoch"],
        "checkpoints": ctx.lake.path(ctx.run_dir, "checkpoints"),
    }
    return ctx.record("train", manifest)
