from pipeline_steps.settings import GateSettings
from pipeline_steps.steps.promote import gate
from tests.manifests import scored

GATE = GateSettings(min_auc=0.6, max_auc_drop=0.01)


def test_first_model_needs_the_floor() -> None:
    assert gate(scored(0.65), None, GATE)[0]
    passed, reasons = gate(scored(0.55), None, GATE)
    assert not passed and "floor 0.6" in reasons[0]


def test_challenger_may_be_slightly_worse_but_not_more() -> None:
    champion = scored(0.71, 0.5)
    assert gate(scored(0.705, 0.5), champion, GATE)[0]
    passed, reasons = gate(scored(0.69, 0.5), champion, GATE)
    assert not passed and "champion AUC 0.7100" in reasons[0]


def test_better_ranking_with_worse_probabilities_is_not_promoted() -> None:
    champion = scored(0.86, 0.47)
    assert gate(scored(0.87, 0.48), champion, GATE)[0]
    passed, reasons = gate(scored(0.87, 0.93), champion, GATE)
    assert not passed
    assert "challenger log loss 0.9300 > champion log loss 0.4700 + allowed rise" in reasons[1]


def test_undefined_auc_never_passes() -> None:
    assert not gate(scored(float("nan")), None, GATE)[0]
