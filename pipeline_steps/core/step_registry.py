"""Every step, declared once: its name, function, manifest, help, DAGs and launch.

One :class:`Step` per step, and everything else reads it: ``trainyard step <name>`` takes its
choices and help from here (:mod:`pipeline_steps.commands.cli`), a step's function is imported
from ``function`` on demand (:func:`pipeline_steps.steps.registry.step_function`), a recorded
manifest is loaded as ``manifest``, the DAG factory (:mod:`pipeline_steps.orchestration.domains`)
puts a step in the DAGs of ``dags`` as a task of id ``task_id``, and the one argv builder
(:mod:`pipeline_steps.orchestration.launch`) starts a ``distributed`` step under torchrun.

Adding a step: its module in ``steps/``, its manifest in :mod:`pipeline_steps.core.manifests`,
and one entry in ``REGISTRY`` below. ``tests/unit/test_step_registry.py`` checks that every
entry reaches the CLI, the manifest loader and the DAG factory.

No Airflow and only the foundation (DAG files parse through it): functions are dotted paths,
so no step's heavy libraries load here.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline_steps.core.deployment import DAG_KINDS
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.manifests import (
    EvaluateManifest,
    FeaturesManifest,
    IngestManifest,
    Manifest,
    MonitorManifest,
    PromoteManifest,
    ReleaseManifest,
    TrainManifest,
    ValidateManifest,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """One step. Raises ``StepError`` naming the step when the entry contradicts itself."""

    name: str
    """``trainyard step <name>``; the ``step`` of its manifest and the id of its DAG task."""
    function: str
    """``module:attribute`` of the step's function (run context → manifest), imported only
    when the step runs: each step loads heavy libraries of its own (GX, Feast, torch, MLflow)."""
    manifest: type[Manifest]
    """What the step records and prints; its ``STEP`` is ``name``."""
    help: str
    """What the step does, in a few words (``trainyard step --help``)."""
    dags: tuple[str, ...]
    """The kinds of a domain's DAGs (:data:`pipeline_steps.core.deployment.DAG_KINDS`) whose
    chain of steps holds this one, in registry order."""
    distributed: bool = False
    """Written for ranks: the orchestration layer starts it under torchrun (as many processes
    as the runtime gives it), on the GPU pool at training's priority, and as a Job of several
    pods on several Kubernetes nodes. Its function returns None on a rank other than 0."""

    def __post_init__(self) -> None:
        if self.name != self.manifest.STEP:
            raise StepError(
                f"step {self.name!r}: its manifest {self.manifest.__name__} records step "
                f"{self.manifest.STEP!r}"
            )
        module, colon, attribute = self.function.partition(":")
        if not (module and colon and attribute):
            raise StepError(
                f"step {self.name!r}: function {self.function!r} is not 'module:attribute'"
            )
        unknown = [kind for kind in self.dags if kind not in DAG_KINDS]
        if unknown:
            raise StepError(
                f"step {self.name!r}: unknown DAG kind(s) {', '.join(unknown)}; "
                f"kinds: {', '.join(DAG_KINDS)}"
            )

    @property
    def task_id(self) -> str:
        """The id of the step's task in a DAG (the Kubernetes pod is ``trainyard-<task_id>``)."""
        return self.name


_EVERY_DAG = tuple(DAG_KINDS)

INGEST = Step(
    name="ingest",
    function="pipeline_steps.steps.ingest:ingest",
    manifest=IngestManifest,
    help="copy the day's rows from the source into the lake's raw partition",
    dags=_EVERY_DAG,
)
VALIDATE = Step(
    name="validate",
    function="pipeline_steps.steps.validate:validate",
    manifest=ValidateManifest,
    help="check the raw partition against its suite; validate or quarantine it",
    dags=_EVERY_DAG,
)
FEATURES = Step(
    name="features",
    function="pipeline_steps.steps.features:build_features",
    manifest=FeaturesManifest,
    help="build the point-in-time training set and holdout, materialize the features",
    dags=("training", "tuning"),
)
TRAIN = Step(
    name="train",
    function="pipeline_steps.steps.train:train",
    manifest=TrainManifest,
    help="train the challenger (torchrun ranks, checkpoints, an MLflow run)",
    # the tuning DAG trains too, as mapped trials of this step (orchestration.tuning)
    dags=("training",),
    distributed=True,
)
EVALUATE = Step(
    name="evaluate",
    function="pipeline_steps.steps.evaluate:evaluate",
    manifest=EvaluateManifest,
    help="score challenger and champion on the same holdout; apply the gate",
    dags=("training",),
)
PROMOTE = Step(
    name="promote",
    function="pipeline_steps.steps.promote:promote",
    manifest=PromoteManifest,
    help="register the challenger and stage it or move the champion alias, as the gate decided",
    dags=("training",),
)
MONITOR = Step(
    name="monitor",
    function="pipeline_steps.steps.monitor:monitor",
    manifest=MonitorManifest,
    help="check the day for drift and score the champion (and staged candidate) on it",
    dags=("drift_monitor",),
)
RELEASE = Step(
    name="release",
    function="pipeline_steps.steps.release:release",
    manifest=ReleaseManifest,
    help="release or retire the staged candidate, roll back a degraded champion",
    dags=("drift_monitor",),
)

REGISTRY: dict[str, Step] = {
    s.name: s for s in (INGEST, VALIDATE, FEATURES, TRAIN, EVALUATE, PROMOTE, MONITOR, RELEASE)
}
"""Every step by name, in the order the DAGs chain them."""

STEPS: tuple[str, ...] = tuple(s.name for s in REGISTRY.values() if "training" in s.dags)
"""The training pipeline's steps in run order (a training run records one manifest each)."""


def step(which: Step | str) -> Step:
    """The step called ``which`` (a :class:`Step` is itself); ``StepError`` listing the steps
    when there is none."""
    if isinstance(which, Step):
        return which
    if which not in REGISTRY:
        raise StepError(f"unknown step {which!r}; steps: {', '.join(REGISTRY)}")
    return REGISTRY[which]


def steps_of(kind: str) -> tuple[Step, ...]:
    """The steps the domain's DAG of ``kind`` chains, in order."""
    return tuple(s for s in REGISTRY.values() if kind in s.dags)
