from pipeline_steps.promote import gate
from pipeline_steps.settings import GateSettings

GATE = GateSettings(min_auc=0.6, max_auc_drop=0.01)


def test_first_model_needs_the_floor() -> None:
    assert gate({"auc": 0.65}, None, GATE)[0]
    passed, reasons = gate({"auc": 0.55}, None, GATE)
    assert not passed and "floor 0.6" in reasons[0]


def test_challenger_may_be_slightly_worse_but_not_more() -> None:
    assert gate({"auc": 0.705}, {"auc": 0.71}, GATE)[0]
    passed, reasons = gate({"auc": 0.69}, {"auc": 0.71}, GATE)
    assert not passed and "champion AUC 0.7100" in reasons[0]


def test_undefined_auc_never_passes() -> None:
    assert not gate({"auc": float("nan")}, None, GATE)[0]
