import math

import numpy as np
import pytest

from pipeline_steps.evaluation.metrics import (
    accuracy,
    binned_auc,
    classification_report,
    log_loss,
    roc_auc,
)


def test_auc_known_values() -> None:
    assert roc_auc([0, 0, 1, 1], [0.1, 0.2, 0.8, 0.9]) == 1.0
    assert roc_auc([0, 0, 1, 1], [0.9, 0.8, 0.2, 0.1]) == 0.0
    assert roc_auc([0, 1, 0, 1], [0.5, 0.5, 0.5, 0.5]) == 0.5  # ties count half
    assert roc_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == 0.75
    assert math.isnan(roc_auc([1, 1], [0.2, 0.3]))
    assert math.isnan(roc_auc([0, 0, 0], [0.2, 0.3, 0.9]))


def test_log_loss_and_accuracy() -> None:
    assert abs(log_loss([1, 0], [0.5, 0.5]) - math.log(2)) < 1e-12
    assert accuracy([1, 0, 1], [0.9, 0.2, 0.4]) == 2 / 3


def test_a_diverged_model_is_scored_not_rejected() -> None:
    """Non-finite outputs: AUC ranks them (NaN highest), log loss is NaN, accuracy counts NaN
    as "not delayed"; certain predictions are clipped rather than infinitely penalised."""
    labels = [0, 1, 1, 0, 1, 0]
    scores = [0.1, np.nan, 0.5, np.inf, -np.inf, np.nan]
    assert roc_auc(labels, scores) == pytest.approx(_rank_auc(labels, scores))
    assert math.isnan(log_loss(labels, scores))
    assert accuracy(labels, scores) == 3 / 6
    assert log_loss([1, 0], [0.0, 1.0]) == pytest.approx(-math.log(1e-7))
    assert log_loss([0], [0.2]) == pytest.approx(-math.log(0.8))  # one class present


def _rank_auc(labels, scores) -> float:
    """Mann-Whitney U with average ranks for ties (numpy's order: NaN last)."""
    y, s = np.asarray(labels, dtype=np.int8), np.asarray(scores, dtype=np.float64)
    order = np.argsort(s, kind="mergesort")
    _, first, counts = np.unique(s[order], return_index=True, return_counts=True)
    ranks = np.empty(len(s))
    ranks[order] = np.repeat(first + (counts + 1) / 2.0, counts)
    positives, negatives = int(y.sum()), int(len(y) - y.sum())
    return (ranks[y == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives)


@pytest.mark.parametrize("rows", [10, 754, 20_000])
def test_metrics_match_their_formulas_on_model_like_scores(rows: int) -> None:
    rng = np.random.default_rng(rows)
    labels = rng.random(rows) < 0.2  # about the holdout's share of delayed flights
    probabilities = 1 / (1 + np.exp(-(rng.normal(size=rows) + labels)))
    for scores in (probabilities, probabilities.round(2), probabilities.astype(np.float32)):
        p = np.clip(scores.astype(np.float64), 1e-7, 1 - 1e-7)
        report = classification_report(labels, scores)
        assert report["auc"] == pytest.approx(_rank_auc(labels, scores), abs=1e-6)
        expected_loss = -np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p))
        assert report["log_loss"] == pytest.approx(expected_loss, abs=1e-6)
        assert report["accuracy"] == pytest.approx(np.mean((scores >= 0.5) == labels), abs=1e-6)
        assert report["rows"] == rows


def test_binned_auc_equals_the_auc_of_the_binned_scores() -> None:
    """What the train loop sums across ranks gives the AUC of scores rounded down to bins."""
    rng = np.random.default_rng(0)
    labels = rng.random(5000) < 0.3
    bins = np.minimum((rng.beta(2, 5, 5000) + 0.2 * labels) * 64, 63).astype(int)
    positives = np.bincount(bins[labels], minlength=64)
    negatives = np.bincount(bins[~labels], minlength=64)
    assert binned_auc(positives, negatives) == pytest.approx(_rank_auc(labels, bins), abs=1e-12)
    assert math.isnan(binned_auc(positives, np.zeros(64)))
