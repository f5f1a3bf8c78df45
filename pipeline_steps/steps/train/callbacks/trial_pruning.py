"""A tuning trial's training: rank 0 reports each epoch's validation loss to the trial, the
study's pruner decides, and its answer reaches every rank.

The tuning package is imported only for a trial: an ordinary training loads neither it nor
Optuna.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pipeline_steps.core.context import RunContext
from pipeline_steps.steps.train import distributed
from pipeline_steps.steps.train.callbacks import Callback, Loop
from pipeline_steps.steps.train.distributed import Processes
from pipeline_steps.steps.train.state import EpochRecord

if TYPE_CHECKING:
    from pipeline_steps.tuning.trials import TrialReporter

log = logging.getLogger(__name__)


class TrialPruning(Callback):
    """Reports each epoch to the trial (``reporter``, rank 0's; the other ranks pass None) and
    stops the training when the pruner says so."""

    def __init__(self, number: int, processes: Processes, reporter: TrialReporter | None) -> None:
        self._number, self._processes, self._reporter = number, processes, reporter
        self.parent_run_id = reporter.parent_run_id if reporter else None
        self.pruned_at: int | None = None
        """The epoch after which the pruner stopped the trial."""

    def on_epoch_end(self, loop: Loop, record: EpochRecord) -> None:
        epoch = int(record["epoch"])
        stop = self._reporter.should_stop(epoch, record["val_loss"]) if self._reporter else None
        if distributed.broadcast(stop, self._processes):
            log.info("trial %d pruned after epoch %d", self._number, epoch)
            self.pruned_at = epoch
            loop.request_stop("pruned")

    def on_train_end(self, loop: Loop, error: BaseException | None) -> None:
        if error is None and self._reporter is not None:
            self._reporter.close()


def trial_pruning(ctx: RunContext, processes: Processes) -> TrialPruning | None:
    """The pruning of this training when it is a tuning trial (its reporter opened on rank 0,
    which keeps the trial's heartbeat from now on); None otherwise."""
    if ctx.trial is None:
        return None
    reporter = None
    if processes.master:
        from pipeline_steps.tuning.trials import TrialReporter

        reporter = TrialReporter(ctx.settings, ctx.trial.study, ctx.trial.number)
    return TrialPruning(ctx.trial.number, processes, reporter)
