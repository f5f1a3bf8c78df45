import math

from pipeline_steps.metrics import accuracy, log_loss, roc_auc


def test_auc_known_values() -> None:
    assert roc_auc([0, 0, 1, 1], [0.1, 0.2, 0.8, 0.9]) == 1.0
    assert roc_auc([0, 0, 1, 1], [0.9, 0.8, 0.2, 0.1]) == 0.0
    assert roc_auc([0, 1, 0, 1], [0.5, 0.5, 0.5, 0.5]) == 0.5  # ties count half
    assert roc_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == 0.75
    assert math.isnan(roc_auc([1, 1], [0.2, 0.3]))


def test_log_loss_and_accuracy() -> None:
    assert abs(log_loss([1, 0], [0.5, 0.5]) - math.log(2)) < 1e-12
    assert accuracy([1, 0, 1], [0.9, 0.2, 0.4]) == 2 / 3
