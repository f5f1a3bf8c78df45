import math

import numpy as np
import pytest

from pipeline_steps.evaluation.metrics import (
    accuracy,
    binned_auc,
    classification_report,
    holdout_metrics,
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


def test_multiclass_metrics_by_hand() -> None:
    labels = np.array([0, 1, 2, 2, 1, 0])
    probabilities = np.array(
        [
            [0.8, 0.1, 0.1, 0.0],
            [0.2, 0.7, 0.1, 0.0],
            [0.1, 0.1, 0.8, 0.0],
            [0.5, 0.3, 0.2, 0.0],  # a "2" taken for a "0"
            [0.3, 0.4, 0.3, 0.0],
            [0.6, 0.2, 0.2, 0.0],
        ]
    )
    classes = ["early", "on_time", "late", "cancelled"]
    metrics = holdout_metrics(labels, probabilities, "multiclass", classes)
    # Probabilities are clipped to 1e-7 and renormalised before the log.
    p = np.clip(probabilities, 1e-7, 1)
    p /= p.sum(axis=1, keepdims=True)
    assert metrics.log_loss == pytest.approx(-np.mean(np.log(p[range(6), labels])), abs=1e-6)
    assert metrics.accuracy == pytest.approx(5 / 6, abs=1e-6)
    # F1 per class: early 2*2/(2+3), on_time 1, late 2*1/(2+1); "cancelled" neither labelled
    # nor predicted, so not averaged.
    assert metrics.macro_f1 == pytest.approx((0.8 + 1 + 2 / 3) / 3, abs=1e-6)
    assert list(metrics.class_recall) == classes
    assert metrics.class_recall["early"] == 1 and metrics.class_recall["late"] == 0.5
    assert math.isnan(metrics.class_recall["cancelled"])  # no rows of it
    assert metrics.task == "multiclass" and metrics.rows == 6
    assert math.isnan(metrics.auc) and math.isnan(metrics.rmse) and math.isnan(metrics.brier)


def test_a_certain_wrong_class_costs_at_most_about_minus_log_eps() -> None:
    loss = holdout_metrics([2], [[1.0, 0.0, 0.0]], "multiclass", ["a", "b", "c"]).log_loss
    assert loss == pytest.approx(-math.log(1e-7), abs=1e-5)
    nan = holdout_metrics(
        [0, 1], [[np.nan, 0.5, 0.5], [0.2, 0.4, 0.4]], "multiclass", ["a", "b", "c"]
    )
    assert math.isnan(nan.log_loss)


def test_regression_metrics_by_hand() -> None:
    labels = np.array([1.0, 2.0, 3.0, 4.0])
    metrics = holdout_metrics(labels, np.array([1.5, 2.0, 2.5, 5.0]), "regression")
    assert metrics.rmse == pytest.approx(math.sqrt((0.25 + 0 + 0.25 + 1) / 4), abs=1e-6)
    assert metrics.mae == pytest.approx(0.5, abs=1e-6)
    assert metrics.r2 == pytest.approx(1 - 1.5 / 5, abs=1e-6)  # 1 - SSres / SStot
    assert metrics.label_mean == 2.5 and metrics.task == "regression"
    assert math.isnan(metrics.log_loss) and math.isnan(metrics.positive_rate)
    broken = holdout_metrics(labels, np.array([1.5, np.inf, 2.5, 5.0]), "regression")
    assert math.isnan(broken.rmse) and math.isnan(broken.mae) and math.isnan(broken.r2)


def test_binary_metrics_keep_their_fields_and_leave_the_others_undefined() -> None:
    metrics = holdout_metrics([0, 1, 1, 0], [0.2, 0.9, 0.6, 0.4])
    assert (metrics.task, metrics.auc, metrics.accuracy, metrics.positive_rate) == (
        "binary",
        1.0,
        1.0,
        0.5,
    )
    assert math.isnan(metrics.macro_f1) and metrics.class_recall == {}
    assert math.isnan(metrics.rmse) and math.isnan(metrics.label_mean)
