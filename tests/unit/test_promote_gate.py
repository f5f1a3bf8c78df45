from pipeline_steps.promote import gate
from pipeline_steps.settings import GateSettings

GATE = GateSettings(min_auc=0.6, max_auc_drop=0.01)


def test_first_model_needs_the_floor() -> None:
    assert gate({"auc": 0.65}, None, GATE)[0]
    passed, reasons = gate({"auc": 0.55}, None, GATE)
    assert not passed and "floor 0.6" in reasons[0]


def test_challenger_may_be_slightly_worse_but_not_more() -> None:
    champion = {"auc": 0.71, "log_loss": 0.5}
    assert gate({"auc": 0.705, "log_loss": 0.5}, champion, GATE)[0]
    passed, reasons = gate({"auc": 0.69, "log_loss": 0.5}, champion, GATE)
    assert not passed and "champion AUC 0.7100" in reasons[0]


def test_better_ranking_with_worse_probabilities_is_not_promoted() -> None:
    champion = {"auc": 0.86, "log_loss": 0.47}
    assert gate({"auc": 0.87, "log_loss": 0.48}, champion, GATE)[0]
    passed, reasons = gate({"auc": 0.87, "log_loss": 0.93}, champion, GATE)
    assert not passed
    assert "challenger log loss 0.9300 > champion log loss 0.4700 + allowed rise" in reasons[1]


def test_undefined_auc_never_passes() -> None:
    assert not gate({"auc": float("nan")}, None, GATE)[0]
