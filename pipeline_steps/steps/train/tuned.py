"""Tuned parameters: with ``train.params_from: tuning`` (and not a trial), the training takes
the best tuning trial's train settings (``tuned``). A trial's own reports and pruning are the
``callbacks.trial_pruning`` callback.

The tuning package is imported only when training takes part in tuning: an ordinary training
loads neither it nor Optuna.
"""

from __future__ import annotations

import logging

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.manifests import TunedParameters

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
