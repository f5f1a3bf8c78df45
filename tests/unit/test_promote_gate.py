"""The gate's outcomes, each from a constructed evaluation: promote, refuse, undecided, a slice
refusal, a trivial-baseline refusal."""

from dataclasses import replace

import pytest

from pipeline_steps.core.manifests import (
    EvaluateManifest,
    HoldoutRef,
    Interval,
    ScoredBaseline,
    ScoredChampion,
    SliceResult,
    SliceScores,
)
from pipeline_steps.core.settings import GateSettings
from pipeline_steps.evaluation.gate import gate
from tests.manifests import evaluate_manifest, scored

GATE = GateSettings(min_auc=0.6, max_auc_drop=0.01, max_log_loss_rise=0.01, min_positives=100)
CHAMPION = ScoredChampion(version="3", model_uri="models:/flight_delay/3", metrics=scored(0.72))


def evaluation(auc_diff: Interval, log_loss_diff: Interval, **changes) -> EvaluateManifest:
    base = evaluate_manifest("r", "runs:/r/model", 0.72, CHAMPION)
    return replace(base, differences={"auc": auc_diff, "log_loss": log_loss_diff}, **changes)


def trivial(auc: Interval, log_loss: Interval) -> ScoredBaseline:
    return ScoredBaseline(
        name="trivial", metrics=scored(0.5, 0.52), differences={"auc": auc, "log_loss": log_loss}
    )


BEATS_TRIVIAL = trivial(
    Interval(estimate=0.22, low=0.2, high=0.24), Interval(estimate=-0.05, low=-0.06, high=-0.04)
)


def test_not_worse_beyond_the_margins_passes_and_says_so() -> None:
    verdict = gate(
        evaluation(
            Interval(estimate=0.001, low=-0.006, high=0.008),
            Interval(estimate=0.0, low=-0.004, high=0.004),
            baselines=[BEATS_TRIVIAL],
        ),
        GATE,
        0.95,
    )
    assert verdict.outcome == "pass"
    assert verdict.reasons[0].startswith("challenger beats the trivial model")
    assert (
        "AUC challenger - champion +0.0010 [-0.0060, +0.0080]: not worse than the margin -0.01"
        in verdict.reasons[1]
    )


def test_a_lower_bound_beyond_the_margin_refuses_even_with_a_better_point_estimate() -> None:
    # The point estimate is better, but the champion may be 0.012 better: noise cannot promote.
    verdict = gate(
        evaluation(
            Interval(estimate=0.002, low=-0.012, high=0.016),
            Interval(estimate=0.0, low=-0.004, high=0.004),
        ),
        GATE,
        0.95,
    )
    assert verdict.outcome == "refuse"
    assert "may be worse than the margin -0.01 (95% confidence)" in verdict.reasons[0]


def test_worse_probabilities_refuse_a_better_ranking() -> None:
    verdict = gate(
        evaluation(
            Interval(estimate=0.02, low=0.01, high=0.03),
            Interval(estimate=0.03, low=0.02, high=0.04),
        ),
        GATE,
        0.95,
    )
    assert verdict.outcome == "refuse"
    assert "log loss challenger - champion +0.0300" in verdict.reasons[1]
    assert "may be worse than the margin +0.01" in verdict.reasons[1]


def test_require_improvement_needs_one_metric_better_with_confidence() -> None:
    level = evaluation(
        Interval(estimate=0.001, low=-0.005, high=0.007),
        Interval(estimate=0.0, low=-0.004, high=0.004),
    )
    strict = replace(GATE, require_improvement=True)
    refused = gate(level, strict, 0.95)
    assert refused.outcome == "refuse"
    assert "better on none of the primary metrics" in refused.reasons[-1]
    better = replace(
        level,
        differences={
            **level.differences,
            "log_loss": Interval(estimate=-0.01, low=-0.015, high=-0.004),
        },
    )
    passed = gate(better, strict, 0.95)
    assert passed.outcome == "pass" and passed.reasons[-1].startswith("better on log loss")


def test_too_few_positives_is_undecided() -> None:
    small = evaluation(
        Interval(estimate=0.05, low=0.04, high=0.06),
        Interval(estimate=-0.05, low=-0.06, high=-0.04),
        holdout=HoldoutRef(path="h", sha256="h", rows=400, positives=60),
    )
    verdict = gate(small, GATE, 0.95)
    assert verdict.outcome == "undecided"
    assert "60 positive rows, fewer than gate.min_positives=100" in verdict.reasons[0]


def _slice(value: str, rows: int, auc: Interval) -> SliceResult:
    return SliceResult(
        column="origin",
        value=value,
        rows=rows,
        positives=rows // 4,
        challenger=SliceScores(auc=0.6, log_loss=0.5),
        champion=SliceScores(auc=0.7, log_loss=0.5),
        differences={"auc": auc},
    )


def test_a_slice_worse_beyond_its_margin_refuses_and_is_named() -> None:
    fine = evaluation(
        Interval(estimate=0.001, low=-0.006, high=0.008),
        Interval(estimate=0.0, low=-0.004, high=0.004),
    )
    hurt = replace(
        fine,
        slices=[
            _slice("JFK", 300, Interval(estimate=0.01, low=-0.02, high=0.04)),
            _slice("EWR", 280, Interval(estimate=-0.09, low=-0.13, high=-0.05)),
        ],
    )
    assert gate(fine, GATE, 0.95).outcome == "pass"
    verdict = gate(hurt, GATE, 0.95)
    assert verdict.outcome == "refuse"
    assert verdict.reasons[-1].startswith("slice origin=EWR (280 rows)")
    noisy = replace(
        fine, slices=[_slice("EWR", 280, Interval(estimate=-0.04, low=-0.09, high=0.01))]
    )
    assert gate(noisy, GATE, 0.95).outcome == "pass"  # worse, but not with confidence


@pytest.mark.parametrize("champion", [None, CHAMPION])
def test_a_challenger_that_does_not_beat_the_trivial_model_is_never_promoted(champion) -> None:
    no_skill = trivial(
        Interval(estimate=0.02, low=-0.01, high=0.05),
        Interval(estimate=-0.001, low=-0.004, high=0.002),
    )
    base = evaluate_manifest("r", "runs:/r/model", 0.72, champion)
    verdict = gate(replace(base, baselines=[no_skill]), GATE, 0.95)
    assert verdict.outcome == "refuse"
    assert verdict.reasons[0].startswith("challenger does not beat the trivial model")


def test_first_model_needs_the_floor() -> None:
    first = replace(evaluate_manifest("r", "runs:/r/model", 0.65, None), baselines=[BEATS_TRIVIAL])
    assert gate(first, GATE, 0.95).outcome == "pass"
    low = replace(first, challenger=replace(first.challenger, metrics=scored(0.55)))
    verdict = gate(low, GATE, 0.95)
    assert verdict.outcome == "refuse" and "floor 0.6" in verdict.reasons[-1]


def test_undefined_auc_never_passes() -> None:
    assert gate(evaluate_manifest("r", "m", float("nan"), None), GATE, 0.95).outcome == "refuse"
