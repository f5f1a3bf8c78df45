"""What the steps hand each other: one frozen dataclass per step manifest, and the one loader.

A step records its manifest as ``runs/<run>/<step>.json`` and prints it as its last stdout line
(the XCom value). The JSON keeps the shape it always had; in code it is typed, so a renamed field
is a type error, not a ``KeyError`` three steps later. ``load_manifest`` (behind
``RunContext.upstream``) checks the step name, every field's type and that no field is missing
or unknown, and names the file and the field when a manifest is old or foreign; ``load_record``
reads the other records (trigger, usage, lineage) the same way. Which step records which
manifest, and the pipeline's step order, are in :mod:`pipeline_steps.core.step_registry`.

Records that are not step manifests live with their owners: the trigger in
:mod:`pipeline_steps.core.trigger`, usage and cost in :mod:`pipeline_steps.core.usage`, the code
version and lineage in :mod:`pipeline_steps.core.provenance`; metric directions with the tasks, in
:mod:`pipeline_steps.core.tasks`.

Only the standard library is imported: the runner factory reads manifests while DAGs parse.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

from pipeline_steps.core.errors import StepError

M = TypeVar("M", bound="Manifest")
T = TypeVar("T")

# A field carrying this metadata is left out of the JSON while it is None (it was never written
# as null: the run envelope before recording, a step's optional additions).
OMIT_NONE = {"omit_none": True}


class ManifestError(StepError):
    """A manifest is not what this version of trainyard reads; the message names file and field."""


# -- the steps' manifests -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class StepOutput:
    """What a ``trainyard`` command prints as its last line; ``step`` is the class's ``STEP``."""

    STEP: ClassVar[str] = ""

    def to_json(self) -> dict[str, Any]:
        """The JSON form: ``{"step": STEP, **fields}``."""
        return {"step": self.STEP, **to_json(self)}


@dataclass(frozen=True, kw_only=True, slots=True)
class Manifest(StepOutput):
    """Fields every step's manifest carries."""

    logical_date: str
    """The run's logical date D (ISO)."""
    run_id: str | None = field(default=None, metadata=OMIT_NONE)
    """Set when recorded under ``runs/<run>/`` (not part of the printed line)."""
    recorded_at: str | None = field(default=None, metadata=OMIT_NONE)
    """UTC time the manifest was recorded."""
    dag_id: str | None = field(default=None, metadata=OMIT_NONE)
    """The Airflow DAG whose task recorded it (``AIRFLOW_CTX_DAG_ID``); None run by hand."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RawPartition:
    """``raw/<dataset>/date=D/version=N/_manifest.json``; copied to ``validated/`` and
    ``quarantine/`` with the validation report's path."""

    dataset: str
    date: str
    version: int
    rows: int
    schema_fingerprint: str
    sha256: str
    """Content hash of the rows (schema + row-group chunks), whatever the source's batching."""
    source: str
    ingested_at: str
    code_version: str
    run_id: str
    validation_report: str | None = field(default=None, metadata=OMIT_NONE)


IngestStatus = Literal["written", "new_version", "cached", "pinned"]


@dataclass(frozen=True, kw_only=True, slots=True)
class IngestedPartition(RawPartition):
    """One dataset's partition as this run's ingest left it."""

    status: IngestStatus
    path: str


@dataclass(frozen=True, kw_only=True, slots=True)
class IngestManifest(Manifest):
    STEP: ClassVar[str] = "ingest"
    rows: int
    """Rows of the labelled dataset."""
    datasets: dict[str, IngestedPartition]


SchemaChangeKind = Literal["added", "removed", "widened", "retyped", "reordered"]
SchemaAction = Literal["failed", "dropped", "warned", "kept"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SchemaChange:
    """One column of a partition that differs from the dataset's schema (``against="schema"``:
    the domain's column types, which the suite checks) or from the previous raw version
    (``against="previous"``: the version before it of the same date, else the latest one of the
    previous date)."""

    column: str
    change: SchemaChangeKind
    against: Literal["schema", "previous"]
    before: str | None = None
    """The column's type (or, for ``reordered``, position) in the reference; None if absent."""
    after: str | None = None
    """The column's type (or position) in the partition; None if absent."""
    action: SchemaAction = "kept"
    """What validation did: ``failed`` (the run stops), ``dropped`` (left out of the suite run
    and of ``validated/``), ``warned``, or ``kept`` (recorded only)."""

    @property
    def label(self) -> str:
        """One readable phrase naming the column."""
        what = {
            "added": f"added ({self.after})",
            "removed": f"removed (was {self.before})",
            "widened": f"widened {self.before} -> {self.after}",
            "retyped": f"changed type {self.before} -> {self.after}",
            "reordered": f"moved from position {self.before} to {self.after}",
        }[self.change]
        return f"column {self.column!r} {what} against the {self.against} ({self.action})"


@dataclass(frozen=True, kw_only=True, slots=True)
class DatasetVerdict:
    """What the suite said about one dataset's partition."""

    success: bool
    status: Literal["validated", "cached"]
    report: str
    data_docs: str | None
    evaluated: int
    failed: int
    warnings: list[str]
    schema_changes: list[SchemaChange] = field(default_factory=list)
    """Columns added, removed, widened or moved, against the schema and the previous version."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DriftSummary:
    """The day's drift verdict that the validate step of earlier versions recorded; the full
    report was ``report`` (HTML) beside its JSON."""

    drift_detected: bool
    crossed: list[str]
    reference: str
    values: dict[str, float]
    report: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ValidateManifest(Manifest):
    STEP: ClassVar[str] = "validate"
    verdict: Literal["passed"]
    datasets: dict[str, DatasetVerdict]
    drift: DriftSummary | None = field(default=None, metadata=OMIT_NONE)
    """No longer written: drift is measured by the drift monitor (the ``monitor`` step). Read
    only from manifests recorded by earlier versions, whose validate step measured the day's
    drift for reading."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PartitionRef:
    """One raw version of a partition, as a run read it (validated copy or the version itself)."""

    version: int
    sha256: str


PartitionRefs = dict[str, dict[str, PartitionRef]]
"""dataset → ISO date → the raw version read: what a run knew of each day it used."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FrozenSet:
    """One frozen parquet file of a training set."""

    path: str
    rows: int
    positive_rate: float | None
    sha256: str


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainingSets:
    """The training days' rows and the holdout day's, frozen for this run."""

    train: FrozenSet
    holdout: FrozenSet


@dataclass(frozen=True, kw_only=True, slots=True)
class TimeRange:
    """A half-open range of event times (ISO, UTC)."""

    start: str
    end: str
    """Excluded."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FeaturesManifest(Manifest):
    """``training_sets/<run>/_manifest.json`` too (without ``materialized``)."""

    STEP: ClassVar[str] = "features"
    status: Literal["built", "cached"]
    train_days: list[str]
    holdout_day: str
    """The logical date D, the holdout's last day."""
    categorical: list[str]
    numeric: list[str]
    label: str
    key: str
    sets: TrainingSets
    inputs: dict[str, Any]
    """What the set was built from: partition hashes per dataset and date, the feature
    settings and the Feast repository's fingerprint (lineage; hashed into ``input_sha256``)."""
    input_sha256: str
    training_set_sha256: str
    materialized: TimeRange | None = field(default=None, metadata=OMIT_NONE)
    """The event-time range the run's online store holds, both ends included (absent when the
    set was cached)."""
    partitions: PartitionRefs = field(default_factory=dict)
    """The raw version of every partition the set was built from (a replay pins them)."""
    feast_dir: str = ""
    """This run's Feast registry, online store and offline sources (``features/runs/<run>``)."""
    holdout_days: list[str] = field(default_factory=list)
    """The holdout's days (``evaluate.holdout_days`` ending at D)."""
    task: str = "binary"
    """The domain's task (:mod:`pipeline_steps.core.tasks`); the label column holds 0/1, a class
    index into ``classes``, or a real number."""
    classes: list[str] = field(default_factory=list)
    """``multiclass``: the class names in the order of their indices."""

    @property
    def feature_columns(self) -> list[str]:
        return [*self.categorical, *self.numeric]


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopPosition:
    """Where a training loop stands: the epoch, the batches of it consumed, optimizer steps."""

    epoch: int = 0
    epoch_batches: int = 0
    step: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainManifest(Manifest):
    STEP: ClassVar[str] = "train"
    status: Literal["trained", "cached", "pruned"]
    """``pruned``: a tuning trial its study's pruner stopped (no model is packaged)."""
    config_hash: str
    mlflow_run_id: str
    model_uri: str
    world_size: int
    epochs: int
    train_rows: int
    training_set_sha256: str
    metrics: dict[str, float]
    """The registered epoch's metrics (train/val loss, val AUC, throughput, learning rate)."""
    resumed_from: LoopPosition | None
    steps: int
    stopped_early: bool
    best_val_loss: float
    best_epoch: int
    model_epoch: int
    checkpoints: str
    precision: str = ""
    """The precision the training computed in (``train.precision`` decided for its device:
    ``fp32``, ``bf16`` or ``fp16``)."""
    weights_sha256: str = ""
    """sha256 of the registered weights (every tensor of the state dict, in order, on the CPU):
    equal on a replay with the same code, settings and data."""
    fingerprint: str = ""
    """sha256 of what decides the model (``provenance.model_fingerprint``): ``config_hash`` (the
    train settings that change the result, the training set), the package's version and commit
    and torch's version. A challenger with its champion's fingerprint is not registered."""
    history: list[dict[str, float]] = field(default_factory=list)
    """Every epoch's metrics, in order (with ``epoch``)."""
    trial: TrialRef | None = field(default=None, metadata=OMIT_NONE)
    """Set when this training is a tuning trial (its model is not packaged)."""
    pruned_at_epoch: int | None = field(default=None, metadata=OMIT_NONE)
    """The epoch after which the pruner stopped the trial."""
    tuned_from: TunedParameters | None = field(default=None, metadata=OMIT_NONE)
    """With ``train.params_from: tuning``: the study's best trial whose parameters it used."""
    calibration: Calibration | None = field(default=None, metadata=OMIT_NONE)
    """The temperature fitted on the validation rows (``train.calibrate``, a task whose
    probabilities are calibrated); None otherwise."""
    validation: ValidationSplit | None = field(default=None, metadata=OMIT_NONE)
    """The validation rows early stopping, the best epoch and the temperature were judged on."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Calibration:
    """Temperature scaling of a trained classifier: the one temperature its outputs are divided
    by (recorded with the model's head), fitted on the validation rows the training held out,
    never on the holdout the evaluation judges it on."""

    temperature: float
    val_log_loss_before: float
    """The validation rows' log loss of the uncalibrated model (temperature 1)."""
    val_log_loss_after: float
    """The same with the temperature: never higher (1 is kept when nothing lowers it)."""
    rows: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ValidationSplit:
    """The rows a training held back for its validation loss (``train.validation_split``)."""

    by: Literal["days", "rows"]
    """``days``: every row of ``days``; ``rows``: rows drawn at random from every day."""
    days: list[str] = field(default_factory=list)
    rows: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialRef:
    """A trial of an Optuna study (``<domain>_tuning``)."""

    study: str
    number: int


@dataclass(frozen=True, kw_only=True, slots=True)
class TunedParameters:
    """``tuning/best/<registered model>.json`` (and ``tuning/studies/<study>/best.json``): the
    best trial of a study, what ``train.params_from: tuning`` trains with."""

    study: str
    trial: int
    value: float
    """The trial's objective: its best per-epoch validation loss."""
    params: dict[str, Any]
    """Train settings, as ``train.<name>`` takes them."""
    logical_date: str
    """The day whose training window the study tuned on."""
    training_set_sha256: str
    search_space: str
    search_space_sha256: str
    trials_complete: int
    trials_pruned: int
    trials_failed: int
    mlflow_parent_run_id: str
    mlflow_run_id: str
    """The best trial's child run."""
    recorded_at: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class HoldoutMetrics:
    """One model's metrics on the holdout (``positive_rate``, ``label_mean`` and ``rows`` are the
    holdout's). A metric that is not its task's is NaN (``class_recall`` empty), so manifests
    recorded before the tasks load as binary ones."""

    auc: float = float("nan")
    """``binary``: area under the ROC curve."""
    log_loss: float = float("nan")
    """``binary`` and ``multiclass``: mean cross-entropy of the probabilities."""
    accuracy: float = float("nan")
    """``binary``: share of rows on the right side of 0.5; ``multiclass``: of rows whose most
    probable class is the label."""
    positive_rate: float = float("nan")
    """``binary``: the holdout's share of positive rows."""
    rows: int
    brier: float = float("nan")
    """Brier score: mean squared error of the probabilities."""
    ece: float = float("nan")
    """Expected calibration error over ten equal-width probability bins."""
    task: str = "binary"
    """The task the metrics are of (:mod:`pipeline_steps.core.tasks`)."""
    macro_f1: float = float("nan")
    """``multiclass``: unweighted mean of the F1 scores of the classes labelled or predicted."""
    class_recall: dict[str, float] = field(default_factory=dict)
    """``multiclass``: each class's recall, by class name in index order (NaN for a class the
    holdout does not have)."""
    rmse: float = float("nan")
    """``regression``: root mean squared error, in the label's units."""
    mae: float = float("nan")
    """``regression``: mean absolute error, in the label's units."""
    r2: float = float("nan")
    """``regression``: coefficient of determination (1 - squared error / the label's variance)."""
    label_mean: float = float("nan")
    """``regression``: the holdout's mean label."""
    class_mae: float = float("nan")
    """``ordinal``: mean absolute distance between the predicted (median) and labelled class."""
    qwk: float = float("nan")
    """``ordinal``: quadratic weighted kappa of the predicted (median) and labelled classes."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Interval:
    """A difference of a metric (one model minus another) with its paired-bootstrap interval.

    ``low`` and ``high`` are the ``1 - confidence`` and ``confidence`` quantiles of the
    resampled differences: each a one-sided bound at ``confidence``, together a two-sided
    interval at ``2 * confidence - 1``. NaN where the metric is undefined on the rows."""

    estimate: float
    low: float
    high: float

    def describe(self, digits: int = 4) -> str:
        """``+0.0012 [-0.0030, +0.0051]``."""
        return f"{self.estimate:+.{digits}f} [{self.low:+.{digits}f}, {self.high:+.{digits}f}]"


@dataclass(frozen=True, kw_only=True, slots=True)
class SliceScores:
    """One model's metrics on the rows of one slice. A metric that is not its task's is NaN, so
    slices recorded before ``accuracy`` and ``rmse`` load as they were."""

    auc: float
    """``binary``: area under the ROC curve (NaN with one class); the slice metric."""
    log_loss: float
    """``binary`` and ``multiclass``: mean cross-entropy of the probabilities."""
    accuracy: float = float("nan")
    """``multiclass``: share of rows whose most probable class is the label; the slice
    metric."""
    rmse: float = float("nan")
    """``regression``: root mean squared error in the label's units; the slice metric, whose
    champion value scales ``gate.max_slice_rmse_rise``."""
    class_mae: float = float("nan")
    """``ordinal``: mean absolute class error; the slice metric."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SliceResult:
    """Both models on the holdout rows where ``column`` equals ``value``."""

    column: str
    value: str
    rows: int
    positives: int
    challenger: SliceScores
    champion: SliceScores | None = None
    differences: dict[str, Interval] = field(default_factory=dict)
    """Challenger minus champion on the task's slice metric (``binary``: AUC and log loss), for
    slices of at least ``gate.min_slice_rows`` rows (``binary``: with both classes); empty
    otherwise."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ScoredBaseline:
    """A reference model on the same holdout: ``trivial`` (the training window's delay rate for
    every row) or ``logistic_regression`` (on the same features)."""

    name: str
    metrics: HoldoutMetrics
    differences: dict[str, Interval] = field(default_factory=dict)
    """Challenger minus this baseline, per metric."""
    rate: float | None = field(default=None, metadata=OMIT_NONE)
    """``trivial``: the probability it gives every row (the training set's positive rate)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HoldoutRef:
    """The frozen holdout both models were scored on."""

    path: str
    sha256: str
    rows: int
    positives: int = -1
    """``binary``: rows labelled positive; -1 for the other tasks, whose gate
    counts ``rows``, or when not recorded."""
    days: list[str] = field(default_factory=list)
    """The holdout's days (``evaluate.holdout_days`` ending at D)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ScoredModel:
    """A model's scores on the frozen holdout."""

    model_uri: str
    """What ``mlflow.pyfunc.load_model`` loads it from."""
    metrics: HoldoutMetrics


@dataclass(frozen=True, kw_only=True, slots=True)
class ScoredChallenger(ScoredModel):
    """This run's model, by the MLflow run that trained it."""

    mlflow_run_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ScoredChampion(ScoredModel):
    """The production model this run was compared against, by its registry version."""

    version: str


@dataclass(frozen=True, kw_only=True, slots=True)
class EvaluateManifest(Manifest):
    """Also ``runs/<run>/evaluation.json``."""

    STEP: ClassVar[str] = "evaluate"
    holdout: HoldoutRef
    challenger: ScoredChallenger
    champion: ScoredChampion | None
    confidence: float = 0.95
    """Confidence of each one-sided interval bound (``evaluate.confidence``)."""
    resamples: int = 0
    """Bootstrap resamples behind the intervals (``evaluate.resamples``)."""
    differences: dict[str, Interval] = field(default_factory=dict)
    """Challenger minus champion per metric; empty without a champion."""
    baselines: list[ScoredBaseline] = field(default_factory=list)
    slices: list[SliceResult] = field(default_factory=list)
    unjudged_classes: dict[str, int] = field(default_factory=dict)
    """Classes with fewer holdout rows than ``gate.min_class_rows``, each with its rows: a
    metric averaged over classes left them out."""
    suspects: dict[str, float] = field(default_factory=dict)
    """When the challenger or a baseline is near perfect: the feature columns the challenger
    leans on, each with its near-perfect metric when that column alone is shuffled in the
    holdout (most telling first); empty otherwise."""
    report: str = ""
    """The HTML evaluation report (``reports/evaluation/...``)."""


Decision = Literal[
    "promoted", "rejected", "skipped", "forced", "passed", "undecided", "staged", "identical"
]
"""``promoted``: the gate passed and the alias moved; ``staged``: the gate passed and the
challenger went to the staging alias to shadow the champion (``release.mode: staged``);
``rejected``: the gate refused;
``undecided``: the holdout was too small to decide (``gate.min_positives``), the champion stays;
``skipped``: the run asked not to promote (the gate's verdict is in the reasons); ``forced``: the
alias moved by request whatever the gate said; ``passed``: the gate passed in a backfill, which
compares with the champion as of its date and never moves the alias; ``identical``: the
challenger's fingerprint (training set, train settings, code) is the champion's or the staged
version's, so it was recorded on its training run and not registered."""

PROMOTED: tuple[Decision, ...] = ("promoted", "forced")
"""Decisions that moved the live alias to the version: the champion's history."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PromoteManifest(Manifest):
    STEP: ClassVar[str] = "promote"
    registered_model: str
    version: str | None
    """The registered version; None when nothing was registered (``identical``)."""
    decision: Decision
    reasons: list[str]
    champion_before: str | None
    champion_after: str | None
    staging_after: str | None = field(default=None, metadata=OMIT_NONE)
    """The staged version after the step (``staged``: this one)."""
    staging_replaced: str | None = field(default=None, metadata=OMIT_NONE)
    """A version that was waiting in staging and that this one replaced."""


SignalKind = Literal["input", "prediction", "label"]
StatisticName = Literal["psi", "js_distance", "rate_change", "weighted_ratio"]


@dataclass(frozen=True, kw_only=True, slots=True)
class DriftSignal:
    """One signal the monitor measured on the current window (see ``quality/calibration.py``)."""

    name: str
    """A feature column, ``prediction`` or ``label``."""
    kind: SignalKind
    statistic: StatisticName
    value: float
    threshold: float
    """max(calibrated null quantile, effect-size floor)."""
    null_quantile: float
    """The ``calibration_quantile`` of the statistic over resampled reference windows."""
    p_value: float
    """Share of resampled reference windows at least as far off as the current window."""
    importance: float | None
    """Input features: the feature's share of the champion's permutation sensitivity."""
    crossed: bool
    """Value above threshold."""
    reference: float | None = field(default=None, metadata=OMIT_NONE)
    """Label drift: the reference delay rate (value is the absolute change)."""
    current: float | None = field(default=None, metadata=OMIT_NONE)
    """Label drift: the current window's delay rate."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ChampionDay:
    """The production model's score on the monitored day (also an MLflow run of the monitoring
    experiment)."""

    version: str
    model_uri: str
    metrics: HoldoutMetrics
    mean_score: float
    mlflow_run_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class MonitorManifest(Manifest):
    """The drift monitor's verdict on the window ending at the logical date."""

    STEP: ClassVar[str] = "monitor"
    drift_detected: bool
    crossed: list[str]
    """Signals that crossed their thresholds and may trigger, strongest first."""
    current_days: list[str]
    reference_days: list[str]
    reference: str
    """Where the reference came from (the champion's training window or trailing days)."""
    signals: list[DriftSignal]
    champion: ChampionDay | None
    report: str
    """Lake path of the full report (JSON)."""
    quarantined_days: list[str] = field(default_factory=list)
    """Days between the reference's first and the logical date that validation quarantined:
    left out of both windows, never taken as drift to retrain on."""
    staging: ChampionDay | None = field(default=None, metadata=OMIT_NONE)
    """The staged model's score on the same rows of the day (its shadow day)."""
    scores: str = ""
    """Lake path of the day's labels and predictions (``reports/monitor/date=D/scores.parquet``),
    what the release pools and the rollback check reads."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DayCheck:
    """The champion against the version it replaced on one monitored day's rows."""

    day: str
    rows: int
    champion: float
    """The champion's watched metric on the day."""
    previous: float
    """The replaced version's, on the same rows."""
    difference: Interval
    """Champion minus replaced version, paired bootstrap (``evaluate.confidence`` each side)."""
    degraded: bool
    """The interval's most favourable bound is worse than the margin."""
    cleared: bool = False
    """The interval's least favourable bound is within the margin: with confidence, not worse
    beyond it. A day neither degraded nor cleared (too few rows to tell) is inconclusive."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RollbackCheck:
    """The champion's health as the release step judged it: its days against the version it
    replaced, the one a rollback goes back to."""

    version: str
    previous: str
    metric: str
    margin: float
    days: list[DayCheck]
    """Its monitored days since it became the champion, at most the last few, oldest first."""
    degraded_in_a_row: int
    """Degraded days since the last cleared day (inconclusive days neither count nor break)."""
    due: bool
    """``release.rollback_days`` degraded days in a row."""


ReleaseAction = Literal[
    "none", "waiting", "released", "retired", "awaiting_approval", "rolled_back"
]


@dataclass(frozen=True, kw_only=True, slots=True)
class ReleaseManifest(Manifest):
    """What the release step of the monitor DAG decided on the logical date: the staged
    candidate's fate on its pooled shadow days, and the champion's health."""

    STEP: ClassVar[str] = "release"
    registered_model: str
    action: ReleaseAction
    candidate: str | None
    """The staged version the decision is about (the rolled-back champion for a rollback)."""
    champion_before: str | None
    champion_after: str | None
    reasons: list[str]
    shadow_days: list[str] = field(default_factory=list)
    outcome: str = ""
    """The gate's outcome on the pooled shadow days (``pass``, ``refuse``, ``undecided``), or
    ``waiting`` before enough days; empty without a candidate."""
    differences: dict[str, Interval] = field(default_factory=dict)
    """Staged minus champion per metric on the pooled days."""
    rollback: RollbackCheck | None = field(default=None, metadata=OMIT_NONE)
    report: str = ""
    """Lake path of the decision (``reports/release/date=D/release.json``)."""

    @property
    def champion_moved(self) -> bool:
        return self.champion_after != self.champion_before


@dataclass(frozen=True, kw_only=True, slots=True)
class SeedSummary(StepOutput):
    """What ``trainyard seed`` prints: the history it ingested and validated."""

    STEP: ClassVar[str] = "seed"
    days: int
    first: str
    last: str
    rows: int
    empty_days: list[str] = field(default_factory=list)
    """Days without rows, passed by (``domain.empty_days: skip``)."""
    refused: dict[str, str] = field(default_factory=dict)
    """``--keep-going``: each refused day and why (ingest or validation refused it)."""


# -- JSON form ------------------------------------------------------------------------------------


def to_json(value: Any) -> Any:
    """A manifest (or any value inside one) as plain JSON data; ``OMIT_NONE`` fields left out
    while None. A NaN (a metric undefined on its rows, e.g. the AUC of a slice with one class)
    becomes null, which strict JSON (XCom, HTTP) accepts; the loader reads it back as NaN."""
    if isinstance(value, float) and value != value:
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: to_json(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not (f.metadata.get("omit_none") and getattr(value, f.name) is None)
        }
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    return value


def load_manifest(cls: type[M], payload: object, where: str) -> M:
    """``payload`` (parsed JSON) as a ``cls``; ``where`` names its file in errors.

    Raises ``ManifestError`` naming the file and field when the step differs, a field is
    missing, unknown or of the wrong type: a manifest of another step, or one written by
    another version of trainyard.
    """
    if not isinstance(payload, dict):
        raise ManifestError(f"{where}: a manifest is a JSON object, got {type(payload).__name__}")
    step = payload.get("step")
    if step != cls.STEP:
        raise ManifestError(
            f"{where}: expected the {cls.STEP!r} step's manifest, got step {step!r}"
        )
    fields = {k: v for k, v in payload.items() if k != "step"}
    return _build(cls, fields, where, "")


def load_record(cls: type[T], payload: object, where: str) -> T:
    """``payload`` as a record dataclass that is not a step manifest (a partition's
    ``_manifest.json``, ``lineage.json``); errors as ``load_manifest``'s."""
    if not isinstance(payload, dict):
        raise ManifestError(f"{where}: expected a JSON object, got {type(payload).__name__}")
    return _build(cls, payload, where, "")


def _build(cls: type[T], values: dict[str, Any], where: str, path: str) -> T:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(fields))
    missing = sorted(
        name
        for name, f in fields.items()
        if name not in values
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    )
    if missing or unknown:
        problems = [f"missing {', '.join(path + m for m in missing)}"] if missing else []
        problems += [f"unknown {', '.join(path + u for u in unknown)}"] if unknown else []
        raise ManifestError(
            f"{where}: not a {cls.__name__} this version of trainyard reads "
            f"({'; '.join(problems)}); re-run the step that wrote it"
        )
    kwargs = {k: _convert(v, hints[k], where, path + k) for k, v in values.items()}
    return cls(**kwargs)


def _convert(value: Any, annotation: Any, where: str, path: str) -> Any:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if value is not None and len(options) == 1:
            return _convert(value, options[0], where, path)
        raise _wrong(value, annotation, where, path)
    if origin is Literal:
        if value in args:
            return value
        raise ManifestError(f"{where}: {path} must be one of {list(args)}, got {value!r}")
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        if not isinstance(value, dict):
            raise _wrong(value, f"a {annotation.__name__} object", where, path)
        return _build(annotation, value, where, path + ".")
    if origin is dict:
        if not isinstance(value, dict):
            raise _wrong(value, "an object", where, path)
        return {k: _convert(v, args[1], where, f"{path}.{k}") for k, v in value.items()}
    if origin is list:
        if not isinstance(value, list):
            raise _wrong(value, "a list", where, path)
        return [_convert(v, args[0], where, f"{path}[{i}]") for i, v in enumerate(value)]
    if annotation is float:
        if value is None:
            return float("nan")  # written for a NaN by to_json
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise _wrong(value, "a number", where, path)
    if annotation in (int, str, bool):
        if isinstance(value, annotation) and not (annotation is int and isinstance(value, bool)):
            return value
        raise _wrong(value, annotation.__name__, where, path)
    raise ManifestError(f"{where}: {path} has a type the loader does not know: {annotation}")


def _wrong(value: Any, expected: Any, where: str, path: str) -> ManifestError:
    return ManifestError(f"{where}: {path} must be {expected}, got {value!r}")
