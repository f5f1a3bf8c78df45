"""Train step: the frozen training set → a PyTorch model, launched by torchrun.

Reads top to bottom: take tuned parameters when asked to, detect the processes from torchrun's
environment, open the training set, stop early when this run already trained with the same
settings and data, find the newest checkpoint and the data layout it was written in, fit the
preprocessing (rank 0) and share it, build the model (sharded or not), optimizer and schedule,
resume, run the epochs (accumulate, clip, step; checkpoint every N steps, or at once on
SIGTERM), validate, stop early or when a tuning trial is pruned, and (rank 0 only) finish the
MLflow run and record the manifest.

The pieces live beside it: ``step`` (one optimisation step, validation), ``distributed``
(process group, collectives, RNG states), ``layout`` (which rows make each step, on any number
of processes), ``strategy`` (DDP or FSDP), ``preemption`` (SIGTERM), ``state`` (the training in
memory and as a checkpoint holds it) and ``checkpoint`` (writing and resuming), ``hooks``
(tuning: tuned parameters, trial reports and pruning), ``mlflow_run`` (the MLflow run),
``record`` (rank 0's end: the packaged model and the manifest), ``data`` and ``models``.
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from itertools import islice
from typing import NoReturn

import torch

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
    TrainingTable,
    validation_batch_count,
)
from pipeline_steps.steps.train.distributed import Processes
from pipeline_steps.steps.train.heads import Head, fit_head
from pipeline_steps.steps.train.layout import Layout, epoch_steps
from pipeline_steps.steps.train.models import build
from pipeline_steps.steps.train.preemption import Preempted, Preemption
from pipeline_steps.steps.train.state import Fit
from pipeline_steps.steps.train.step import (
    apply_gradients,
    gpu_metrics,
    learn,
    make_optimizer,
    make_schedule,
    validation_batch_size,
    validation_sums,
)
from pipeline_steps.steps.train.strategy import Strategy, strategy

log = logging.getLogger(__name__)


def train(ctx: RunContext) -> TrainManifest | None:
    """Train on ``training_sets/<run>/train.parquet``; return the step manifest on rank 0
    (None on the other ranks).

    Raises ``StepError`` when the training set is missing, empty or too small for the ranks.
    Resumes from the newest valid checkpoint of the same run and settings, on any number of
    processes, so a restarted worker or a retried task recomputes no finished step; raises
    ``Preempted`` (transient) after checkpointing on SIGTERM.
    """
    ctx, tuned = hooks.tuned(ctx)
    cfg, lake = ctx.settings.train, ctx.lake
    features = ctx.upstream(FeaturesManifest)
    procs = distributed.detect(cfg.device)
    device, rank, world_size = procs.device, procs.rank, procs.world_size

    # -- data: the frozen set, streamed by row groups --------------------------------------------
    label = features.label
    table = _training_table(lake, features, cfg)
    # Same settings and data as a finished run of this run id: nothing to do.
    config_hash = _config_hash(ctx, features, table)
    done = _already_trained(ctx, config_hash)
    if done is not None:
        return done if procs.master else None
    folder = f"{ctx.run_dir}/checkpoints"
    checkpoints = checkpoint.Checkpoints(lake, folder, config_hash, cfg.keep_checkpoints, procs)
    saved = checkpoints.latest()
    # The epochs are cut by the world size the training started with, on any number of processes.
    layout = Layout(
        saved.layout_world_size if saved else world_size, cfg.batch_size, cfg.grad_accumulation
    )
    _check_layout(table, layout, world_size)
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
    sharing = strategy(cfg.strategy, procs)
    wrapped = sharing.wrap(model)  # before the optimizer: a sharded model's parameters change
    parameters = list(model.parameters())
    optimizer = make_optimizer(model, cfg.learning_rate, cfg.weight_decay)
    micro_batches = _micro_batches(table, cfg, layout)
    total_steps = sum(micro_batches) // cfg.grad_accumulation
    scheduler = make_schedule(optimizer, round(cfg.warmup_fraction * total_steps), total_steps)
    amp = procs.use_cuda and cfg.amp  # bfloat16: no loss scaling needed
    validation_forwards = _validation_forwards(table, cfg, procs, sharing)

    # -- resume -----------------------------------------------------------------------------------
    fit = Fit(model=model, optimizer=optimizer, scheduler=scheduler, strategy=sharing)
    resumed_from = checkpoints.restore(fit, saved) if saved else None
    reseed = saved is not None and saved.world_size != world_size
    hook = hooks.epoch_hook(ctx, procs)  # a tuning trial reports each epoch; its pruner may stop it
    run_id = None
    if procs.master:  # rank 0 alone keeps the MLflow run (and so logs, packages and records)
        run_id = mlflow_run.start(
            ctx, features, world_size, resumed_from, tuned, hook.parent_run_id
        )
    preemption = Preemption(procs, cfg.preemption_grace_s)

    # -- epochs -----------------------------------------------------------------------------------
    pruned_at: int | None = None
    try:
        while fit.position.epoch < cfg.epochs and not fit.stopping.stopped_early:
            epoch, batches, step = fit.position.epoch, fit.position.epoch_batches, fit.position.step
            if batches == 0 or reseed:
                # Dropout noise depends only on (seed, epoch, rank); mid-epoch, the checkpoint's
                # RNG states carry on instead, or on another number of processes (seed, epoch,
                # step, rank).
                torch.manual_seed(cfg.seed + 1_000 * epoch + rank + 1_000_003 * (step * reseed))
                reseed = False
            wrapped.train()
            started, seen = time.perf_counter(), 0
            carried = fit.epoch_loss  # the epoch's loss before a resume, over every rank
            loss_sum = torch.zeros((), device=device)
            step_losses: list[tuple[int, float]] = []
            steps_left = (micro_batches[epoch] - batches) // cfg.grad_accumulation
            stream = epoch_steps(table, pre, label, cfg, layout, procs, epoch, skip=batches)
            for micro in islice(stream, steps_left):
                for i, batch in enumerate(micro):
                    batch = batch.to(device) if procs.use_cuda else batch
                    final = i == len(micro) - 1
                    # gradients of a non-final accumulation batch stay local
                    with nullcontext() if final else sharing.local_gradients(wrapped):
                        divisor = layout.loss_divisor(len(batch), world_size)
                        loss = learn(wrapped, head, batch, divisor, amp)
                    loss_sum += loss * len(batch)
                    seen += len(batch)
                batches += cfg.grad_accumulation
                apply_gradients(parameters, optimizer, scheduler, cfg.grad_clip, sharing.clip)
                step += 1
                if resumed_from is not None and step == resumed_from.step + 1 and procs.master:
                    log.info("resumed: optimizer step %d done on %d processes", step, world_size)
                if step % cfg.log_every == 0:
                    step_losses.append((step, float(loss.detach())))
                at = LoopPosition(epoch=epoch, epoch_batches=batches, step=step)
                mid_epoch = batches < micro_batches[epoch]
                due = bool(cfg.checkpoint_every) and step % cfg.checkpoint_every == 0 and mid_epoch
                if preemption.stop(step, settle=due):
                    fit.epoch_loss = _epoch_loss(carried, loss_sum, seen, procs)
                    _stop_preempted(checkpoints, fit, at, layout, preemption, run_id)
                if due:
                    fit.epoch_loss = _epoch_loss(carried, loss_sum, seen, procs)
                    checkpoints.write(fit, at, layout.world_size)
            elapsed = time.perf_counter() - started

            validation = validation_sums(
                model,
                head,
                table,
                pre,
                label,
                cfg.batch_size,
                device,
                amp,
                rank,
                world_size,
                forwards=validation_forwards,
            )
            learning_rate = float(scheduler.get_last_lr()[0])
            metrics = _epoch_metrics(
                head, loss_sum, seen, carried, validation, elapsed, learning_rate, procs
            )
            fit.end_epoch(epoch, metrics, cfg.patience, step)
            checkpoints.write(fit, fit.position, layout.world_size)
            if run_id is not None:
                mlflow_run.log_epoch(run_id, epoch, metrics, step_losses)
                log.info("epoch %d: %s", epoch, {k: round(v, 4) for k, v in metrics.items()})
            if hook.on_epoch_end(fit.history[-1]):
                pruned_at = epoch
                break
            if preemption.stop(step):  # taken during validation: the epoch's checkpoint stands
                _stop_preempted(checkpoints, fit, fit.position, layout, preemption, run_id)
    except BaseException:
        preemption.close(failed=True)
        raise
    preemption.close()
    hook.close()

    # -- the model of the best epoch, packaged and recorded ----------------------------------------
    model_epoch = int(fit.history[-1]["epoch"])
    best = cfg.restore_best and fit.stopping.best_epoch != model_epoch
    final_model = _final_model(fit, sharing, cfg, shape, procs)
    if best and final_model is not None and fit.best_weights is not None:
        final_model.load_state_dict(fit.best_weights)  # the registered model: the best epoch's
        model_epoch = fit.stopping.best_epoch
        log.info("restored the weights of epoch %d (lowest val_loss)", model_epoch)
    manifest = None
    if run_id is not None and final_model is not None:  # rank 0
        fit.model = final_model
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


def _stop_preempted(
    checkpoints: checkpoint.Checkpoints,
    fit: Fit,
    at: LoopPosition,
    layout: Layout,
    preemption: Preemption,
    run_id: str | None,
) -> NoReturn:
    """Every rank: checkpoint at ``at``, end the MLflow run (rank 0) and raise ``Preempted``."""
    path = checkpoints.write(fit, at, layout.world_size)
    took = preemption.seconds_since_signal()
    if run_id is not None:
        mlflow_run.preempted(at)
    where = f" as {path}" if path else ""
    taken = (
        f"SIGTERM during optimizer step {preemption.signalled_step}"
        if preemption.signalled_step is not None
        else "a peer took SIGTERM"
    )
    raise Preempted(
        f"{taken}: stopped after step {at.step} (epoch {at.epoch}), checkpointed{where} "
        f"{took:.2f} s after the signal; the retry resumes from it"
    )


def _final_model(
    fit: Fit, sharing: Strategy, cfg: TrainSettings, shape: BatchShape, procs: Processes
) -> torch.nn.Module | None:
    """The trained model as one plain module on rank 0 (None on the others): the model itself,
    or, sharded, a model of the same shape loaded with the gathered weights."""
    if not sharing.sharded:
        return fit.model
    weights = sharing.model_state(fit.model)  # every rank takes part; rank 0 holds the result
    if not procs.master:
        return None
    plain, _ = build(cfg, shape)
    plain.load_state_dict(weights)
    return plain


def _training_table(lake: Lake, features: FeaturesManifest, cfg: TrainSettings) -> TrainingTable:
    """The frozen training set, by row groups; ``StepError`` when it is missing or empty."""
    path = features.sets.train.path
    if not lake.fs.exists(path):
        raise StepError(f"training set {path} does not exist; run the features step first")
    columns = [*features.feature_columns, features.label]
    table = TrainingTable(path, lake.fs, columns, cfg.seed, cfg.validation_fraction)
    if table.rows == 0:
        raise StepError(f"training set {path} has no rows")
    return table


def _check_layout(table: TrainingTable, layout: Layout, world_size: int) -> None:
    """``StepError`` when the set has fewer row groups than the layout's processes, or
    ``world_size`` processes cannot share a step."""
    if len(table.group_rows) < layout.world_size:
        raise StepError(
            f"training set {table.path} has {len(table.group_rows)} row group(s), fewer than the "
            f"{layout.world_size} training processes; lower features.row_group_rows or the "
            "process count"
        )
    layout.check(world_size)


def _config_hash(ctx: RunContext, features: FeaturesManifest, table: TrainingTable) -> str:
    """What a finished training and its checkpoints are valid for: the train settings that
    change the result, the training set and its row groups. Not the number of processes (a
    checkpoint resumes on any) nor how they are launched and fed."""
    train = {k: v for k, v in ctx.settings.to_dict()["train"].items() if k not in _RUNTIME}
    return json_sha256([train, features.training_set_sha256, table.group_rows])


_RUNTIME = frozenset(
    {
        "nproc_per_node",
        "max_restarts",
        "collective_timeout_s",
        "preemption_grace_s",
        "keep_checkpoints",
        "prefetch",
        "data_workers",
        "log_every",
    }
)
"""Train settings that change how a training runs, not what it computes."""


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


def _micro_batches(table: TrainingTable, cfg: TrainSettings, layout: Layout) -> list[int]:
    """Each epoch's batches per layout rank, whole accumulation groups only; ``StepError`` when
    the first epoch has too few rows per process for one optimizer step."""
    micro_batches = [
        table.steps_per_epoch(e, cfg.batch_size, layout.world_size)
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


def _validation_forwards(
    table: TrainingTable, cfg: TrainSettings, procs: Processes, sharing: Strategy
) -> int:
    """Forward passes every rank makes in validation: a sharded model's forward is a
    collective, so as many as the rank with the most batches; 0 (no minimum) otherwise."""
    if not sharing.sharded:
        return 0
    size = validation_batch_size(cfg.batch_size)
    return max(
        validation_batch_count(table, size, r, procs.world_size) for r in range(procs.world_size)
    )


def _epoch_metrics(
    head: Head,
    loss_sum: torch.Tensor,
    seen: int,
    carried: tuple[float, float],
    validation: torch.Tensor,
    elapsed: float,
    learning_rate: float,
    procs: Processes,
) -> dict[str, float]:
    """An epoch's metrics over every rank: this rank's training loss sum and rows and its
    ``validation_sums``, added up over the ranks, as losses, the task's validation metric
    (AUC, accuracy or RMSE), throughput, the learning rate, and on a GPU its memory peak and
    utilisation. A resumed epoch's training loss takes in the loss ``carried`` by its
    checkpoint; its throughput, the rows since the resume."""
    sums = torch.cat(
        [torch.tensor([loss_sum.item(), float(seen)], dtype=torch.float64), validation]
    )
    train_loss, rows, *summed = distributed.sum_over_ranks(sums, procs).tolist()
    metrics = {
        "train_loss": (train_loss + carried[0]) / max(rows + carried[1], 1.0),
        **head.validation_metrics(summed),
        "samples_per_s": rows / max(elapsed, 1e-9),
        "learning_rate": learning_rate,
    }
    if procs.use_cuda:
        metrics |= gpu_metrics(procs.device)
    return metrics


def _epoch_loss(
    carried: tuple[float, float], loss_sum: torch.Tensor, seen: int, procs: Processes
) -> tuple[float, float]:
    """The epoch's training loss sum and rows so far over every rank, for a checkpoint (every
    rank calls it)."""
    sums = torch.tensor([loss_sum.item(), float(seen)], dtype=torch.float64)
    total, rows = distributed.sum_over_ranks(sums, procs).tolist()
    return carried[0] + total, carried[1] + rows


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
