"""The columns a near-perfect model leans on, found by shuffling each alone."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline_steps.evaluation.suspects import shuffled_scores


def test_a_column_the_score_rests_on_is_named_and_a_bystander_is_not() -> None:
    rng = np.random.default_rng(1)
    holdout = pd.DataFrame({"copy": rng.integers(0, 2, 400), "noise": rng.normal(size=400)})
    labels = holdout["copy"].to_numpy()

    def predict(rows: pd.DataFrame) -> np.ndarray:
        return rows["copy"].to_numpy()

    def accuracy(predicted: np.ndarray) -> float:
        return float(np.mean(predicted == labels))

    found = shuffled_scores(predict, holdout, ["copy", "noise"], accuracy, higher_is_better=True)
    assert list(found) == ["copy"] and 0.4 < found["copy"] < 0.6
    # an error measure falls the other way: shuffling raises it
    found = shuffled_scores(
        predict, holdout, ["noise", "copy"], lambda p: 1 - accuracy(p), higher_is_better=False
    )
    assert list(found) == ["copy"] and 0.4 < found["copy"] < 0.6
