"""How tuning reaches into training, from outside the loop.

``tuned``       with ``train.params_from: tuning`` (and not a trial): the context with the best
                tuning trial's train settings, and the trial they came from.
``EpochHook``   what the loop calls after each epoch: ``on_epoch_end`` says whether to stop,
                ``close`` once the epochs end; ``parent_run_id`` parents the MLflow run.
``epoch_hook``  a run's hook: ``TrialPruning`` for a tuning trial, ``NoHook`` otherwise.

The tuning package is imported only when training takes part in tuning: an ordinary training
loads neither it nor Optuna.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.manifests import TunedParameters
from pipeline_steps.steps.train import distributed
from pipeline_steps.steps.train.distributed import Processes
from pipeline_steps.steps.train.state import EpochRecord

if TYPE_CHECKING:
    from pipeline_steps.tuning.trials import TrialReporter

log = logging.getLogger(__name__)


def tuned(ctx: RunContext) -> tuple[RunContext, TunedParameters | None]:
    """``ctx`` with the best tuning trial's train settings and that trial, when training takes
    its parameters from tuning (``train.params_from: tuning``) and is not itself a trial;
    otherwise ``ctx`` and None. ``StepError`` when there is no best trial to take them from."""
    if ctx.settings.train.params_from != "tuning" or ctx.trial is not None:
        return ctx, None
    from pipeline_steps.tuning.results import tuned_settings

    ctx, parameters = tuned_settings(ctx)
    log.info(
        "training with the parameters of trial %d of study %s", parameters.trial, parameters.study
    )
    return ctx, parameters


class EpochHook(Protocol):
    """Called by the training loop on every rank, after each epoch's checkpoint."""

    @property
    def parent_run_id(self) -> str | None:
        """The MLflow run the training's run is a child of (None: a top-level run)."""
        ...

    def on_epoch_end(self, record: EpochRecord) -> bool:
        """Take the finished epoch (``epoch`` and its metrics); True stops training after it.
        Every rank must get the same answer."""
        ...

    def close(self) -> None:
        """The epochs ended (run out, stopped early or stopped by this hook)."""
        ...


class NoHook:
    """An ordinary training: nothing reported, never stopped."""

    parent_run_id: str | None = None

    def on_epoch_end(self, record: EpochRecord) -> bool:
        return False

    def close(self) -> None:
        pass


class TrialPruning:
    """A tuning trial: rank 0 reports each epoch's validation loss to the trial (``reporter``)
    and the study's pruner decides; its answer reaches every rank. The other ranks pass no
    reporter."""

    def __init__(self, number: int, processes: Processes, reporter: TrialReporter | None) -> None:
        self._number, self._processes, self._reporter = number, processes, reporter
        self.parent_run_id = reporter.parent_run_id if reporter else None

    def on_epoch_end(self, record: EpochRecord) -> bool:
        epoch = int(record["epoch"])
        stop = self._reporter.should_stop(epoch, record["val_loss"]) if self._reporter else None
        if not distributed.broadcast(stop, self._processes):
            return False
        log.info("trial %d pruned after epoch %d", self._number, epoch)
        return True

    def close(self) -> None:
        if self._reporter is not None:
            self._reporter.close()


def epoch_hook(ctx: RunContext, processes: Processes) -> EpochHook:
    """The hook of this training: ``TrialPruning`` for a tuning trial (its reporter opened on
    rank 0, which keeps the trial's heartbeat from now on), ``NoHook`` otherwise."""
    if ctx.trial is None:
        return NoHook()
    reporter = None
    if processes.master:
        from pipeline_steps.tuning.trials import TrialReporter

        reporter = TrialReporter(ctx.settings, ctx.trial.study, ctx.trial.number)
    return TrialPruning(ctx.trial.number, processes, reporter)
