"""A tuning trial in a pod (``runtime: kubernetes``): the train step's pod with the trial's
parameters appended to its command. Imported only under that runtime."""

from __future__ import annotations

from typing import Any

from pipeline_steps.orchestration.step_pod import StepPodOperator
from pipeline_steps.orchestration.trials import TrialMixin


class PodTrialOperator(TrialMixin, StepPodOperator):
    """Claims a trial, runs ``train`` in the step image with its parameters, concludes it."""

    argv_field = "cmds"

    def __init__(self, *, slot: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slot = slot
