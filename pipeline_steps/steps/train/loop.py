"""Train step: the frozen training set → a PyTorch model, launched by torchrun.

Reads top to bottom: detect the processes from torchrun's environment, open the training set,
stop early when this run already trained with the same settings and data, fit the preprocessing
(rank 0) and share it, build the model, optimizer and schedule, resume from the newest
checkpoint, run the epochs (accumulate, clip, step; checkpoint every N steps), validate and stop
early, and (rank 0 only) log to MLflow, package the model and record the manifest.

The pieces live beside it: ``step`` (one optimisation step, validation), ``distributed``
(process group, collectives, RNG states), ``state`` and ``checkpoint`` (what a resume needs),
``mlflow_run`` (the MLflow run), ``data`` and ``models``.
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.fingerprints import json_sha256
from pipeline_steps.core.manifests import (
    FeaturesManifest,
    LoopPosition,
    ManifestError,
    TrainManifest,
    load_manifest,
)
from pipeline_steps.evaluation.metrics import binned_auc
from pipeline_steps.steps.train import checkpoint, distributed, mlflow_run
from pipeline_steps.steps.train.data import Preprocessor, TrainingTable, epoch_batches
from pipeline_steps.steps.train.distributed import get_rng_state, set_rng_state
from pipeline_steps.steps.train.models import build_model, model_config
from pipeline_steps.steps.train.state import (
    EarlyStopping,
    EpochRecord,
    TrainingState,
    weights_sha256,
)
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


def train(ctx: RunContext) -> TrainManifest | None:
    """Train on ``training_sets/<run>/train.parquet``; return the step manifest on rank 0
    (None on the other ranks).

    Raises ``StepError`` when the training set is missing, empty or too small for the ranks.
    Resumes from the newest valid checkpoint of the same run, settings and world size, so a
    restarted worker or a retried task recomputes no finished step.
    """
    tuned = None
    if ctx.settings.train.params_from == "tuning" and ctx.trial is None:
        from pipeline_steps.tuning.results import tuned_settings

        ctx, tuned = tuned_settings(ctx)
        log.info("training with the parameters of trial %d of study %s", tuned.trial, tuned.study)
    cfg, lake = ctx.settings.train, ctx.lake
    features = ctx.upstream(FeaturesManifest)
    procs = distributed.detect(cfg.device)
    device, rank, world_size = procs.device, procs.rank, procs.world_size

    # -- data: the frozen set, streamed by row groups --------------------------------------------
    path, label = features.sets.train.path, features.label
    if not lake.fs.exists(path):
        raise StepError(f"training set {path} does not exist; run the features step first")
    columns = [*features.feature_columns, label]
    table = TrainingTable(path, lake.fs, columns, cfg.seed, cfg.validation_fraction)
    if table.rows == 0:
        raise StepError(f"training set {path} has no rows")
    if len(table.group_rows) < world_size:
        raise StepError(
            f"training set {path} has {len(table.group_rows)} row group(s), fewer than the "
            f"{world_size} training processes; lower features.row_group_rows or the process count"
        )
    # Same settings, data layout and world size as a finished run of this run id: nothing to do.
    config_hash = json_sha256(
        [
            ctx.settings.to_dict()["train"],
            features.training_set_sha256,
            table.group_rows,
            world_size,
        ]
    )
    done = _already_trained(ctx, config_hash)
    if done is not None:
        log.info("run %s already trained with these settings and data: cached", ctx.run_id)
        return done if procs.master else None
    if procs.distributed:
        distributed.join_process_group(procs, cfg.collective_timeout_s)
    # Preprocessing is fitted on the fitting rows of the training window only, by rank 0 in
    # one streaming pass; the other ranks receive it and read only their own shards.
    fitted = None
    if procs.master:
        everything = list(range(len(table.group_rows)))
        fitted = Preprocessor.fit(
            table.frames(everything, validation=False), features.categorical, features.numeric
        ).to_dict()
    pre = Preprocessor.from_dict(distributed.broadcast(fitted, procs))

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
    amp = procs.use_cuda and cfg.amp  # bfloat16: no loss scaling needed
    loss_fn = torch.nn.BCEWithLogitsLoss()

    # -- resume -----------------------------------------------------------------------------------
    folder = f"{ctx.run_dir}/checkpoints"
    position, stopping = LoopPosition(), EarlyStopping()
    history: list[EpochRecord] = []
    best_weights: dict[str, torch.Tensor] | None = None  # the lowest validation loss's model
    resumed = checkpoint.load_latest(lake, folder, config_hash)
    if resumed is not None:
        model.load_state_dict(resumed.model)
        optimizer.load_state_dict(resumed.optimizer)
        scheduler.load_state_dict(resumed.scheduler)
        position, stopping, history = resumed.position, resumed.stopping, resumed.history
        best_weights = resumed.best_model
        set_rng_state(resumed.rng[rank])
    resumed_from = position if resumed is not None else None
    ddp_model: Any = (
        DistributedDataParallel(model, device_ids=[procs.local_rank] if procs.use_cuda else None)
        if procs.distributed
        else model
    )

    def save_checkpoint(at: LoopPosition) -> None:
        rng = distributed.gather(get_rng_state(), procs)  # every rank's, for an exact resume
        if procs.master:
            state = TrainingState(
                position=at,
                stopping=stopping,
                history=history,
                model=model.state_dict(),
                best_model=best_weights,
                optimizer=optimizer.state_dict(),
                scheduler=scheduler.state_dict(),
                rng=rng,
                world_size=world_size,
                config_hash=config_hash,
            )
            checkpoint.save(lake, folder, state, keep=cfg.keep_checkpoints)

    # a tuning trial reports each epoch to its study, whose pruner may stop it
    reporter = None
    if ctx.trial is not None and procs.master:
        from pipeline_steps.tuning.trials import TrialReporter

        reporter = TrialReporter(ctx.settings, ctx.trial.study, ctx.trial.number)
    pruned_at: int | None = None
    # rank 0 alone keeps the MLflow run (and so logs, packages and records)
    parent = reporter.parent_run_id if reporter else None
    run_id = (
        mlflow_run.start(ctx, features, world_size, resumed_from, tuned, parent)
        if procs.master
        else None
    )

    # -- epochs -----------------------------------------------------------------------------------
    while position.epoch < cfg.epochs and not stopping.stopped_early:
        epoch, batches, step = position.epoch, position.epoch_batches, position.step
        if batches == 0:
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
            skip=batches,
            prefetch_buffers=cfg.prefetch,
            workers=cfg.data_workers,
            pin_memory=procs.use_cuda,
        )
        for batch in stream:
            if batches == micro_batches[epoch]:
                break
            batch = batch.to(device) if procs.use_cuda else batch
            stepping = (batches + 1) % cfg.grad_accumulation == 0
            quiet = ddp_model.no_sync() if procs.distributed and not stepping else nullcontext()
            with quiet:  # gradients of a non-final accumulation batch stay local
                loss = learn(ddp_model, loss_fn, batch, cfg.grad_accumulation, amp)
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
                save_checkpoint(LoopPosition(epoch=epoch, epoch_batches=batches, step=step))
        elapsed = time.perf_counter() - started

        sums = torch.cat(
            [
                torch.tensor([loss_sum.item(), float(seen)], dtype=torch.float64),
                validation_sums(
                    model, table, pre, label, cfg.batch_size, device, amp, rank, world_size
                ),
            ]
        )
        train_loss, rows, val_loss, val_rows, *hist = distributed.sum_over_ranks(
            sums, procs
        ).tolist()
        metrics: dict[str, float] = {
            "train_loss": train_loss / max(rows, 1.0),
            "val_loss": val_loss / max(val_rows, 1.0),
            "val_auc": binned_auc(hist[:AUC_BINS], hist[AUC_BINS:]),
            "samples_per_s": rows / max(elapsed, 1e-9),
            "learning_rate": float(scheduler.get_last_lr()[0]),
        }
        if procs.use_cuda:
            metrics |= gpu_metrics(device)
        history.append({"epoch": epoch, **metrics})
        if stopping.observe(epoch, metrics["val_loss"], cfg.patience):
            best_weights = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        position = LoopPosition(epoch=epoch + 1, epoch_batches=0, step=step)
        save_checkpoint(position)
        if run_id is not None:
            mlflow_run.log_epoch(run_id, epoch, metrics, step_losses)
            log.info("epoch %d: %s", epoch, {k: round(v, 4) for k, v in metrics.items()})
        if ctx.trial is not None:
            stop = reporter.should_stop(epoch, metrics["val_loss"]) if reporter else None
            if distributed.broadcast(stop, procs):
                pruned_at = epoch
                log.info("trial %d pruned after epoch %d", ctx.trial.number, epoch)
                break
    if reporter is not None:
        reporter.close()

    # -- the model of the best epoch, packaged and recorded ----------------------------------------
    model_epoch = int(history[-1]["epoch"])
    if cfg.restore_best and best_weights is not None and stopping.best_epoch != model_epoch:
        model.load_state_dict(best_weights)  # the registered model: the best epoch's
        model_epoch = stopping.best_epoch
        log.info("restored the weights of epoch %d (lowest val_loss)", model_epoch)
    manifest = None
    if run_id is not None:
        if ctx.trial is None:
            model_uri = mlflow_run.finish(ctx, model.cpu(), pre, config, features, model_epoch)
        else:  # a trial's result is its validation loss; the model is trained again if chosen
            model_uri = mlflow_run.finish_trial(pruned_at)
        final = next(h for h in history if h["epoch"] == model_epoch)
        manifest = ctx.record(
            TrainManifest(
                status="trained" if pruned_at is None else "pruned",
                config_hash=config_hash,
                logical_date=ctx.logical_date.isoformat(),
                mlflow_run_id=run_id,
                model_uri=model_uri,
                world_size=world_size,
                epochs=len(history),
                train_rows=features.sets.train.rows,
                training_set_sha256=features.training_set_sha256,
                metrics={k: round(v, 6) for k, v in final.items() if k != "epoch"},
                resumed_from=resumed_from,
                steps=position.step,
                stopped_early=stopping.stopped_early,
                best_val_loss=round(stopping.best_val_loss, 6),
                best_epoch=stopping.best_epoch,
                model_epoch=model_epoch,
                checkpoints=lake.path(ctx.run_dir, "checkpoints"),
                weights_sha256=weights_sha256(model),
                history=[{k: float(v) for k, v in h.items()} for h in history],
                trial=ctx.trial,
                pruned_at_epoch=pruned_at,
                tuned_from=tuned,
            )
        )
    if procs.distributed:
        distributed.leave_process_group()
    return manifest


def _already_trained(ctx: RunContext, config_hash: str) -> TrainManifest | None:
    """This run's recorded train manifest, marked ``cached``, when it was trained with
    ``config_hash``; None when it was not (or its manifest is not one this version reads)."""
    if not ctx.lake.exists(ctx.run_dir, "train.json"):
        return None
    recorded = ctx.lake.read_json(ctx.run_dir, "train.json")
    if not isinstance(recorded, dict) or recorded.get("config_hash") != config_hash:
        return None
    where = ctx.lake.path(ctx.run_dir, "train.json")
    try:
        status = "pruned" if recorded.get("status") == "pruned" else "cached"
        return load_manifest(TrainManifest, {**recorded, "status": status}, where)
    except ManifestError as exc:
        log.warning("%s; training again", exc)
        return None
