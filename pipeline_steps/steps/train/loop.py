"""Train step: the frozen training set → a PyTorch model, launched by torchrun.

Reads top to bottom: take tuned parameters when asked to, detect the processes from torchrun's
environment, open the training set, stop early when this run already trained with the same
settings and data, fit the preprocessing (rank 0) and share it, build the model, optimizer and
schedule, resume from the newest checkpoint, run the epochs (accumulate, clip, step; checkpoint
every N steps), validate, stop early or when a tuning trial is pruned, and (rank 0 only) finish
the MLflow run and record the manifest.

The pieces live beside it: ``step`` (one optimisation step, validation), ``distributed``
(process group, collectives, RNG states), ``state`` (the training in memory and as a checkpoint
holds it) and ``checkpoint`` (writing and resuming), ``hooks`` (tuning: tuned parameters, trial
reports and pruning), ``mlflow_run`` (the MLflow run), ``record`` (rank 0's end: the packaged
model and the manifest), ``data`` and ``models``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.fingerprints import json_sha256
from pipeline_steps.core.lake import Lake
from pipeline_steps.core.manifests import (
    FeaturesManifest,
    LoopPosition,
    ManifestError,
    TrainManifest,
    load_manifest,
)
from pipeline_steps.core.models import BatchShape
from pipeline_steps.core.settings import TrainSettings
from pipeline_steps.steps.train import checkpoint, distributed, hooks, mlflow_run, record
from pipeline_steps.steps.train.data import (
    Preprocessor,
    TensorSet,
    TrainingTable,
    epoch_batches,
)
from pipeline_steps.steps.train.distributed import Processes
from pipeline_steps.steps.train.heads import Head, fit_head
from pipeline_steps.steps.train.models import build
from pipeline_steps.steps.train.state import Fit
from pipeline_steps.steps.train.step import (
    apply_gradients,
    gpu_metrics,
    learn,
    make_optimizer,
    make_schedule,
    validation_sums,
)

log = logging.getLogger(__name__)


def train(ctx: RunContext) -> TrainManifest | None:
    """Train on ``training_sets/<run>/train.parquet``; return the step manifest on rank 0
    (None on the other ranks).

    Raises ``StepError`` when the training set is missing, empty or too small for the ranks.
    Resumes from the newest valid checkpoint of the same run, settings and world size, so a
    restarted worker or a retried task recomputes no finished step.
    """
    ctx, tuned = hooks.tuned(ctx)
    cfg, lake = ctx.settings.train, ctx.lake
    features = ctx.upstream(FeaturesManifest)
    procs = distributed.detect(cfg.device)
    device, rank, world_size = procs.device, procs.rank, procs.world_size

    # -- data: the frozen set, streamed by row groups --------------------------------------------
    label = features.label
    table = _training_table(lake, features, cfg, world_size)
    # Same settings, data layout and world size as a finished run of this run id: nothing to do.
    config_hash = _config_hash(ctx, features, table, world_size)
    done = _already_trained(ctx, config_hash)
    if done is not None:
        return done if procs.master else None
    if procs.distributed:
        distributed.join_process_group(procs, cfg.collective_timeout_s)
    pre = _preprocessing(table, features, procs)

    # -- model, optimizer, schedule ----------------------------------------------------------------
    torch.manual_seed(cfg.seed)
    head = _head(table, features)
    shape = BatchShape(
        cardinalities=pre.cardinalities,
        numeric_width=pre.numeric_width,
        outputs=head.outputs,
        task=head.task,
    )
    model, config = build(cfg, shape)
    model = model.to(device)
    config["head"] = head.to_dict()  # recorded with the model: its predictions need it
    parameters = list(model.parameters())
    optimizer = make_optimizer(model, cfg.learning_rate, cfg.weight_decay)
    micro_batches = _micro_batches(table, cfg, world_size)
    total_steps = sum(micro_batches) // cfg.grad_accumulation
    scheduler = make_schedule(optimizer, round(cfg.warmup_fraction * total_steps), total_steps)
    amp = procs.use_cuda and cfg.amp  # bfloat16: no loss scaling needed

    # -- resume -----------------------------------------------------------------------------------
    fit = Fit(model=model, optimizer=optimizer, scheduler=scheduler)
    folder = f"{ctx.run_dir}/checkpoints"
    checkpoints = checkpoint.Checkpoints(lake, folder, config_hash, cfg.keep_checkpoints, procs)
    resumed_from = checkpoints.resume(fit)
    ddp_model: Any = (
        DistributedDataParallel(model, device_ids=[procs.local_rank] if procs.use_cuda else None)
        if procs.distributed
        else model
    )
    hook = hooks.epoch_hook(ctx, procs)  # a tuning trial reports each epoch; its pruner may stop it
    run_id = None
    if procs.master:  # rank 0 alone keeps the MLflow run (and so logs, packages and records)
        run_id = mlflow_run.start(
            ctx, features, world_size, resumed_from, tuned, hook.parent_run_id
        )

    # -- epochs -----------------------------------------------------------------------------------
    pruned_at: int | None = None
    while fit.position.epoch < cfg.epochs and not fit.stopping.stopped_early:
        epoch, batches, step = fit.position.epoch, fit.position.epoch_batches, fit.position.step
        if batches == 0:
            # Dropout noise depends only on (seed, epoch, rank); mid-epoch, the checkpoint's
            # RNG states carry on instead.
            torch.manual_seed(cfg.seed + 1_000 * epoch + rank)
        ddp_model.train()
        started, seen = time.perf_counter(), 0
        loss_sum = torch.zeros((), device=device)
        step_losses: list[tuple[int, float]] = []
        stream = _batches(table, pre, label, cfg, procs, epoch, skip=batches)
        for batch in stream:
            if batches == micro_batches[epoch]:
                break
            batch = batch.to(device) if procs.use_cuda else batch
            stepping = (batches + 1) % cfg.grad_accumulation == 0
            quiet = ddp_model.no_sync() if procs.distributed and not stepping else nullcontext()
            with quiet:  # gradients of a non-final accumulation batch stay local
                loss = learn(ddp_model, head, batch, cfg.grad_accumulation, amp)
            loss_sum += loss * len(batch)
            seen += len(batch)
            batches += 1
            if not stepping:
                continue
            apply_gradients(parameters, optimizer, scheduler, cfg.grad_clip)
            step += 1
            if step % cfg.log_every == 0:
                step_losses.append((step, float(loss.detach())))
            mid_epoch = batches < micro_batches[epoch]
            if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and mid_epoch:
                checkpoints.write(fit, LoopPosition(epoch=epoch, epoch_batches=batches, step=step))
        elapsed = time.perf_counter() - started

        validation = validation_sums(
            model, head, table, pre, label, cfg.batch_size, device, amp, rank, world_size
        )
        learning_rate = float(scheduler.get_last_lr()[0])
        metrics = _epoch_metrics(head, loss_sum, seen, validation, elapsed, learning_rate, procs)
        fit.end_epoch(epoch, metrics, cfg.patience, step)
        checkpoints.write(fit, fit.position)
        if run_id is not None:
            mlflow_run.log_epoch(run_id, epoch, metrics, step_losses)
            log.info("epoch %d: %s", epoch, {k: round(v, 4) for k, v in metrics.items()})
        if hook.on_epoch_end(fit.history[-1]):
            pruned_at = epoch
            break
    hook.close()

    # -- the model of the best epoch, packaged and recorded ----------------------------------------
    model_epoch = int(fit.history[-1]["epoch"])
    if cfg.restore_best and fit.best_weights is not None and fit.stopping.best_epoch != model_epoch:
        model.load_state_dict(fit.best_weights)  # the registered model: the best epoch's
        model_epoch = fit.stopping.best_epoch
        log.info("restored the weights of epoch %d (lowest val_loss)", model_epoch)
    manifest = None
    if run_id is not None:  # rank 0
        trained = record.Trained(
            fit=fit,
            config_hash=config_hash,
            mlflow_run_id=run_id,
            world_size=world_size,
            resumed_from=resumed_from,
            model_epoch=model_epoch,
            pruned_at=pruned_at,
            tuned=tuned,
        )
        manifest = record.finish(ctx, features, pre, config, trained)
    if procs.distributed:
        distributed.leave_process_group()
    return manifest


def _training_table(
    lake: Lake, features: FeaturesManifest, cfg: TrainSettings, world_size: int
) -> TrainingTable:
    """The frozen training set, by row groups; ``StepError`` when it is missing, empty or has
    fewer row groups than the training processes."""
    path = features.sets.train.path
    if not lake.fs.exists(path):
        raise StepError(f"training set {path} does not exist; run the features step first")
    columns = [*features.feature_columns, features.label]
    table = TrainingTable(path, lake.fs, columns, cfg.seed, cfg.validation_fraction)
    if table.rows == 0:
        raise StepError(f"training set {path} has no rows")
    if len(table.group_rows) < world_size:
        raise StepError(
            f"training set {path} has {len(table.group_rows)} row group(s), fewer than the "
            f"{world_size} training processes; lower features.row_group_rows or the process count"
        )
    return table


def _config_hash(
    ctx: RunContext, features: FeaturesManifest, table: TrainingTable, world_size: int
) -> str:
    """What a finished training and its checkpoints are valid for: the train settings, the
    training set and its row groups, and the world size."""
    train = ctx.settings.to_dict()["train"]
    return json_sha256([train, features.training_set_sha256, table.group_rows, world_size])


def _preprocessing(
    table: TrainingTable, features: FeaturesManifest, procs: Processes
) -> Preprocessor:
    """The preprocessing, fitted on the fitting rows of the training window only, by rank 0 in
    one streaming pass; the other ranks receive it and read only their own shards."""
    fitted = None
    if procs.master:
        everything = list(range(len(table.group_rows)))
        fitted = Preprocessor.fit(
            table.frames(everything, validation=False), features.categorical, features.numeric
        ).to_dict()
    return Preprocessor.from_dict(distributed.broadcast(fitted, procs))


def _head(table: TrainingTable, features: FeaturesManifest) -> Head:
    """The task's head, its labels checked on the training set (regression: scaled by its
    mean and deviation; every rank reads the same label column, so every rank agrees)."""
    import pyarrow.parquet as pq

    with table.filesystem.open(table.path, "rb") as fh:
        labels = pq.read_table(fh, columns=[features.label]).column(features.label)
    return fit_head(features.task, features.classes, labels, table.path)


def _micro_batches(table: TrainingTable, cfg: TrainSettings, world_size: int) -> list[int]:
    """Each epoch's batches per process, whole accumulation groups only; ``StepError`` when
    the first epoch has too few rows per process for one optimizer step."""
    micro_batches = [
        table.steps_per_epoch(e, cfg.batch_size, world_size)
        // cfg.grad_accumulation
        * cfg.grad_accumulation
        for e in range(cfg.epochs)
    ]
    if micro_batches[0] == 0:
        raise StepError(
            f"training set {table.path} has too few rows per process for one step of "
            f"train.batch_size={cfg.batch_size} x train.grad_accumulation={cfg.grad_accumulation}"
        )
    return micro_batches


def _batches(
    table: TrainingTable,
    pre: Preprocessor,
    label: str,
    cfg: TrainSettings,
    procs: Processes,
    epoch: int,
    skip: int,
) -> Iterator[TensorSet]:
    """This rank's batches of ``epoch``, from batch ``skip`` on (``epoch_batches``)."""
    return epoch_batches(
        table,
        pre,
        label,
        batch_size=cfg.batch_size,
        epoch=epoch,
        rank=procs.rank,
        world_size=procs.world_size,
        shuffle_buffer=cfg.shuffle_buffer,
        skip=skip,
        prefetch_buffers=cfg.prefetch,
        workers=cfg.data_workers,
        pin_memory=procs.use_cuda,
    )


def _epoch_metrics(
    head: Head,
    loss_sum: torch.Tensor,
    seen: int,
    validation: torch.Tensor,
    elapsed: float,
    learning_rate: float,
    procs: Processes,
) -> dict[str, float]:
    """An epoch's metrics over every rank: this rank's training loss sum and rows and its
    ``validation_sums``, added up over the ranks, as losses, the task's validation metric
    (AUC, accuracy or RMSE), throughput, the learning rate, and on a GPU its memory peak and
    utilisation."""
    sums = torch.cat(
        [torch.tensor([loss_sum.item(), float(seen)], dtype=torch.float64), validation]
    )
    train_loss, rows, *summed = distributed.sum_over_ranks(sums, procs).tolist()
    metrics = {
        "train_loss": train_loss / max(rows, 1.0),
        **head.validation_metrics(summed),
        "samples_per_s": rows / max(elapsed, 1e-9),
        "learning_rate": learning_rate,
    }
    if procs.use_cuda:
        metrics |= gpu_metrics(procs.device)
    return metrics


def _already_trained(ctx: RunContext, config_hash: str) -> TrainManifest | None:
    """This run's recorded train manifest, marked ``cached`` (and logged so), when it was trained
    with ``config_hash``; None when it was not (or its manifest is not one this version reads)."""
    if not ctx.lake.exists(ctx.run_dir, "train.json"):
        return None
    recorded = ctx.lake.read_json(ctx.run_dir, "train.json")
    if not isinstance(recorded, dict) or recorded.get("config_hash") != config_hash:
        return None
    where = ctx.lake.path(ctx.run_dir, "train.json")
    try:
        status = "pruned" if recorded.get("status") == "pruned" else "cached"
        done = load_manifest(TrainManifest, {**recorded, "status": status}, where)
    except ManifestError as exc:
        log.warning("%s; training again", exc)
        return None
    log.info("run %s already trained with these settings and data: cached", ctx.run_id)
    return done
