"""The gate's outcomes, each from a constructed evaluation: promote, refuse, undecided, a slice
refusal, a trivial-baseline refusal; for binary, multiclass and regression models."""

from dataclasses import replace

import pytest

from pipeline_steps.core.manifests import (
    EvaluateManifest,
    HoldoutMetrics,
    HoldoutRef,
    Interval,
    ScoredBaseline,
    ScoredChallenger,
    ScoredChampion,
    SliceResult,
    SliceScores,
)
from pipeline_steps.core.settings import GateSettings, SettingsError
from pipeline_steps.evaluation.gate import gate
from tests.manifests import evaluate_manifest, scored

GATE = GateSettings(
    min_auc=0.6,
    max_auc_drop=0.01,
    max_log_loss_rise=0.01,
    min_positives=100,
    baselines_must_beat=(),  # the tests of the linear baseline hold to it (MUST_BEAT_LINEAR)
)
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


def test_a_holdout_too_small_to_promote_on_still_refuses_a_model_worse_than_trivial() -> None:
    """Minneapolis' use-of-force injuries, 2016-04-11: 47 positives (50 needed), and the
    challenger's AUC below the trivial model's with confidence. Too few rows to promote on are
    enough to see it lose: refused, not undecided."""
    holdout = HoldoutRef(path="h", sha256="h", rows=88, positives=47)
    losing = trivial(
        Interval(estimate=-0.177, low=-0.275, high=-0.075),
        Interval(estimate=0.02, low=-0.01, high=0.05),
    )
    small = evaluation(
        Interval(estimate=0.0, low=-0.1, high=0.1),
        Interval(estimate=0.0, low=-0.1, high=0.1),
        holdout=holdout,
        baselines=[losing],
    )
    verdict = gate(small, GATE, 0.95)
    assert verdict.outcome == "refuse"
    assert verdict.reasons[0] == (
        "challenger is worse than the trivial model with confidence: AUC -0.1770 [-0.2750, "
        "-0.0750]; refused"
    )
    assert "47 positive rows, fewer than gate.min_positives" in verdict.reasons[1]
    # a log loss above the trivial model's with confidence refuses as well
    worse = trivial(
        Interval(estimate=0.01, low=-0.05, high=0.07),
        Interval(estimate=0.06, low=0.024, high=0.092),
    )
    assert gate(replace(small, baselines=[worse]), GATE, 0.95).outcome == "refuse"
    # an interval that may favour the challenger leaves it undecided
    unclear = trivial(
        Interval(estimate=-0.06, low=-0.14, high=0.03),
        Interval(estimate=0.01, low=-0.02, high=0.04),
    )
    assert gate(replace(small, baselines=[unclear]), GATE, 0.95).outcome == "undecided"


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


# -- multiclass and regression: the task's metrics, margins and floors ---------------------------


def _task_evaluation(
    task: str,
    champion: HoldoutMetrics | None,
    differences: dict[str, Interval],
    trivial_diff: dict[str, Interval] | None = None,
    rows: int = 900,
) -> EvaluateManifest:
    """A ``task`` evaluation whose challenger minus champion is ``differences``."""
    challenger = HoldoutMetrics(task=task, rows=rows, rmse=20.0, mae=14.0, r2=0.4)
    if task == "multiclass":
        challenger = HoldoutMetrics(task=task, rows=rows, log_loss=0.8, accuracy=0.6, macro_f1=0.5)
    baselines = []
    if trivial_diff is not None:
        baselines = [
            ScoredBaseline(
                name="trivial",
                metrics=HoldoutMetrics(task=task, rows=rows),
                differences=trivial_diff,
            )
        ]
    return EvaluateManifest(
        logical_date="2013-06-04",
        holdout=HoldoutRef(path="h", sha256="h", rows=rows),
        challenger=ScoredChallenger(
            model_uri="runs:/r/model", mlflow_run_id="r", metrics=challenger
        ),
        champion=None
        if champion is None
        else ScoredChampion(version="3", model_uri="models:/m/3", metrics=champion),
        differences=differences,
        baselines=baselines,
    )


REGRESSION_CHAMPION = HoldoutMetrics(task="regression", rows=900, rmse=20.0, mae=14.0, r2=0.4)
BEATS_MEAN = {"rmse": Interval(estimate=-6.0, low=-7.0, high=-5.0)}


def test_a_regression_challenger_with_clearly_lower_error_passes() -> None:
    lower = {
        "rmse": Interval(estimate=-1.5, low=-2.0, high=-1.0),
        "mae": Interval(estimate=-1.0, low=-1.4, high=-0.6),
    }
    verdict = gate(
        _task_evaluation("regression", REGRESSION_CHAMPION, lower, BEATS_MEAN), GATE, 0.95
    )
    assert verdict.outcome == "pass"
    assert verdict.reasons[0].startswith("challenger beats the trivial model")
    assert "RMSE -6.0000 [-7.0000, -5.0000]" in verdict.reasons[0]
    assert verdict.reasons[1].startswith("RMSE challenger - champion -1.5000")


def test_a_regression_challenger_worse_beyond_the_relative_margin_is_refused() -> None:
    """The RMSE margin is 2 % of the champion's 20 minutes: +0.4, in the label's units."""
    within = {
        "rmse": Interval(estimate=0.1, low=-0.2, high=0.35),
        "mae": Interval(estimate=0.0, low=-0.2, high=0.2),
    }
    assert gate(_task_evaluation("regression", REGRESSION_CHAMPION, within), GATE, 0.95).passed
    beyond = {**within, "rmse": Interval(estimate=0.3, low=0.05, high=0.6)}
    verdict = gate(_task_evaluation("regression", REGRESSION_CHAMPION, beyond), GATE, 0.95)
    assert verdict.outcome == "refuse"
    assert verdict.reasons[0] == (
        "RMSE challenger - champion +0.3000 [+0.0500, +0.6000]: may be worse than the margin "
        "+0.4000 (2% of the champion's RMSE 20.0000) (95% confidence)"
    )
    looser = replace(GATE, max_rmse_rise=0.05)  # 5 %: +1.0
    assert gate(_task_evaluation("regression", REGRESSION_CHAMPION, beyond), looser, 0.95).passed


def test_a_multiclass_challenger_is_held_to_log_loss_and_macro_f1() -> None:
    champion = HoldoutMetrics(
        task="multiclass", rows=900, log_loss=0.8, accuracy=0.6, macro_f1=0.55
    )
    worse_f1 = {
        "log_loss": Interval(estimate=-0.01, low=-0.02, high=0.0),
        "macro_f1": Interval(estimate=-0.05, low=-0.08, high=-0.02),
        # accuracy is not a default gate metric of multiclass: a drop there decides nothing
        "accuracy": Interval(estimate=-0.2, low=-0.3, high=-0.1),
    }
    verdict = gate(_task_evaluation("multiclass", champion, worse_f1), GATE, 0.95)
    assert verdict.outcome == "refuse"
    assert [r.split(" challenger")[0] for r in verdict.reasons] == ["log loss", "macro-F1"]
    assert "may be worse than the margin -0.01 (95% confidence)" in verdict.reasons[1]
    on_accuracy = replace(GATE, primary_metrics=("accuracy",), max_accuracy_drop=0.5)
    assert gate(_task_evaluation("multiclass", champion, worse_f1), on_accuracy, 0.95).passed


def test_a_small_holdout_of_another_task_is_undecided_by_its_rows() -> None:
    better = {
        "rmse": Interval(estimate=-3.0, low=-4.0, high=-2.0),
        "mae": Interval(estimate=-2.0, low=-3.0, high=-1.0),
    }
    small = _task_evaluation("regression", REGRESSION_CHAMPION, better, BEATS_MEAN, rows=150)
    verdict = gate(small, GATE, 0.95)  # GATE.min_positives=100 counts only binary positives
    assert verdict.outcome == "undecided"
    assert verdict.reasons == [
        "the holdout has 150 rows, fewer than gate.min_rows=200: too few to tell the models "
        "apart; the champion stays"
    ]
    assert gate(small, replace(GATE, min_rows=100), 0.95).passed


def test_without_a_champion_beating_the_trivial_model_is_the_floor() -> None:
    first = _task_evaluation("regression", None, {}, BEATS_MEAN)
    verdict = gate(first, GATE, 0.95)
    assert verdict.passed
    assert verdict.reasons[-1] == (
        "no champion yet; for a regression task beating the trivial model is the floor"
    )
    no_better = {"rmse": Interval(estimate=-0.1, low=-0.5, high=0.3)}
    refused = gate(_task_evaluation("regression", None, {}, no_better), GATE, 0.95)
    assert refused.outcome == "refuse"
    assert refused.reasons[0].startswith(
        "challenger does not beat the trivial model (the training window's mean label): RMSE"
    )
    assert gate(_task_evaluation("regression", None, {}), GATE, 0.95).outcome == "refuse"


def test_a_regression_slice_worse_beyond_its_margin_is_named() -> None:
    """A slice recorded without the champion's RMSE on it is held to the holdout's."""
    fine = {
        "rmse": Interval(estimate=0.0, low=-0.2, high=0.2),
        "mae": Interval(estimate=0.0, low=-0.2, high=0.2),
    }
    hurt = SliceResult(
        column="origin",
        value="LGA",
        rows=250,
        positives=-1,
        challenger=SliceScores(auc=float("nan"), log_loss=float("nan")),
        champion=SliceScores(auc=float("nan"), log_loss=float("nan")),
        differences={"rmse": Interval(estimate=4.0, low=2.5, high=5.5)},
    )
    evaluation = replace(_task_evaluation("regression", REGRESSION_CHAMPION, fine), slices=[hurt])
    verdict = gate(evaluation, GATE, 0.95)
    assert verdict.outcome == "refuse"
    assert verdict.reasons[-1] == (
        "slice origin=LGA (250 rows): RMSE challenger - champion +4.0000 [+2.5000, +5.5000] is "
        "worse than the slice margin +2.0000 (10% of the champion's holdout RMSE 20.0000) "
        "(95% confidence)"
    )


def _regression_slice(value: str, champion_rmse: float, rmse: Interval) -> SliceResult:
    return SliceResult(
        column="origin",
        value=value,
        rows=250,
        positives=-1,
        challenger=SliceScores(
            auc=float("nan"), log_loss=float("nan"), rmse=champion_rmse + rmse.estimate
        ),
        champion=SliceScores(auc=float("nan"), log_loss=float("nan"), rmse=champion_rmse),
        differences={"rmse": rmse},
    )


def test_a_regression_slice_margin_is_a_fraction_of_the_champions_rmse_on_the_slice() -> None:
    """The champion's holdout RMSE is 20 minutes. On a slice of long delays it errs by 40: an
    RMSE 2.5 to 5.5 minutes higher there is within 10 % of 40. On a slice it predicts well (10)
    1.2 to 1.8 minutes is beyond 10 % of 10, though within 10 % of the holdout's 20."""
    fine = {
        "rmse": Interval(estimate=0.0, low=-0.2, high=0.2),
        "mae": Interval(estimate=0.0, low=-0.2, high=0.2),
    }
    base = _task_evaluation("regression", REGRESSION_CHAMPION, fine)
    hard = _regression_slice("LGA", 40.0, Interval(estimate=4.0, low=2.5, high=5.5))
    assert gate(replace(base, slices=[hard]), GATE, 0.95).passed
    easy = _regression_slice("JFK", 10.0, Interval(estimate=1.5, low=1.2, high=1.8))
    verdict = gate(replace(base, slices=[hard, easy]), GATE, 0.95)
    assert verdict.outcome == "refuse"
    assert verdict.reasons[-1] == (
        "slice origin=JFK (250 rows): RMSE challenger - champion +1.5000 [+1.2000, +1.8000] is "
        "worse than the slice margin +1.0000 (10% of the champion's RMSE on the slice 10.0000) "
        "(95% confidence)"
    )
    assert not any("origin=LGA" in r for r in verdict.reasons)


def test_primary_metrics_must_be_the_tasks() -> None:
    wrong = replace(GATE, primary_metrics=("auc", "log_loss"))
    evaluation = _task_evaluation("regression", REGRESSION_CHAMPION, {})
    with pytest.raises(SettingsError) as raised:
        gate(evaluation, wrong, 0.95)
    assert str(raised.value) == (
        "gate.primary_metrics names auc, log_loss, not a metric of the regression task; its "
        "metrics: rmse, mae, r2 (or leave it empty for rmse, mae)"
    )
    with pytest.raises(
        SettingsError, match=r"gate\.primary_metrics must be one of 'auc', .*got \['f2'\]"
    ):
        GateSettings(primary_metrics=("f2",))
    assert GateSettings().metrics_for("binary") == ("auc", "log_loss")


def _perfect(challenger_auc: float, logistic_auc: float) -> EvaluateManifest:
    base = evaluation(
        Interval(estimate=0.001, low=-0.006, high=0.008),
        Interval(estimate=0.0, low=-0.004, high=0.004),
    )
    logistic = ScoredBaseline(name="logistic_regression", metrics=scored(logistic_auc))
    challenger = replace(base.challenger, metrics=scored(challenger_auc))
    return replace(base, challenger=challenger, baselines=[BEATS_TRIVIAL, logistic])


def test_a_near_perfect_challenger_or_baseline_is_refused_as_a_leak() -> None:
    verdict = gate(_perfect(1.0, 0.81), GATE, 0.95)
    assert verdict.outcome == "refuse" and len(verdict.reasons) == 1
    reason = verdict.reasons[0]
    assert "near perfect on the holdout: AUC of the challenger 1.0000 >= gate.suspect_auc" in reason
    assert "gate.easy_task_reason" in reason
    # the leak shows in the linear baseline on the same features, too
    verdict = gate(_perfect(0.83, 0.998), GATE, 0.95)
    assert verdict.outcome == "refuse"
    assert "logistic_regression baseline 0.9980" in verdict.reasons[0]
    assert gate(_perfect(0.99, 0.81), GATE, 0.95).outcome == "pass"  # below 0.995


def test_the_refusal_names_the_columns_the_challenger_leans_on() -> None:
    leaning = replace(_perfect(1.0, 0.81), suspects={"name": 0.93, "price": 0.61})
    (reason,) = gate(leaning, GATE, 0.95).reasons
    assert (
        "the challenger leans on price (AUC 0.6100 with it shuffled), name (AUC 0.9300 with it "
        "shuffled): the suspect columns" in reason
    )
    (reason,) = gate(_perfect(1.0, 0.81), GATE, 0.95).reasons
    assert "no one column's shuffling spoils the challenger's score" in reason


def test_a_genuinely_easy_task_passes_with_its_reason_recorded() -> None:
    easy = replace(GATE, easy_task_reason="the sensor reads the label itself")
    verdict = gate(_perfect(1.0, 0.81), easy, 0.95)
    assert verdict.outcome == "pass"
    assert verdict.reasons[0].endswith(
        "accepted: the sensor reads the label itself (gate.easy_task_reason)"
    )


MUST_BEAT_LINEAR = replace(GATE, baselines_must_beat=("linear",))


def logistic(auc: Interval, log_loss: Interval) -> ScoredBaseline:
    return ScoredBaseline(
        name="logistic_regression",
        metrics=scored(0.7, 0.48),
        differences={"auc": auc, "log_loss": log_loss},
    )


SAME_AUC = Interval(estimate=0.01, low=-0.005, high=0.025)


def test_a_challenger_that_loses_to_the_linear_baseline_is_refused_with_its_interval() -> None:
    # the flights day: log loss +0.0304 [+0.0220, +0.0394] over the logistic regression
    losing = logistic(SAME_AUC, Interval(estimate=0.0304, low=0.022, high=0.0394))
    within = Interval(estimate=0.0, low=-0.004, high=0.004)
    evaluation_ = evaluation(within, within, baselines=[BEATS_TRIVIAL, losing])
    assert gate(evaluation_, GATE, 0.95).passed  # without it only the champion gates
    assert GateSettings().baselines_must_beat == ("linear",)  # held to it by default
    verdict = gate(evaluation_, MUST_BEAT_LINEAR, 0.95)
    assert verdict.outcome == "refuse"
    assert verdict.reasons[1] == (
        "challenger - the logistic regression baseline: log loss +0.0304 [+0.0220, +0.0394] "
        "is worse than the margin +0.01 (95% confidence); refused: gate.baselines_must_beat"
    )
    assert verdict.reasons[0].startswith("challenger beats the trivial model")


def test_a_challenger_within_the_margin_of_the_linear_baseline_passes_and_says_so() -> None:
    close = logistic(SAME_AUC, Interval(estimate=0.002, low=-0.003, high=0.008))
    first = replace(
        evaluation(SAME_AUC, SAME_AUC), champion=None, differences={}, baselines=[close]
    )
    verdict = gate(first, MUST_BEAT_LINEAR, 0.95)
    assert verdict.passed  # held to the baseline without a champion too
    assert verdict.reasons[0] == (
        "challenger does not lose to the logistic regression baseline (95% confidence): "
        "AUC +0.0100 [-0.0050, +0.0250]; log loss +0.0020 [-0.0030, +0.0080]"
    )
    # A tie within noise is no loss: the interval reaches past the margin, not wholly beyond it.
    tie = logistic(SAME_AUC, Interval(estimate=0.004, low=-0.003, high=0.012))
    assert gate(replace(first, baselines=[tie]), MUST_BEAT_LINEAR, 0.95).passed
    lower_auc = logistic(
        Interval(estimate=-0.025, low=-0.035, high=-0.015), close.differences["log_loss"]
    )
    refused = gate(replace(first, baselines=[lower_auc]), MUST_BEAT_LINEAR, 0.95)
    assert refused.outcome == "refuse"
    assert "AUC -0.0250 [-0.0350, -0.0150] is worse than the margin -0.01" in refused.reasons[0]


def test_an_unscored_linear_baseline_is_named_not_held_to() -> None:
    within = Interval(estimate=0.0, low=-0.004, high=0.004)
    verdict = gate(evaluation(within, within, baselines=[BEATS_TRIVIAL]), MUST_BEAT_LINEAR, 0.95)
    assert verdict.passed
    assert verdict.reasons[1] == (
        "the logistic regression baseline was not scored on this holdout; not held to it"
    )


def test_the_linear_baseline_of_a_regression_is_the_ridge_with_a_relative_margin() -> None:
    ridge = ScoredBaseline(
        name="ridge",
        metrics=HoldoutMetrics(task="regression", rows=900, rmse=20.0, mae=14.0, r2=0.4),
        differences={
            "rmse": Interval(estimate=0.6, low=0.45, high=0.75),  # 2 % of the ridge's 20: 0.4
            "mae": Interval(estimate=0.0, low=-0.1, high=0.1),
        },
    )
    first = replace(_task_evaluation("regression", None, {}, BEATS_MEAN), baselines=[ridge])
    assert MUST_BEAT_LINEAR.baselines_for("regression") == ("ridge",)
    verdict = gate(first, MUST_BEAT_LINEAR, 0.95)
    assert verdict.outcome == "refuse"
    assert (
        "RMSE +0.6000 [+0.4500, +0.7500] is worse than the margin +0.4000 (2% of the ridge "
        "baseline's RMSE 20.0000)" in verdict.reasons[0]
    )


def test_baselines_must_beat_takes_kinds_of_baseline() -> None:
    with pytest.raises(SettingsError, match="baselines_must_beat"):
        GateSettings(baselines_must_beat=("gbdt",))
    both = GateSettings(baselines_must_beat=("linear", "trivial"))
    assert both.baselines_for("binary") == ("logistic_regression", "trivial")
