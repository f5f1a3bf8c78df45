"""A tuning run's beginning and end, and what the daily training takes from it.

``prepare``  create (or load) the study of the run's frozen training set, fail stale trials,
             open the study's parent MLflow run, and plan the trials still missing.
``finish``   fail the run's trials nobody will tell any more, record the best trial in the lake
             (``tuning/studies/<study>/best.json`` and ``tuning/best/<registered model>.json``)
             and in the parent run: the best trial, parameter importances, the optimisation
             history as plots, every trial as CSV.
``tuned_settings``  the settings of a training run with ``train.params_from: tuning``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
import time
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.lake import Lake
from pipeline_steps.core.manifests import (
    FeaturesManifest,
    ManifestError,
    TunedParameters,
    load_record,
)
from pipeline_steps.core.settings import Settings, SettingsError
from pipeline_steps.tuning.space import SearchSpace, load_space
from pipeline_steps.tuning.study import (
    PARENT_ATTR,
    RUN_ATTR,
    create_study,
    fail_stale,
    open_study,
    study_name,
)
from pipeline_steps.tuning.trials import fail_trial

log = logging.getLogger(__name__)
STUDY_TAG = "trainyard.study"


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """What a tuning run does: the study, the mapped trial slots, when trials stop starting."""

    study: str
    slots: list[int]
    deadline: float | None
    """Unix time after which no trial starts (``tuning.time_budget_s``); None: no budget."""
    finished: int
    """Trials of the study already complete or pruned."""
    parent_run_id: str


def best_path(settings: Settings) -> tuple[str, str]:
    return "tuning", f"best/{settings.mlflow.registered_model}.json"


def prepare(ctx: RunContext) -> Plan:
    """Create or continue the study of this run's training set and plan its missing trials."""
    import optuna

    settings = ctx.settings
    cfg = settings.tuning
    space = load_space(cfg.search_space, settings.train.model)
    if cfg.sampler == "grid":
        space.grid()  # a range without grid values fails now, naming the parameter
    features = ctx.upstream(FeaturesManifest)
    name = study_name(settings, space, features)
    study = create_study(settings, name, space)
    previous_space = study.user_attrs.get("search_space_sha256")
    if previous_space and previous_space != space.sha256:
        log.warning("study %s continues with a changed search space (%s)", name, space.path)
    for key, value in {
        "logical_date": ctx.logical_date.isoformat(),
        "training_set_sha256": features.training_set_sha256,
        "train_days": f"{features.train_days[0]}..{features.train_days[-1]}",
        "search_space": space.path,
        "search_space_sha256": space.sha256,
    }.items():
        study.set_user_attr(key, value)
    fail_stale(study)
    states = optuna.trial.TrialState
    finished = len(study.get_trials(deepcopy=False, states=(states.COMPLETE, states.PRUNED)))
    missing = max(0, cfg.trials - finished)
    parent = _parent_run(settings, study, space)
    deadline = time.time() + cfg.time_budget_s if cfg.time_budget_s else None
    log.info(
        "study %s: %d trial(s) finished, %d to run (sampler %s, pruner %s, %d at a time)",
        name,
        finished,
        missing,
        cfg.sampler,
        cfg.pruner,
        cfg.parallel_trials,
    )
    return Plan(
        study=name,
        slots=list(range(missing)),
        deadline=deadline,
        finished=finished,
        parent_run_id=parent,
    )


def _parent_run(settings: Settings, study: Any, space: SearchSpace) -> str:
    """The study's parent MLflow run in ``tuning.experiment``, created with the study."""
    from pipeline_steps.core.tracking import connect

    mlflow_cfg = dataclasses.replace(settings.mlflow, experiment=settings.tuning.experiment)
    client = connect(mlflow_cfg)
    known = study.user_attrs.get(PARENT_ATTR)
    if known:
        return str(known)
    experiment = client.get_experiment_by_name(mlflow_cfg.experiment)
    run = client.create_run(
        experiment.experiment_id,
        run_name=f"study {study.study_name}",
        tags={STUDY_TAG: study.study_name, "trainyard.kind": "study"},
    )
    cfg = settings.tuning
    for key, value in {
        "sampler": cfg.sampler,
        "pruner": cfg.pruner,
        "epochs": settings.train.epochs,
        "search_space": space.path,
        "logical_date": study.user_attrs.get("logical_date", ""),
        "train_days": study.user_attrs.get("train_days", ""),
    }.items():
        client.log_param(run.info.run_id, key, value)
    client.log_artifact(run.info.run_id, space.path)
    study.set_user_attr(PARENT_ATTR, run.info.run_id)
    return str(run.info.run_id)


def finish(ctx: RunContext, study_name: str) -> TunedParameters:
    """Close this run's part of the study and record its best trial (see the module doc).

    Raises ``StepError`` when the study has no complete trial yet."""
    import optuna

    settings = ctx.settings
    study = open_study(settings, study_name)
    states = optuna.trial.TrialState
    for trial in study.get_trials(deepcopy=False, states=(states.RUNNING,)):
        if trial.user_attrs.get(RUN_ATTR) == ctx.run_id:  # its task ended without telling
            fail_trial(study, trial.number, "its task ended without an outcome")
    fail_stale(study)
    counts = {s: len(study.get_trials(deepcopy=False, states=(s,))) for s in states}
    complete = study.get_trials(deepcopy=False, states=(states.COMPLETE,))
    if not complete:
        raise StepError(
            f"study {study_name} has no complete trial ({counts[states.PRUNED]} pruned, "
            f"{counts[states.FAIL]} failed); nothing to record. See the trial tasks' logs"
        )
    best = study.best_trial
    space = load_space(settings.tuning.search_space, settings.train.model)
    parent = str(study.user_attrs.get(PARENT_ATTR, ""))
    tuned = TunedParameters(
        study=study_name,
        trial=best.number,
        value=float(best.value),
        params=dict(best.user_attrs.get("trainyard.settings", {})),
        logical_date=str(study.user_attrs.get("logical_date", ctx.logical_date.isoformat())),
        training_set_sha256=str(study.user_attrs.get("training_set_sha256", "")),
        search_space=space.path,
        search_space_sha256=space.sha256,
        trials_complete=counts[states.COMPLETE],
        trials_pruned=counts[states.PRUNED],
        trials_failed=counts[states.FAIL],
        mlflow_parent_run_id=parent,
        mlflow_run_id=str(best.user_attrs.get("mlflow_run_id", "")),
        recorded_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    from pipeline_steps.core.manifests import to_json

    payload = to_json(tuned)
    ctx.lake.write_json(payload, "tuning", "studies", study_name, "best.json")
    ctx.lake.write_json(payload, *best_path(settings))
    if parent:
        _log_study(settings, study, parent, tuned)
    return tuned


def _log_study(settings: Settings, study: Any, parent: str, tuned: TunedParameters) -> None:
    """The parent run's artifacts: best trial, importances (JSON + plot), history plot, trials."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna
    from optuna.visualization import matplotlib as plots

    from pipeline_steps.core.manifests import to_json
    from pipeline_steps.core.tracking import connect

    client = connect(dataclasses.replace(settings.mlflow, experiment=settings.tuning.experiment))
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        folder = Path(tmp)
        (folder / "best_trial.json").write_text(json.dumps(to_json(tuned), indent=2))
        study.trials_dataframe().to_csv(folder / "trials.csv", index=False)
        plots.plot_optimization_history(study)
        plt.savefig(folder / "optimization_history.png", dpi=110, bbox_inches="tight")
        try:
            importances = optuna.importance.get_param_importances(study)
        except (RuntimeError, ValueError) as exc:  # too few complete trials to fit the model
            log.info("no parameter importances yet: %s", exc)
        else:
            (folder / "param_importances.json").write_text(json.dumps(importances, indent=2))
            plots.plot_param_importances(study)
            plt.savefig(folder / "param_importances.png", dpi=110, bbox_inches="tight")
        plt.close("all")
        client.log_artifacts(parent, str(folder))
    client.log_metric(parent, "best_val_loss", tuned.value)
    client.log_metric(parent, "trials_complete", tuned.trials_complete)
    client.log_metric(parent, "trials_pruned", tuned.trials_pruned)
    client.log_metric(parent, "trials_failed", tuned.trials_failed)
    client.set_tag(parent, "trainyard.best_trial", str(tuned.trial))
    client.set_tag(parent, "trainyard.best_run_id", tuned.mlflow_run_id)
    client.set_terminated(parent, "FINISHED")  # a later run of the study adds children still


def read_best(lake: Lake, settings: Settings) -> TunedParameters:
    """The newest study's best trial for the registered model; ``StepError`` when none."""
    parts = best_path(settings)
    where = lake.path(*parts)
    if not lake.exists(*parts):
        raise StepError(
            f"train.params_from is 'tuning' but {where} does not exist: run "
            f"{settings.domain.name}_tuning first, or set train.params_from: settings"
        )
    try:
        return load_record(TunedParameters, lake.read_json(*parts), where)
    except ManifestError as exc:
        raise StepError(str(exc)) from exc


def tuned_settings(ctx: RunContext) -> tuple[RunContext, TunedParameters]:
    """``ctx`` with the train settings of the best tuning trial over the configured ones, and
    the trial they came from. ``StepError`` when there is none or its values are refused."""
    tuned = read_best(ctx.lake, ctx.settings)
    try:
        settings = ctx.settings.with_train({**tuned.params, "params_from": "tuning"})
    except SettingsError as exc:
        raise StepError(f"tuned parameters of study {tuned.study}: {exc}") from exc
    return dataclasses.replace(ctx, settings=settings), tuned
