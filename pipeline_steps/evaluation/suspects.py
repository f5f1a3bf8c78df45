"""The columns a near-perfect challenger leans on: each feature column shuffled alone in the
holdout, the challenger scored again. A column whose shuffling spoils the score is one the score
rests on; a near-perfect score that rests on a column usually means the column gives the label
away (a copy of it, a value recorded with the outcome, or one half of a combination that does).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

SUSPECT_DROP = 0.02
"""Least fall of the near-perfect metric, with a column shuffled, for the column to be named."""
MOST_SUSPECTS = 5
"""Most columns named, those whose shuffling spoils the score most."""


def shuffled_scores(
    predict: Callable[[pd.DataFrame], np.ndarray],
    holdout: pd.DataFrame,
    columns: Sequence[str],
    measure: Callable[[np.ndarray], float],
    *,
    higher_is_better: bool,
    seed: int = 0,
) -> dict[str, float]:
    """The columns among ``columns`` whose shuffling (each alone, the holdout's other columns
    as they are) moves ``measure`` of ``predict``'s predictions the wrong way by at least
    ``SUSPECT_DROP``, each with the shuffled score; most telling first, ``MOST_SUSPECTS`` at
    most."""
    rng = np.random.default_rng(seed)
    whole = measure(predict(holdout))
    found = {}
    for column in columns:
        shuffled = holdout.copy()
        shuffled[column] = holdout[column].to_numpy()[rng.permutation(len(holdout))]
        score = measure(predict(shuffled))
        fall = whole - score if higher_is_better else score - whole
        if fall >= SUSPECT_DROP:  # NaN never is
            found[column] = score
    ranked = sorted(found, key=lambda c: found[c], reverse=not higher_is_better)
    return {column: round(found[column], 6) for column in ranked[:MOST_SUSPECTS]}
