"""Reference models on the same holdout: what a challenger has to beat to be worth anything.

``trivial`` predicts what every label of the training window says without features: its delay
rate (``binary``; AUC 0.5 by construction, its log loss the label's entropy), its class prior
(``multiclass``) or its mean label (``regression``; R² about 0). The linear baseline is
scikit-learn's on the same features, categorical columns one-hot encoded, numeric ones imputed
with the median and standardised: a logistic regression (``binary``), a multinomial logistic
regression (``multiclass``) or a ridge regression (``regression``), fitted on the rows the
evaluate step gives it (at most ``evaluate.baseline_rows``, a seeded sample of the window).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from pipeline_steps.core.tasks import task_spec
from pipeline_steps.tasks import BUILTIN_TASKS

if TYPE_CHECKING:
    from sklearn.compose import ColumnTransformer

    from pipeline_steps.evaluation.training_set import LabelSummary

LINEAR = {name: task_spec(name).linear_baseline for name in BUILTIN_TASKS}
"""The name each built-in task's linear baseline is recorded under (``ScoredBaseline.name``;
``Task.linear_baseline``)."""


def trivial(labels: LabelSummary, rows: int, task: str = "binary") -> np.ndarray:
    """What the training window's ``labels`` say for each of ``rows`` holdout rows: their
    positive rate (``binary``), each class's share ([rows, classes], ``multiclass``) or their
    mean (``regression``)."""
    return task_spec(task).trivial(labels.mean, labels.prior, rows)


def _columns(categorical: list[str], numeric: list[str]) -> ColumnTransformer:
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    return ColumnTransformer(
        [
            ("categorical", OneHotEncoder(handle_unknown="ignore", min_frequency=20), categorical),
            ("numeric", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), numeric),
        ]
    )


def logistic_regression(
    train: pd.DataFrame,
    holdout: pd.DataFrame,
    categorical: list[str],
    numeric: list[str],
    label: str,
    seed: int,
    classes: int = 0,
) -> np.ndarray:
    """Delay probabilities of the holdout rows from a logistic regression fitted on ``train``;
    with ``classes`` (a multiclass label), each class's probability ([rows, classes]) from a
    multinomial one (classes the training rows lack get 0)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    model = make_pipeline(
        _columns(categorical, numeric), LogisticRegression(max_iter=1000, random_state=seed)
    )
    features = [*categorical, *numeric]
    model.fit(train[features], train[label].to_numpy())
    probabilities = np.asarray(model.predict_proba(holdout[features]), dtype=np.float64)
    if not classes:
        return probabilities[:, 1]
    out = np.zeros((len(holdout), classes), dtype=np.float64)
    out[:, model.classes_.astype(np.int64)] = probabilities
    return out


def ridge(
    train: pd.DataFrame,
    holdout: pd.DataFrame,
    categorical: list[str],
    numeric: list[str],
    label: str,
) -> np.ndarray:
    """Predicted labels of the holdout rows from a ridge regression fitted on ``train``."""
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline

    model = make_pipeline(_columns(categorical, numeric), Ridge())
    features = [*categorical, *numeric]
    model.fit(train[features], train[label].to_numpy(dtype=np.float64))
    return np.asarray(model.predict(holdout[features]), dtype=np.float64)


def linear(
    task: str,
    train: pd.DataFrame,
    holdout: pd.DataFrame,
    categorical: list[str],
    numeric: list[str],
    label: str,
    seed: int,
    classes: int = 0,
) -> np.ndarray:
    """The task's linear baseline's predictions of the holdout rows (recorded as
    ``LINEAR[task]``): probabilities of 1, class probabilities or label values."""
    spec = task_spec(task)
    if spec.real_valued:
        return ridge(train, holdout, categorical, numeric, label)
    if spec.has_classes:
        return logistic_regression(train, holdout, categorical, numeric, label, seed, classes)
    return logistic_regression(train, holdout, categorical, numeric, label, seed)
