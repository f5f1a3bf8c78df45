"""Train step: the frozen training set → a PyTorch model, launched by torchrun.

Reads top to bottom: take tuned parameters when asked to, detect the processes from torchrun's
environment, open the training set, stop early when this run already trained with the same
settings and data, find the newest checkpoint and the data layout it was written in, fit the
preprocessing (rank 0) and share it, build the model (sharded or not), optimizer and schedule,
resume, hand them to the ``Trainer`` with its callbacks, and (rank 0 only) fit the temperature
of the final model on the validation rows, finish the MLflow run and record the manifest.

The pieces live beside it: ``trainer`` (the loop: steps, validation, checkpoints),
``callbacks`` (early stopping, trial pruning, preemption, MLflow logging, progress, system
metrics, the stall watchdog), ``step`` (one optimisation step, validation), ``distributed``
(process group, collectives, RNG states), ``layout`` (which rows make each step, on any number
of processes), ``strategy`` (DDP or FSDP) and ``pipeline`` (stages), ``state`` (the training
in memory and as a checkpoint holds it) and ``checkpoint`` (writing and resuming), ``tuned``
(a tuning trial's parameters), ``calibration`` (the temperature fitted on the validation
rows), ``mlflow_run`` (the MLflow run), ``record`` (rank 0's end: the packaged model and the
manifest), ``data`` and ``models``.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import replace

import torch

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.fingerprints import json_sha256
from pipeline_steps.core.lake import Lake
from pipeline_steps.core.manifests import (
    Calibration,
    FeaturesManifest,
    ManifestError,
    TrainManifest,
    ValidationSplit,
    load_manifest,
)
from pipeline_steps.core.models import BatchShape
from pipeline_steps.core.pushgateway import Pushgateway
from pipeline_steps.core.setting_spec import runtime_settings
from pipeline_steps.core.settings import TrainSettings
from pipeline_steps.steps.train import checkpoint, distributed, mlflow_run, record, tuned
from pipeline_steps.steps.train.calibration import calibrate
from pipeline_steps.steps.train.callbacks import Callback
from pipeline_steps.steps.train.callbacks.early_stopping import EarlyStopping
from pipeline_steps.steps.train.callbacks.mlflow_logging import MlflowLogging, StallRecord
from pipeline_steps.steps.train.callbacks.preemption import Preemption
from pipeline_steps.steps.train.callbacks.progress import Progress
from pipeline_steps.steps.train.callbacks.pushed_gauges import PushedGauges
from pipeline_steps.steps.train.callbacks.system_metrics import SystemMetrics
from pipeline_steps.steps.train.callbacks.trial_pruning import TrialPruning, trial_pruning
from pipeline_steps.steps.train.callbacks.watchdog import StackRecord, Watchdog
from pipeline_steps.steps.train.data import (
    Preprocessor,
    TrainingTable,
    validation_batch_count,
)
from pipeline_steps.steps.train.distributed import Processes
from pipeline_steps.steps.train.heads import Head, fit_head
from pipeline_steps.steps.train.layout import Layout
from pipeline_steps.steps.train.models import build
from pipeline_steps.steps.train.precision import Precision
from pipeline_steps.steps.train.sharing import strategy
from pipeline_steps.steps.train.state import Fit
from pipeline_steps.steps.train.step import (
    make_optimizer,
    make_schedule,
    validation_batch_size,
)
from pipeline_steps.steps.train.strategy import Strategy
from pipeline_steps.steps.train.trainer import Trainer

log = logging.getLogger(__name__)


def train(ctx: RunContext) -> TrainManifest | None:
    """Train on ``training_sets/<run>/train.parquet``; return the step manifest on rank 0
    (None on the other ranks).

    Raises ``StepError`` when the training set is missing, empty or too small for the ranks.
    Resumes from the newest valid checkpoint of the same run and settings, on any number of
    processes, so a restarted worker or a retried task recomputes no finished step; raises
    ``Preempted`` (transient) after checkpointing on SIGTERM.
    """
    ctx, tuned_from = tuned.tuned(ctx)
    cfg, lake = ctx.settings.train, ctx.lake
    features = ctx.upstream(FeaturesManifest)
    procs = distributed.detect(cfg.device)

    # -- data: the frozen set, streamed by row groups --------------------------------------------
    table = _training_table(lake, features, cfg, ctx.domain.date_column)
    # Same settings and data as a finished run of this run id: nothing to do.
    config_hash = _config_hash(ctx, features, table)
    done = _already_trained(ctx, config_hash)
    if done is not None:
        return done if procs.master else None
    folder = f"{ctx.run_dir}/checkpoints"
    checkpoints = checkpoint.Checkpoints(lake, folder, config_hash, cfg.keep_checkpoints, procs)
    saved = checkpoints.latest()
    sharing = strategy(cfg, procs)
    # The epochs are cut by the world size the training started with, on any number of
    # processes (a pipeline's stages count as one: they read the same rows).
    readers = sharing.data.world_size
    layout = Layout(
        saved.layout_world_size if saved else readers, cfg.batch_size, cfg.grad_accumulation
    )
    _check_layout(table, layout, readers)
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
    model = model.to(procs.device)
    config["head"] = head.to_dict()  # recorded with the model: its predictions need it
    wrapped = sharing.wrap(model)  # before the optimizer: a sharded model's parameters change
    model = sharing.own(model, wrapped)  # what this process trains: a pipeline's stage
    optimizer = make_optimizer(model, cfg.learning_rate, cfg.weight_decay)
    micro_batches = _micro_batches(table, cfg, layout)
    total_steps = sum(micro_batches) // cfg.grad_accumulation
    scheduler = make_schedule(optimizer, round(cfg.warmup_fraction * total_steps), total_steps)

    # -- resume, then the epochs -------------------------------------------------------------------
    precision = Precision.of(cfg.precision, procs.device)
    fit = Fit(
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        strategy=sharing,
        precision=precision,
    )
    resumed_from = checkpoints.restore(fit, saved) if saved else None
    pruning = trial_pruning(ctx, procs)  # a tuning trial reports each epoch; its pruner may stop it
    run_id = None
    if procs.master:  # rank 0 alone keeps the MLflow run (and so logs, packages and records)
        parent = pruning.parent_run_id if pruning else None
        run_id = mlflow_run.start(ctx, features, procs.world_size, resumed_from, tuned_from, parent)
    trainer = Trainer(
        cfg=cfg,
        procs=procs,
        fit=fit,
        wrapped=wrapped,
        sharing=sharing,
        head=head,
        table=table,
        pre=pre,
        label=features.label,
        layout=layout,
        checkpoints=checkpoints,
        micro_batches=micro_batches,
        validation_forwards=_validation_forwards(table, cfg, procs, sharing),
        reseed=saved is not None and saved.world_size != procs.world_size,
        callbacks=_callbacks(ctx, procs, run_id, pruning),
    )
    trainer.train()

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
        calibrated = _calibration(ctx, final_model, head, table, pre, features.label)
        if calibrated is not None:  # the packaged model predicts with the fitted temperature
            config["head"] = replace(head, temperature=calibrated.temperature).to_dict()
        trained = record.Trained(
            fit=fit,
            config_hash=config_hash,
            mlflow_run_id=run_id,
            world_size=procs.world_size,
            resumed_from=resumed_from,
            model_epoch=model_epoch,
            pruned_at=pruning.pruned_at if pruning else None,
            tuned=tuned_from,
            calibration=calibrated,
            validation=ValidationSplit(
                by="days" if table.validation_days else "rows",
                days=list(table.validation_days),
                rows=table.rows - sum(table.fit_rows),
            ),
        )
        manifest = record.finish(ctx, features, pre, config, trained)
    if procs.distributed:
        distributed.leave_process_group()
    return manifest


def _calibration(
    ctx: RunContext,
    model: torch.nn.Module,
    head: Head,
    table: TrainingTable,
    pre: Preprocessor,
    label: str,
) -> Calibration | None:
    """The temperature fitted on the validation rows by rank 0 (``calibration``), logged; None
    when ``train.calibrate`` is off, the task's outputs are not calibrated (``regression``) or
    the training is a tuning trial (nothing is packaged)."""
    cfg = ctx.settings.train
    if not cfg.calibrate or not head.spec.calibrated or ctx.trial is not None:
        return None
    fitted = calibrate(model, head, table, pre, label, cfg.batch_size)
    log.info(
        "temperature %.4f fitted on %d validation rows: their log loss %.5f -> %.5f",
        fitted.temperature,
        fitted.rows,
        fitted.val_log_loss_before,
        fitted.val_log_loss_after,
    )
    return fitted


def _callbacks(
    ctx: RunContext, procs: Processes, run_id: str | None, pruning: TrialPruning | None
) -> list[Callback]:
    """The training's callbacks, in the order they hear each event: early stopping and
    pruning decide first, then progress, the MLflow metrics and the Pushgateway's gauges (rank
    0), the system metrics (each node's first process), the watchdog, and preemption (which may
    end the training at the event); the end goes to them in the reverse order."""
    cfg = ctx.settings.train
    progress = Progress(cfg.log_every_s)
    found: list[Callback] = [EarlyStopping(cfg.patience), *([pruning] if pruning else []), progress]
    mlflow = None
    if run_id is not None:  # a restarted attempt logs no step its run already holds
        logged = mlflow_run.logged_steps(run_id)
        mlflow = MlflowLogging(run_id, cfg.log_every, progress, logged=logged)
    if mlflow is not None:
        found.append(mlflow)
    pushed = _pushed_gauges(ctx, progress) if procs.master else None
    if pushed is not None:
        found.append(pushed)
    # rank 0's MLflow run on every rank: each node samples its system into it, and the rank
    # whose watchdog sees a stall records it there
    shared_run = distributed.broadcast(run_id, procs)
    if cfg.system_metrics_s and shared_run is not None and procs.local_rank == 0:
        node = int(os.environ.get("GROUP_RANK", "0"))
        found.append(SystemMetrics(shared_run, node, cfg.system_metrics_s))
    if cfg.stall_timeout_s:  # before preemption: a stop's checkpoint gets the allowance
        stalls = StackRecord(ctx.lake, f"{ctx.run_dir}/stalls", procs.rank)
        others = None
        if shared_run and not procs.master:
            others = StallRecord(shared_run, procs.rank, ctx.settings.mlflow.tracking_uri)
        hooks = [c.stalled for c in (pushed, mlflow, others) if c is not None]
        peers = _node_peers(procs)
        found.append(
            Watchdog(cfg.stall_timeout_s, cfg.stall_allowance_s, stalls, hooks, peers=peers)
        )
    found.append(Preemption(procs, cfg.preemption_grace_s))
    return found


def _node_peers(procs: Processes) -> list[int]:
    """The process ids of this node's other ranks (every rank takes part)."""
    here = (socket.gethostname(), os.getpid())
    ranks = distributed.gather(here, procs)
    return [pid for host, pid in ranks if host == here[0] and pid != here[1]]


def _pushed_gauges(ctx: RunContext, progress: Progress) -> PushedGauges | None:
    """The training's gauges on the Pushgateway (``monitoring.pushgateway_url``), when set."""
    url = ctx.settings.monitoring.pushgateway_url
    if not url:
        return None
    domain, train = ctx.settings.domain, ctx.settings.train
    return PushedGauges(
        Pushgateway(url),
        domain=domain.name,
        run=ctx.run_key,
        team=domain.team,
        every_s=train.log_every_s,
        stall_timeout_s=train.stall_timeout_s,
        stall_allowance_s=train.stall_allowance_s,
        progress=progress,
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


def _training_table(
    lake: Lake, features: FeaturesManifest, cfg: TrainSettings, day_column: str
) -> TrainingTable:
    """The frozen training set, by row groups, its validation rows chosen by
    ``train.validation_split`` (the days of ``day_column``, or rows); ``StepError`` when it is
    missing or empty."""
    path = features.sets.train.path
    if not lake.fs.exists(path):
        raise StepError(f"training set {path} does not exist; run the features step first")
    columns = [*features.feature_columns, features.label]
    by_day = day_column if cfg.validation_split == "days" else None
    table = TrainingTable(path, lake.fs, columns, cfg.seed, cfg.validation_fraction, by_day)
    if table.rows == 0:
        raise StepError(f"training set {path} has no rows")
    if by_day is not None and not table.validation_days:
        log.info(
            "validation rows drawn at random: the training set holds one day of %s, so "
            "train.validation_split: days cannot hold a day out",
            by_day,
        )
    return table


def _check_layout(table: TrainingTable, layout: Layout, world_size: int) -> None:
    """``StepError`` when the set has fewer row groups than the layout's processes, or
    ``world_size`` processes cannot share a step."""
    if len(table.fitting_groups) < layout.world_size:
        raise StepError(
            f"training set {table.path} has {len(table.fitting_groups)} row group(s) to fit, "
            "fewer than the "
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


_RUNTIME = runtime_settings(TrainSettings)
"""Train settings that change how a training runs, not what it computes: those declared
``runtime`` in :class:`TrainSettings`."""


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
        table.steps_per_epoch(e, cfg.batch_size, layout.world_size, cfg.min_steps_per_epoch)
        // cfg.grad_accumulation
        * cfg.grad_accumulation
        for e in range(cfg.epochs)
    ]
    if micro_batches[0] == 0:
        fitting = sum(table.fit_rows)
        raise StepError(
            f"training set {table.path} has too few rows per process for one step of "
            f"train.batch_size={cfg.batch_size} x train.grad_accumulation={cfg.grad_accumulation}"
            f": {fitting} row(s) to fit over {layout.world_size} process(es); lower "
            "train.batch_size (or the processes), or lengthen features.window_days"
        )
    return micro_batches


def _validation_forwards(
    table: TrainingTable, cfg: TrainSettings, procs: Processes, sharing: Strategy
) -> int:
    """Forward passes every rank makes in validation: a sharded model's forward is a
    collective, so as many as the rank with the most batches; 0 (no minimum) otherwise."""
    if not sharing.sharded:
        return 0
    size, readers = validation_batch_size(cfg.batch_size), sharing.data.world_size
    return max(validation_batch_count(table, size, r, readers) for r in range(readers))


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
