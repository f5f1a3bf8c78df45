"""How well columns of a sample predict its label on rows they were not fitted on: the figures
behind ``trainyard init-domain``'s leak verdicts (:mod:`pipeline_steps.quality.draft_checks`).

- **One column** (``one_column_fit``): a model of the column alone, fitted on every other
  sample row and scored on the rest. A missing value is a value of its own (a size measured
  only for the most severe class gives that class away by being there). A numeric column is
  judged in order, never by exact value: by its quantile bins (a value held by many rows, such
  as a fixed lab value, is a bin of its own), and by each row's nearest fitted value, so values
  seen once still predict their neighbours' class and a label that is bands of the column is
  found in every season's sample. The score is the better of the two.
- **One class** (``OneColumn.classes``): the same predictions scored one class against the
  rest, so a column that gives away a single class (fixed for two classes, varying for the
  third) is seen although it says little about the others.
- **Combinations** (``together``): a small tree model on several columns, so a leak through a
  pair (a price that, with the product's name, names the size) is found although each column
  alone is weak; each column's drop-out loss names the columns the near-perfect score rests on.
  For a real-valued label also a least-squares line through the numeric columns, the better of
  the two: a label that is the sum of two columns is exact for a line.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline_steps.core.tasks import task_spec

BINS = 64
"""Quantile bins of a numeric column in its one-column model."""
PAIR_BINS = 16
"""Ordered bins of a numeric column when judged in a pair (``pair_fit``)."""
PAIR_GROUP_ROWS = 3
"""A pair of values held by this many rows at least predicts each of them from two others."""
PAIR_COVERAGE = 0.8
"""Least share of rows in such pairs for a pair of columns to be judged on them alone."""
MIN_ROWS = 20
"""Fewest labelled sample rows with which a column is judged."""
MIN_CLASS_ROWS = 5
"""Fewest held-out rows of a class for its one-class score."""
TREE_ROWS = 20_000
"""Most sample rows the combination model is fitted and scored on (evenly spaced)."""
TREE_CATEGORIES = 254
"""Most values of a text column the combination model tells apart (the rarer share one)."""


@dataclass(frozen=True, slots=True)
class OneColumn:
    """A column's one-column model, scored on the sample rows it was not fitted on."""

    score: float
    """Balanced accuracy (classification) or R² (regression)."""
    classes: Mapping[str, float] = field(default_factory=dict)
    """Classification: each class's one-against-the-rest balanced accuracy (classes with at
    least ``MIN_CLASS_ROWS`` held-out rows)."""


def one_column_fit(
    values: pa.ChunkedArray, numeric: bool, label: pa.ChunkedArray, task: str
) -> OneColumn | None:
    """``values`` alone as a model of ``label``, fitted on every other labelled row and scored
    on the rest; None with fewer than ``MIN_ROWS`` labelled rows."""
    labelled = pc.is_valid(label)
    x, y = values.filter(labelled), label.filter(labelled)
    if len(y) < MIN_ROWS:
        return None
    fit = np.arange(len(y)) % 2 == 0
    held = ~fit
    numbers = _numbers(x) if numeric else None
    groups = _ordered_bins(numbers, fit) if numbers is not None else _codes(x)
    if task_spec(task).real_valued:
        target = y.cast(pa.float64()).to_numpy(zero_copy_only=False)
        guesses = [_group_means(groups, target, fit, held)]
        if numbers is not None:
            guesses.append(_nearest(numbers, target, fit, held, regression=True))
        return OneColumn(max(r2(target[held], g) for g in guesses))
    names, codes = np.unique(np.asarray(y.cast(pa.string()).to_pylist()), return_inverse=True)
    guesses = [_group_classes(groups, codes, fit, held)]
    if numbers is not None:
        guesses.append(_nearest(numbers, codes, fit, held, regression=False))
    truth = codes[held]
    scored = [(balanced_accuracy(truth, g), one_against_rest(truth, g)) for g in guesses]
    per_class: dict[str, float] = {}
    for _, classes in scored:
        for code, score in classes.items():
            per_class[str(names[code])] = max(per_class.get(str(names[code]), 0.0), score)
    return OneColumn(max(score for score, _ in scored), per_class)


def pair_fit(
    first: pa.ChunkedArray,
    second: pa.ChunkedArray,
    numeric: tuple[bool, bool],
    label: pa.ChunkedArray,
    task: str,
) -> float | None:
    """Two columns together as a model of ``label``: each labelled row's pair of values (a
    numeric column's in ``PAIR_BINS`` ordered bins) predicts the label as the other rows of
    that pair do (leave one out: a row never predicts itself), scored as balanced accuracy or
    R²; None with fewer than ``MIN_ROWS``. On a small sample this finds two columns that give
    the label away together where a tree has too few rows to."""
    labelled = pc.is_valid(label)
    y = label.filter(labelled)
    if len(y) < MIN_ROWS:
        return None
    everything = np.ones(len(y), dtype=bool)
    codes = []
    for values, is_number in zip((first, second), numeric, strict=True):
        x = values.filter(labelled)
        codes.append(_ordered_bins(_numbers(x), everything, PAIR_BINS) if is_number else _codes(x))
    groups = np.unique(codes[0] * (int(codes[1].max()) + 1) + codes[1], return_inverse=True)[1]
    sizes = np.bincount(groups)[groups]
    if task_spec(task).real_valued:
        target = y.cast(pa.float64()).to_numpy(zero_copy_only=False)
        sums = np.bincount(groups, weights=target)[groups]
        others = np.where(
            sizes > 1,
            (sums - target) / np.maximum(sizes - 1, 1),
            (target.sum() - target) / max(len(target) - 1, 1),
        )
        return r2(target, others)
    classes = np.unique(np.asarray(y.cast(pa.string()).to_pylist()), return_inverse=True)[1]
    table = np.zeros((int(groups.max()) + 1, int(classes.max()) + 1))
    np.add.at(table, (groups, classes), 1)
    mine = table[groups]
    mine[np.arange(len(classes)), classes] -= 1  # leave the row itself out
    overall = np.bincount(classes).argmax()
    guesses = np.where(sizes > 1, mine.argmax(axis=1), overall)
    judged = sizes >= PAIR_GROUP_ROWS
    if judged.mean() >= PAIR_COVERAGE:  # rows whose pair two others share: a rare class's few
        return balanced_accuracy(classes[judged], guesses[judged])  # rows do not blur it
    return balanced_accuracy(classes, guesses)


def together(
    table: pa.Table, columns: Sequence[str], numeric: set[str], label: str, task: str
) -> float | None:
    """How well ``columns`` together predict ``label``: a small gradient-boosted tree model
    fitted on every other labelled row (at most ``TREE_ROWS``) and scored on the rest, as
    balanced accuracy or R²; None with fewer than ``MIN_ROWS`` labelled rows or no column."""
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    labelled = pc.is_valid(table.column(label))
    rows = table.filter(labelled)
    if rows.num_rows < MIN_ROWS or not columns:
        return None
    if rows.num_rows > TREE_ROWS:
        rows = rows.take(np.linspace(0, rows.num_rows - 1, TREE_ROWS).astype(np.int64))
    matrix = np.column_stack(
        [
            _numbers(rows.column(c)) if c in numeric else _category_codes(rows.column(c))
            for c in columns
        ]
    )
    categorical = np.array([c not in numeric for c in columns])
    fit = np.arange(rows.num_rows) % 2 == 0
    held = ~fit
    settings = dict(
        max_iter=60,
        max_depth=6,
        learning_rate=0.2,
        early_stopping=False,
        random_state=0,
        categorical_features=categorical if categorical.any() else None,
    )
    y = rows.column(label)
    if task_spec(task).real_valued:
        target = y.cast(pa.float64()).to_numpy(zero_copy_only=False)
        regressor = HistGradientBoostingRegressor(**settings).fit(matrix[fit], target[fit])
        tree = r2(target[held], regressor.predict(matrix[held]))
        return max(tree, _linear_r2(matrix[:, ~categorical], target, fit, held))
    codes = np.unique(np.asarray(y.cast(pa.string()).to_pylist()), return_inverse=True)[1]
    if len(np.unique(codes[fit])) < 2:
        return None
    classifier = HistGradientBoostingClassifier(**settings).fit(matrix[fit], codes[fit])
    return balanced_accuracy(codes[held], classifier.predict(matrix[held]))


def _linear_r2(numbers: np.ndarray, target: np.ndarray, fit: np.ndarray, held: np.ndarray) -> float:
    """R² on the held rows of a least-squares line through the numeric columns (missing values
    as the fitted mean): a label that is a sum of columns (a price split into its parts) is
    exact for a line and only near for a small tree."""
    if not numbers.shape[1]:
        return float("-inf")
    with warnings.catch_warnings(action="ignore"):  # a column with no value: its mean is 0
        means = np.nanmean(np.where(np.isfinite(numbers[fit]), numbers[fit], np.nan), axis=0)
    filled = np.where(np.isfinite(numbers), numbers, np.nan_to_num(means))
    design = np.column_stack([filled, np.ones(len(filled))])
    weights = np.linalg.lstsq(design[fit], target[fit], rcond=None)[0]
    return r2(target[held], design[held] @ weights)


def balanced_accuracy(truth: np.ndarray, predicted: np.ndarray) -> float:
    """The mean recall of the classes in ``truth`` with at least ``MIN_CLASS_ROWS`` rows there
    (all of them when fewer than two have): a class of two held-out rows says nothing."""
    classes, counts = np.unique(truth, return_counts=True)
    judged = classes[counts >= MIN_CLASS_ROWS]
    judged = judged if len(judged) >= 2 else classes
    return float(np.mean([np.mean(predicted[truth == c] == c) for c in judged]))


def one_against_rest(truth: np.ndarray, predicted: np.ndarray) -> dict[int, float]:
    """Each class's balanced accuracy as a two-class problem, that class against the rest, for
    classes with at least ``MIN_CLASS_ROWS`` rows in ``truth``."""
    scores = {}
    for c in np.unique(truth):
        mine = truth == c
        if mine.sum() < MIN_CLASS_ROWS or mine.all():
            continue
        recall = np.mean(predicted[mine] == c)
        specificity = np.mean(predicted[~mine] != c)
        scores[int(c)] = float((recall + specificity) / 2)
    return scores


def r2(truth: np.ndarray, predicted: np.ndarray) -> float:
    """R² of ``predicted`` against ``truth`` (0 when ``truth`` does not vary)."""
    spread = float(np.sum((truth - truth.mean()) ** 2))
    if spread == 0:
        return 0.0
    return 1 - float(np.sum((truth - predicted) ** 2)) / spread


def _numbers(values: pa.ChunkedArray) -> np.ndarray:
    """The values as floats, NaN where missing."""
    floats = values.cast(pa.float64())
    return np.asarray(floats.to_numpy(zero_copy_only=False), dtype=np.float64)


def _codes(values: pa.ChunkedArray) -> np.ndarray:
    """Each row's value as a code; a missing value is a value of its own."""
    text = values.cast(pa.string()).fill_null("\x00missing")
    return np.unique(np.asarray(text.to_pylist()), return_inverse=True)[1]


def _category_codes(values: pa.ChunkedArray) -> np.ndarray:
    """Codes of a text column for the tree model: its ``TREE_CATEGORIES`` most common values,
    one code for the rest, NaN where missing."""
    text = np.asarray(values.cast(pa.string()).to_pylist(), dtype=object)
    present = np.array([v is not None for v in text])
    out = np.full(len(text), np.nan)
    if not present.any():
        return out
    names, codes, counts = np.unique(
        text[present].astype(str), return_inverse=True, return_counts=True
    )
    rank = np.empty(len(names), dtype=np.int64)
    rank[np.argsort(-counts, kind="stable")] = np.arange(len(names))
    out[present] = np.minimum(rank[codes], TREE_CATEGORIES)
    return out


def _ordered_bins(numbers: np.ndarray, fit: np.ndarray, bins: int = BINS) -> np.ndarray:
    """Each row's quantile bin (edges from the fitted rows); a value at an edge (a value many
    rows share) is a bin of its own, and missing values one more."""
    finite = np.isfinite(numbers)
    fitted = numbers[fit & finite]
    if not len(fitted):
        return np.where(finite, 0, 1)
    edges = np.unique(np.quantile(fitted, np.linspace(0, 1, bins + 1)))
    values = np.where(finite, numbers, 0.0)
    placed = np.searchsorted(edges, values, side="left") + np.searchsorted(
        edges, values, side="right"
    )
    return np.where(finite, placed, 2 * len(edges) + 1)


def _group_classes(
    groups: np.ndarray, codes: np.ndarray, fit: np.ndarray, held: np.ndarray
) -> np.ndarray:
    """Each held row's class: its group's most common class among the fitted rows (an unseen
    group: the most common class overall)."""
    classes = int(codes.max()) + 1
    table = np.zeros((int(groups.max()) + 1, classes))
    np.add.at(table, (groups[fit], codes[fit]), 1)
    overall = np.bincount(codes[fit], minlength=classes).argmax()
    seen = table.sum(axis=1) > 0
    return np.where(seen, table.argmax(axis=1), overall)[groups[held]]


def _group_means(
    groups: np.ndarray, target: np.ndarray, fit: np.ndarray, held: np.ndarray
) -> np.ndarray:
    """Each held row's guess: its group's mean among the fitted rows (an unseen group: the
    mean overall)."""
    size = int(groups.max()) + 1
    sums = np.bincount(groups[fit], weights=target[fit], minlength=size)
    counts = np.bincount(groups[fit], minlength=size)
    means = np.where(counts > 0, sums / np.maximum(counts, 1), target[fit].mean())
    return means[groups[held]]


def _nearest(
    numbers: np.ndarray, target: np.ndarray, fit: np.ndarray, held: np.ndarray, *, regression: bool
) -> np.ndarray:
    """Each held row's guess from the fitted rows of the nearest value (their most common class
    or their mean); a missing value from the fitted rows missing it too, else overall."""
    finite = np.isfinite(numbers)
    fitted = fit & finite

    def summary(rows: np.ndarray) -> float:
        return float(target[rows].mean() if regression else np.bincount(target[rows]).argmax())

    overall = summary(fit)
    missing = summary(fit & ~finite) if (fit & ~finite).any() else overall
    out = np.full(int(held.sum()), overall)
    values = numbers[held]
    present = np.isfinite(values)
    if not fitted.any():
        out[~present] = missing
        return out if regression else out.astype(np.int64)
    unique, inverse = np.unique(numbers[fitted], return_inverse=True)
    if regression:
        sums = np.bincount(inverse, weights=target[fitted], minlength=len(unique))
        guesses = sums / np.bincount(inverse, minlength=len(unique))
    else:
        table = np.zeros((len(unique), int(target.max()) + 1))
        np.add.at(table, (inverse, target[fitted]), 1)
        guesses = table.argmax(axis=1).astype(np.float64)
    right = np.clip(np.searchsorted(unique, values[present]), 0, len(unique) - 1)
    left = np.clip(right - 1, 0, len(unique) - 1)
    nearer = np.where(
        np.abs(unique[left] - values[present]) <= np.abs(unique[right] - values[present]),
        left,
        right,
    )
    out[present] = guesses[nearer]
    out[~present] = missing
    return out if regression else out.astype(np.int64)
