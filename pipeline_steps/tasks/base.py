"""The ``Task`` interface: what one kind of label asks of every stage of the pipeline.

A task declares its metrics (each with its direction, the gate's margin setting and how the
reports name it), which of them the gate holds a challenger to by default, which it must beat
the trivial model on, the slice metric, the report's plots, the linear baseline's name and how
its labels and classes look; and it implements what differs between tasks: the training loss,
the epoch's validation sums, the registered model's predictions, the holdout metrics, their
bootstrap replicates, the trivial model and the serving columns.

Declarations are plain class attributes, so the settings (imported while DAG files parse) read
them at no cost; numpy, torch and scikit-learn are imported inside the methods that compute.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import numpy as np
    import torch

    from pipeline_steps.core.manifests import HoldoutMetrics, SliceScores


class TaskError(ValueError):
    """A task reference, or a domain's classes for its task, is not valid; the message names
    it."""


@dataclass(frozen=True, slots=True)
class Metric:
    """A holdout metric with an interval: its name in ``HoldoutMetrics``, its direction and how
    reports and gate reasons show it."""

    name: str
    higher_is_better: bool
    label: str
    relative: bool = False
    """The gate's margin is a fraction of the champion's value (metrics in the label's units)."""
    per_class: bool = False
    """An average over the classes (macro-F1): it judges the classes with at least
    ``gate.min_class_rows`` holdout rows."""


def sklearn_metrics() -> ModuleType:
    """scikit-learn's metrics, imported where first used: a training rank computes none of
    them and would pay 0.8 s of CPU importing scikit-learn."""
    from sklearn import metrics

    return metrics


@dataclass(frozen=True, kw_only=True, slots=True)
class HeadState:
    """What a head records about the training labels: the classes, and for a task trained on a
    standardised label its mean and standard deviation."""

    classes: tuple[str, ...] = ()
    label_mean: float = 0.0
    label_std: float = 1.0


@dataclass(frozen=True, slots=True)
class LabelSample:
    """What ``init-domain`` saw of a label column in a sample: its distinct values, their kind
    (``string``, ``integer``, ``float``, ...), whether they are numbers, how it says what it saw
    (``seen``, ``examples``) and the most classes a label may have."""

    distinct: int
    kind: str
    numeric: bool
    seen: str
    examples: str
    max_classes: int


def class_label_misfit(task: str, article: str, label: LabelSample) -> str | None:
    """Why a label of named classes does not fit ``task`` (``article``: "a", "an"): fractional
    numbers, or not 3..``max_classes`` values."""
    if label.kind == "float":
        return f"it holds fractional numbers ({label.examples})"
    if not 3 <= label.distinct <= label.max_classes:
        hint = "; use --task binary" if label.distinct == 2 else ""
        return f"{article} {task} label has 3..{label.max_classes} values, {label.seen}{hint}"
    return None


def resample_mean(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The mean of per-row ``values`` over each bootstrap resample (``rows``: one row of
    indices per resample)."""
    return values[rows].mean(axis=1)


def one_column(outputs: torch.Tensor) -> torch.Tensor:
    """One value per row, from ``[n, 1]`` (or ``[n]``, which a user's model may return)."""
    return outputs if outputs.dim() == 1 else outputs.squeeze(1)


def class_index_state(
    task: str, article: str, values: np.ndarray, classes: Sequence[str], where: str
) -> HeadState:
    """The head state of a task whose label is a class index into ``classes``; ``TaskError``
    naming ``where`` and the values found when one is no index (``article``: "a", "an")."""
    import numpy as np

    allowed = set(map(float, range(len(classes))))
    bad = sorted(set(np.unique(values).tolist()) - allowed)
    if bad:
        raise TaskError(
            f"{where}: {article} {task} label is a class index 0..{len(classes) - 1} into "
            f"{list(classes)}; found {bad[:5]}"
        )
    return HeadState(classes=tuple(classes))


class Task:
    """One task. Subclasses set the declarations and implement the computations; one instance
    of each is registered (:mod:`pipeline_steps.tasks`)."""

    name: ClassVar[str]
    description: ClassVar[str]
    metric_list: ClassVar[tuple[Metric, ...]]
    """Holdout metrics with paired-bootstrap intervals, in report order."""
    gate_metrics: ClassVar[tuple[str, ...]]
    """The gate's primary metrics when ``gate.primary_metrics`` is left empty."""
    trivial_metrics: ClassVar[tuple[str, ...]]
    """Metrics on which the challenger must beat the trivial model (with confidence)."""
    slice_metric: ClassVar[str]
    """The metric compared per slice."""
    near_perfect_metric: ClassVar[str]
    """The metric by which a model is near perfect on the holdout (a leak, as a rule): its floor
    is the gate setting ``suspect_<metric>``."""
    slice_metrics: ClassVar[tuple[str, ...]] = ()
    """Metrics with intervals per slice; empty: the slice metric alone."""
    plots: ClassVar[tuple[str, ...]] = ()
    """The evaluation report's figures (:mod:`pipeline_steps.evaluation.report`)."""
    linear_baseline: ClassVar[str]
    """The name the linear baseline is recorded under (``ScoredBaseline.name``)."""
    trivial_description: ClassVar[str]
    """What the trivial model predicts, as the gate's reasons say it."""
    has_classes: ClassVar[bool] = False
    """The label is an index into the domain's named ``classes``."""
    counts_positives: ClassVar[bool] = False
    """The label is 0/1 and the holdout's positive rows are counted (AUC needs both)."""
    stratified: ClassVar[bool] = True
    """Bootstrap resamples keep each label value's share (classification tasks)."""
    real_valued: ClassVar[bool] = False
    """The label is a real number (drafted checks, drift of the predictions)."""
    champion_columns: ClassVar[tuple[tuple[str, str], ...]] = ()
    """The champion's daily metrics in ``trainyard report``: (``HoldoutMetrics`` field, title)."""
    summary: ClassVar[tuple[str, ...]] = ()
    """The metrics a run summary's difference lines show; empty: all of ``metric_list``."""
    ordered: ClassVar[bool] = False
    """The classes are ordered, lowest first (their order is part of the domain contract)."""
    calibrated: ClassVar[bool] = False
    """The model's outputs are logits whose training loss is the negative log-likelihood of
    the probabilities :meth:`predict` gives, so one temperature dividing them can be fitted on
    the validation rows (``train.calibrate``): it rescales the confidence; a sigmoid's ranking
    and a softmax's most probable class stay (CORN's conditional logits may move a row's median
    class: its probabilities are products of sigmoids)."""

    # -- declarations ------------------------------------------------------------------------

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.metric_list)

    @property
    def summary_metrics(self) -> tuple[str, ...]:
        return self.summary or self.metrics

    def metric(self, name: str) -> Metric:
        """The declaration of ``name``; ``TaskError`` naming the task's metrics otherwise."""
        for declared in self.metric_list:
            if declared.name == name:
                return declared
        raise TaskError(
            f"{name!r} is not a metric of the {self.name} task; its metrics: "
            f"{', '.join(self.metrics)}"
        )

    def slice_metric_names(self) -> tuple[str, ...]:
        return self.slice_metrics or (self.slice_metric,)

    def check_classes(self, classes: Sequence[str], where: str) -> None:
        """``TaskError`` naming ``where`` when ``classes`` do not fit the task (default: a
        task without classes takes none)."""
        if classes:
            raise TaskError(f"{where}: classes are only for a task with classes, not {self.name}")

    def outputs(self, classes: Sequence[str]) -> int:
        """Values the model gives per row."""
        return 1

    def label_misfit(self, label: LabelSample) -> str | None:
        """Why a sample's label column cannot be this task's label (``init-domain --task``),
        or None when it can."""
        return None

    def __repr__(self) -> str:
        return f"<task {self.name}>"

    # -- training ----------------------------------------------------------------------------

    def fit_head(
        self, labels: Any, values: np.ndarray, classes: Sequence[str], where: str
    ) -> HeadState:
        """What the head records from the training rows' label (``labels``, a pyarrow array
        without missing values, and its finite ``values``); ``TaskError``
        naming ``where`` and the offending values when they do not fit the task."""
        raise NotImplementedError

    def loss(
        self, outputs: torch.Tensor, labels: torch.Tensor, state: HeadState, reduction: str
    ) -> torch.Tensor:
        raise NotImplementedError

    def validation_sums(
        self, outputs: torch.Tensor, labels: torch.Tensor, state: HeadState
    ) -> list[Any]:
        """The task's sums of one batch after ``[loss sum, rows]`` (floats or float64 tensors,
        concatenated by the head)."""
        raise NotImplementedError

    def sums_width(self) -> int:
        """How many task sums :meth:`validation_sums` gives."""
        return 1

    def validation_metrics(
        self, rows: float, sums: Sequence[float], state: HeadState
    ) -> dict[str, float]:
        raise NotImplementedError

    def predict(self, outputs: torch.Tensor, state: HeadState) -> np.ndarray:
        """What the registered model returns for ``outputs`` (float64)."""
        raise NotImplementedError

    # -- evaluation --------------------------------------------------------------------------

    def report(self, labels: Any, predictions: Any, min_class_rows: int = 0) -> dict[str, float]:
        """The task's metrics (and the task's extras), rounded for reports. ``min_class_rows``:
        a metric averaged over classes (macro-F1) averages over the classes with at least this
        many rows in ``labels`` (the judged classes); 0: every class labelled or predicted."""
        raise NotImplementedError

    def holdout_metrics(
        self, labels: Any, predictions: Any, classes: Sequence[str], min_class_rows: int = 0
    ) -> HoldoutMetrics:
        raise NotImplementedError

    def slice_scores(self, labels: np.ndarray, predictions: np.ndarray) -> SliceScores:
        raise NotImplementedError

    def comparable(self, labels: np.ndarray) -> bool:
        """Whether the rows can have an interval beyond their count (AUC needs both classes)."""
        return True

    def replicates(
        self,
        metric: str,
        labels: np.ndarray,
        predictions: np.ndarray,
        rows: np.ndarray,
        min_class_rows: int = 0,
    ) -> np.ndarray:
        """The metric on each resample (one value per row of ``rows``, indices of drawn rows)."""
        raise NotImplementedError

    def trivial(self, mean: float | None, prior: Any, rows: int) -> np.ndarray:
        """The trivial model's predictions of ``rows`` rows from the training window's mean
        label and class prior."""
        raise NotImplementedError

    def expected_shape(self, rows: int, classes: Sequence[str]) -> tuple[int, ...]:
        """The shape of a model's predictions of ``rows`` rows."""
        return (rows,)

    def positives(self, labels: Any) -> int:
        """The holdout's positive rows for a task that counts them, else -1."""
        import numpy as np

        return int(np.asarray(labels).sum()) if self.counts_positives else -1

    def baseline_fits(self, distinct: int) -> bool:
        """Whether training rows with ``distinct`` label values can fit the linear baseline."""
        return distinct >= 2

    def predicted_class(self, predictions: Any) -> np.ndarray:
        """Each row's predicted class index, for a task with classes (the most probable by
        default)."""
        import numpy as np

        return np.asarray(predictions, dtype=np.float64).argmax(axis=1)

    def model_output(self, predictions: np.ndarray, classes: Sequence[str], index: Any) -> Any:
        """What the registered model's ``predict`` returns for the head's ``predictions``:
        the array, or for a task with classes a pandas frame with a probability column per
        class named by the class (rows indexed as the input's ``index``)."""
        if not self.has_classes:
            return predictions
        import pandas as pd

        return pd.DataFrame(predictions, columns=list(classes), index=index)

    def read_predictions(self, output: Any, classes: Sequence[str]) -> np.ndarray:
        """The task's predictions (float64) from what a registered model's ``predict``
        returned: a frame's class columns taken in the order of ``classes`` (columns that are
        not classes, such as a predicted class, are left out); ``TaskError`` naming the classes
        a frame lacks."""
        import numpy as np

        columns = getattr(output, "columns", None)
        if self.has_classes and columns is not None:
            missing = [c for c in classes if c not in columns]
            if missing:
                raise TaskError(
                    f"the model gives no probability of class(es) {missing}; it gives "
                    f"{list(map(str, columns))}"
                )
            output = output[list(classes)]
        return np.asarray(output, dtype=np.float64)

    def undefined(self, metrics: HoldoutMetrics, judged: Sequence[str]) -> str | None:
        """Why the challenger's ``judged`` metrics cannot be judged, or None."""
        missing = [
            self.metric(m).label for m in judged if getattr(metrics, m) != getattr(metrics, m)
        ]
        if missing:
            return (
                f"challenger {', '.join(missing)} undefined on this holdout "
                "(non-finite predictions or no rows)"
            )
        return None

    # -- serving -----------------------------------------------------------------------------

    def serving_columns(self, predictions: np.ndarray, classes: Sequence[str]) -> Mapping[str, Any]:
        """The columns a served prediction adds to its row, by name, in order: ``prediction``
        (the value, or for a task with classes the predicted class's name, then a
        ``probability_<class>`` column per class)."""
        if not self.has_classes:
            return {"prediction": predictions}
        import numpy as np

        names = np.asarray(classes, dtype=object)
        columns: dict[str, Any] = {"prediction": names[self.predicted_class(predictions)]}
        for index, name in enumerate(classes):
            columns[f"probability_{name}"] = predictions[:, index]
        return columns

    def drift_signal(self, predictions: np.ndarray, classes: Sequence[str]) -> np.ndarray:
        """What prediction drift is measured on (the value, or the predicted class's name)."""
        if not self.has_classes:
            return predictions
        import numpy as np

        return np.asarray(classes, dtype=object)[self.predicted_class(predictions)]

    @property
    def drifts_on_names(self) -> bool:
        """The drift signal is a class name (a string column), not a number."""
        return self.has_classes
