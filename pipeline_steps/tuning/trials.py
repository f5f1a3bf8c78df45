"""One trial's life: claimed by its Airflow task, trained by the real train step, concluded.

``claim``      ask the study for a trial (or take back the one this task's earlier attempt
               asked: a retried trial resumes from its checkpoint with the same parameters),
               unless the run already trains ``parallel`` trials (``LaneBusy``).
``TrialReporter``  inside the training process: the per-epoch validation loss goes to the trial,
               the pruner says whether to stop, a thread keeps the trial's heartbeat.
``conclude``   tell the study what the train step's manifest says: COMPLETE with the best
               validation loss, or PRUNED; tag the trial's MLflow run with the state.
``abandon``    tell FAIL when the task gives up (its last attempt failed).
"""

from __future__ import annotations

import logging
import threading
import warnings
from dataclasses import dataclass
from typing import Any

from pipeline_steps.core.manifests import TrainManifest
from pipeline_steps.core.settings import Settings, SettingsError
from pipeline_steps.tuning.space import SearchSpace
from pipeline_steps.tuning.study import (
    PARENT_ATTR,
    RUN_ATTR,
    SETTINGS_ATTR,
    SLOT_ATTR,
    fail_stale,
    make_sampler,
    open_study,
    study_lock,
)

log = logging.getLogger(__name__)
DRAWS = 20
"""Draws a claim makes before giving up on a space whose combinations the settings refuse."""


class LaneBusy(RuntimeError):
    """The run already trains as many trials as it may at once; try again shortly."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim:
    """A trial a task trains: its number, drawn settings, and whether it was taken back."""

    study: str
    number: int
    settings: dict[str, Any]
    resumed: bool

    def overrides(self) -> list[str]:
        """``--set train.<name>=<value>`` for the train step's argv."""
        import json

        argv: list[str] = []
        for name, value in sorted(self.settings.items()):
            argv += ["--set", f"train.{name}={json.dumps(value)}"]
        return argv


def _slot(run_id: str, slot: int) -> str:
    return f"{run_id}#{slot}"


def claim(
    settings: Settings, study: str, space: SearchSpace, run_id: str, slot: int, parallel: int
) -> Claim:
    """The trial of mapped task ``slot`` of tuning run ``run_id``.

    Under the study's lock: a running trial this slot asked before is taken back; otherwise,
    when fewer than ``parallel`` of the run's trials are running, a new trial is asked with the
    sampler seeded by the study's size (the same seed and results give the same proposals).
    Raises ``LaneBusy`` when the run has ``parallel`` trials running."""
    import optuna

    with study_lock(settings.tuning, study):
        opened = open_study(settings, study)
        fail_stale(opened)
        running = opened.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        owned = [t for t in running if t.user_attrs.get(SLOT_ATTR) == _slot(run_id, slot)]
        if owned:
            trial = owned[0]
            log.info("trial %d of study %s taken back: it resumes", trial.number, study)
            opened._storage.record_heartbeat(trial._trial_id)
            return Claim(
                study=study,
                number=trial.number,
                settings=dict(trial.user_attrs[SETTINGS_ATTR]),
                resumed=True,
            )
        busy = sum(1 for t in running if t.user_attrs.get(RUN_ATTR) == run_id)
        if busy >= parallel:
            raise LaneBusy(f"{busy} trial(s) of run {run_id} are training (parallel={parallel})")
        seed = settings.tuning.seed * 1_000_003 + len(opened.get_trials(deepcopy=False))
        opened.sampler = make_sampler(settings.tuning, space, seed)
        for _ in range(DRAWS):
            with warnings.catch_warnings():  # trials send heartbeats themselves (see study)
                warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)
                trial = opened.ask()
            drawn = space.suggest(trial)
            problem = _refused(settings, drawn)
            if problem is None:
                break
            # a combination the settings refuse (heads not dividing the token width): not a
            # result, so FAIL, and draw again
            trial.set_user_attr("trainyard.refused", problem)
            opened.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            raise SettingsError(
                f"{space.path}: {DRAWS} draws in a row gave settings train refuses, e.g. {problem}"
            )
        trial.set_user_attr(RUN_ATTR, run_id)
        trial.set_user_attr(SLOT_ATTR, _slot(run_id, slot))
        trial.set_user_attr(SETTINGS_ATTR, drawn)
        opened._storage.record_heartbeat(trial._trial_id)
    return Claim(study=study, number=trial.number, settings=drawn, resumed=False)


def _refused(settings: Settings, drawn: dict[str, Any]) -> str | None:
    """Why the train settings refuse ``drawn`` over the configured ones (None: they accept)."""
    try:
        settings.with_train(drawn)
    except SettingsError as exc:
        return str(exc)
    return None


def conclude(settings: Settings, claim: Claim, manifest: TrainManifest) -> str:
    """Tell the study what the trial's train step recorded; returns the state told."""
    import optuna

    study = open_study(settings, claim.study)
    states = optuna.trial.TrialState
    if manifest.status == "pruned":
        state, value = states.PRUNED, None
    else:
        state, value = states.COMPLETE, manifest.best_val_loss
    trial_id = trial_id_of(study, claim.number)
    study._storage.set_trial_user_attr(trial_id, "mlflow_run_id", manifest.mlflow_run_id)
    frozen = study._storage.get_trial(trial_id)
    if frozen.state.is_finished():  # a retry after the tell: nothing left to say
        return str(frozen.state.name)
    study.tell(claim.number, value, state=state)
    tags = {"trainyard.trial_state": state.name}
    if manifest.pruned_at_epoch is not None:
        tags["trainyard.pruned_at_epoch"] = str(manifest.pruned_at_epoch)
    _tag_run(settings, manifest.mlflow_run_id, tags)
    return str(state.name)


def abandon(settings: Settings, claim: Claim, reason: str) -> None:
    """Tell FAIL: the trial's task gave up. The study goes on with its other trials."""
    fail_trial(open_study(settings, claim.study), claim.number, reason)


def trial_id_of(study: Any, number: int) -> int:
    """The storage's id of trial ``number`` of ``study`` (what ask-and-tell calls need)."""
    trial_id: int = study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
    return trial_id


def fail_trial(study: Any, number: int, reason: str) -> None:
    """Tell FAIL for trial ``number`` with ``reason`` as a user attribute, unless it is
    finished already."""
    import optuna

    trial_id = trial_id_of(study, number)
    if study._storage.get_trial(trial_id).state.is_finished():
        return
    study._storage.set_trial_user_attr(trial_id, "trainyard.failure", reason[:2000])
    study.tell(number, state=optuna.trial.TrialState.FAIL)


def _tag_run(settings: Settings, run_id: str, tags: dict[str, str]) -> None:
    from pipeline_steps.core.tracking import connect

    client = connect(settings.mlflow)
    for key, value in tags.items():
        client.set_tag(run_id, key, value)


class TrialReporter:
    """The training process's side of a trial: report each epoch's validation loss and ask the
    pruner; keep the trial's heartbeat while it trains (rank 0 only)."""

    def __init__(self, settings: Settings, study: str, number: int) -> None:
        self._study = open_study(settings, study)
        storage = self._study._storage
        self._trial_id = trial_id_of(self._study, number)
        parent = self._study.user_attrs.get(PARENT_ATTR)
        self.parent_run_id: str | None = str(parent) if parent else None
        """The study's MLflow run, the parent of the trial's run."""
        import optuna

        self._trial = optuna.trial.Trial(self._study, self._trial_id)
        self._stop = threading.Event()
        self._interval = settings.tuning.heartbeat_s
        storage.record_heartbeat(self._trial_id)
        self._beat = threading.Thread(target=self._heartbeat, name="trial-heartbeat", daemon=True)
        self._beat.start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._study._storage.record_heartbeat(self._trial_id)
            except Exception as exc:  # a lost heartbeat is a warning, not the trial's end
                log.warning("trial heartbeat not recorded: %s", exc)

    def should_stop(self, epoch: int, val_loss: float) -> bool:
        """Report ``val_loss`` after ``epoch`` (at step ``epoch + 1``, the epochs trained) and
        return whether the pruner stops the trial."""
        self._trial.report(val_loss, step=epoch + 1)
        return bool(self._trial.should_prune())

    def close(self) -> None:
        self._stop.set()
        self._beat.join(timeout=5)
