"""A step's function by name, for every caller that runs a step in its own process.

``trainyard step <name>`` (:mod:`pipeline_steps.commands.cli`), ``trainyard replay``, the tests
and the benchmarks find a step's function here, from its one declaration in
:mod:`pipeline_steps.core.step_registry`. How a step is launched (its argv, torchrun) is the
orchestration layer's (:mod:`pipeline_steps.orchestration.launch`). No Airflow, and light to
import: a step's own module loads only when that step runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

from pipeline_steps.core.step_registry import step

if TYPE_CHECKING:  # the lake (pyarrow) stays unloaded until a step runs
    from pipeline_steps.core.context import RunContext
    from pipeline_steps.core.manifests import Manifest

StepFunction: TypeAlias = "Callable[[RunContext], Manifest | None]"
"""A step: the run context → the manifest it recorded (None on a training rank other than 0,
which records and prints nothing)."""


def step_function(name: str) -> StepFunction:
    """The function of step ``name``, imported on demand; ``StepError`` listing the steps
    when there is no such step."""
    module, _, attribute = step(name).function.partition(":")
    function: StepFunction = getattr(importlib.import_module(module), attribute)
    return function
