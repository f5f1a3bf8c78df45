"""Reference models on the same holdout: what a challenger has to beat to be worth anything.

``trivial`` predicts the training window's delay rate for every row (AUC 0.5 by construction;
its log loss is the label's entropy). ``logistic_regression`` is scikit-learn's, on the same
features: categorical columns one-hot encoded, numeric ones imputed with the median and
standardised.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def trivial(train_labels: np.ndarray, rows: int) -> np.ndarray:
    """The training window's positive rate, for each of ``rows`` holdout rows."""
    rate = float(np.mean(train_labels)) if len(train_labels) else 0.5
    return np.full(rows, rate, dtype=np.float64)


def logistic_regression(
    train: pd.DataFrame,
    holdout: pd.DataFrame,
    categorical: list[str],
    numeric: list[str],
    label: str,
    seed: int,
) -> np.ndarray:
    """Delay probabilities of the holdout rows from a logistic regression fitted on ``train``."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    columns = ColumnTransformer(
        [
            ("categorical", OneHotEncoder(handle_unknown="ignore", min_frequency=20), categorical),
            ("numeric", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), numeric),
        ]
    )
    model = make_pipeline(columns, LogisticRegression(max_iter=1000, random_state=seed))
    features = [*categorical, *numeric]
    model.fit(train[features], train[label].to_numpy())
    return np.asarray(model.predict_proba(holdout[features])[:, 1], dtype=np.float64)
