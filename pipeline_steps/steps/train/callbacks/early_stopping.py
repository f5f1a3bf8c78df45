"""Early stopping: the epoch with the lowest validation loss, its weights, and the end of the
training after ``train.patience`` epochs in a row without a better one.

Its state lives in the fit (``Fit.stopping``, ``Fit.best_weights``), so a checkpoint keeps it
and a resumed training goes on counting where it stopped.
"""

from __future__ import annotations

import logging

from pipeline_steps.steps.train.callbacks import Callback, Loop
from pipeline_steps.steps.train.state import EpochRecord

log = logging.getLogger(__name__)


class EarlyStopping(Callback):
    """Observes each epoch's ``val_loss``; keeps the best epoch's weights; stops the training
    after ``patience`` epochs without improvement (0: never)."""

    def __init__(self, patience: int) -> None:
        self.patience = patience

    def on_train_start(self, loop: Loop) -> None:
        if loop.fit.stopping.stopped_early:  # resumed from the checkpoint of the last epoch
            loop.request_stop("early stopping")

    def on_epoch_end(self, loop: Loop, record: EpochRecord) -> None:
        fit = loop.fit
        if fit.stopping.observe(int(record["epoch"]), record["val_loss"], self.patience):
            fit.keep_best()
        if fit.stopping.stopped_early:
            if loop.plan.master:
                log.info(
                    "early stopping after epoch %d: no lower val_loss in %d epochs",
                    int(record["epoch"]),
                    self.patience,
                )
            loop.request_stop("early stopping")
