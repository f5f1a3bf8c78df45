"""The Optuna study of a tuning target: its name, storage, sampler, pruner and lock.

A study tunes one target: the registered model, the search space and the frozen training set of
one logical date's window. Its name is derived from them (``study_name``), so a tuning run
started again for the same date continues the same study. Trials are ask-and-tell: the Airflow
task asks (``trials.claim``), the training process reports each epoch's validation loss and asks
the pruner (``trials.TrialReporter``), the task tells the outcome (``trials.conclude``).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipeline_steps.core.locks import store_lock
from pipeline_steps.core.manifests import FeaturesManifest
from pipeline_steps.core.settings import Settings, TuningSettings
from pipeline_steps.tuning.space import SearchSpace

log = logging.getLogger(__name__)

RUN_ATTR = "trainyard.run_id"
"""Trial user attribute: the tuning run (Airflow run id) that asked the trial."""
SLOT_ATTR = "trainyard.slot"
"""Trial user attribute: ``<run>#<map index>``, the mapped task that owns the trial."""
SETTINGS_ATTR = "trainyard.settings"
"""Trial user attribute: the train settings the trial drew, as the settings take them."""
PARENT_ATTR = "mlflow_parent_run_id"
"""Study user attribute: the study's parent MLflow run."""


def study_name(settings: Settings, space: SearchSpace, features: FeaturesManifest) -> str:
    """``<registered model>.<space>.<first>_<last>.<training set hash[:8]>``: the same target
    (model, search space, training window and its data) always gives the same study."""
    days = features.train_days
    return (
        f"{settings.mlflow.registered_model}.{space.name}."
        f"{days[0]}_{days[-1]}.{features.training_set_sha256[:8]}"
    )


def storage(cfg: TuningSettings) -> Any:
    """The RDB storage with heartbeats on (stale trials are found by ``fail_stale``)."""
    import optuna

    url = cfg.storage
    engine: dict[str, Any] = {}
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = {"connect_args": {"timeout": 60}}  # trial processes write at the same time
    else:
        engine = {"pool_pre_ping": True}
    # Opening a storage creates its tables on first use; two first uses at once (two teams'
    # first studies in one database) collided on PostgreSQL's CREATE TYPE without this lock.
    lock = store_lock(url, "optuna:schema", setting="tuning.storage", sqlite_suffix=".schema")
    with warnings.catch_warnings(), lock:
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RDBStorage(
            url,
            engine_kwargs=engine,
            heartbeat_interval=cfg.heartbeat_s,
            grace_period=cfg.stale_after_s,
        )


def make_sampler(cfg: TuningSettings, space: SearchSpace, seed: int) -> Any:
    """The configured sampler, seeded with ``seed``."""
    import optuna

    samplers = optuna.samplers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if cfg.sampler == "random":
            return samplers.RandomSampler(seed=seed)
        if cfg.sampler == "grid":
            return samplers.GridSampler(space.grid(), seed=seed)
        if cfg.sampler == "gp":
            return samplers.GPSampler(seed=seed, n_startup_trials=cfg.startup_trials)
        # multivariate TPE with the constant liar: parallel trials see each other as running
        return samplers.TPESampler(
            seed=seed, n_startup_trials=cfg.startup_trials, multivariate=True, constant_liar=True
        )


def make_pruner(cfg: TuningSettings, epochs: int) -> Any:
    """The configured pruner. A trial reports its validation loss after epoch ``e`` at step
    ``e + 1`` (epochs trained), so Hyperband's resources are epochs."""
    import optuna

    if cfg.pruner == "none" or epochs <= cfg.min_epochs:
        return optuna.pruners.NopPruner()
    if cfg.pruner == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=cfg.startup_trials, n_warmup_steps=cfg.min_epochs
        )
    return optuna.pruners.HyperbandPruner(
        min_resource=cfg.min_epochs, max_resource=epochs, reduction_factor=3
    )


def _optuna() -> Any:
    """Optuna, its messages sent through Python's logging at their own level rather than by its
    stderr handler (which a task's log shows as errors: "A new study created in RDB")."""
    import optuna

    optuna.logging.disable_default_handler()
    optuna.logging.enable_propagation()
    return optuna


def open_study(
    settings: Settings, name: str, *, space: SearchSpace | None = None, seed: int | None = None
) -> Any:
    """Load study ``name`` with the settings' pruner (and sampler, given the space)."""
    optuna = _optuna()

    cfg = settings.tuning
    sampler = make_sampler(cfg, space, cfg.seed if seed is None else seed) if space else None
    return optuna.load_study(
        study_name=name,
        storage=storage(cfg),
        sampler=sampler,
        pruner=make_pruner(cfg, settings.train.epochs),
    )


def create_study(settings: Settings, name: str, space: SearchSpace) -> Any:
    """Create study ``name`` (minimising validation loss), or load it when it exists."""
    optuna = _optuna()

    cfg = settings.tuning
    return optuna.create_study(
        study_name=name,
        storage=storage(cfg),
        sampler=make_sampler(cfg, space, cfg.seed),
        pruner=make_pruner(cfg, settings.train.epochs),
        direction="minimize",
        load_if_exists=True,
    )


def fail_stale(study: Any) -> int:
    """Fail the running trials whose process stopped sending heartbeats (killed, and no retry
    took them up within ``tuning.stale_after_s``); returns how many. Optuna's own heartbeat
    thread runs only inside ``study.optimize``, so trials send theirs themselves."""
    import optuna

    before = _count(study, optuna.trial.TrialState.FAIL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    failed = _count(study, optuna.trial.TrialState.FAIL) - before
    if failed:
        log.warning("study %s: %d stale trial(s) failed", study.study_name, failed)
    return failed


def _count(study: Any, state: Any) -> int:
    return len(study.get_trials(deepcopy=False, states=(state,)))


@contextlib.contextmanager
def study_lock(cfg: TuningSettings, name: str) -> Iterator[None]:
    """One claim at a time per study: a file lock beside a SQLite storage, an advisory lock on
    PostgreSQL. Claims count the run's running trials and seed the sampler by the study's trial
    count, which must not change between the count and the ask."""
    with store_lock(cfg.storage, f"study:{name}", setting="tuning.storage") as held:
        if not held:
            log.warning(
                "no claim lock for storage %s: parallel claims may exceed parallel_trials",
                cfg.storage,
            )
        yield
