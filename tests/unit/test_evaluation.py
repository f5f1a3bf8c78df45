"""Holdout metrics with paired-bootstrap intervals, slices, baselines and the HTML report."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from pipeline_steps.core.manifests import ScoredBaseline, ScoredChampion
from pipeline_steps.core.settings import GateSettings
from pipeline_steps.evaluation import bootstrap
from pipeline_steps.evaluation.baselines import LINEAR, linear, logistic_regression, trivial
from pipeline_steps.evaluation.bootstrap import (
    METRICS,
    paired_differences,
    replicates,
    resample_rows,
)
from pipeline_steps.evaluation.gate import gate
from pipeline_steps.evaluation.metrics import classification_report, holdout_metrics
from pipeline_steps.evaluation.report import render
from pipeline_steps.evaluation.slices import slice_results
from pipeline_steps.evaluation.training_set import LabelSummary
from tests.manifests import evaluate_manifest

N = 900


@pytest.fixture(scope="module")
def holdout() -> tuple[np.ndarray, np.ndarray, np.ndarray, pd.DataFrame]:
    """A day-sized holdout with a signal, and two models that see it through different noise."""
    rng = np.random.default_rng(0)
    signal = rng.normal(size=N)
    labels = (rng.random(N) < 1 / (1 + np.exp(-(1.8 * signal - 1.5)))).astype(np.int8)
    good = 1 / (1 + np.exp(-(1.8 * signal - 1.5 + rng.normal(0, 0.4, N))))
    poor = 1 / (1 + np.exp(-(1.8 * signal - 1.5 + rng.normal(0, 2.0, N))))
    frame = pd.DataFrame(
        {"origin": rng.choice(["EWR", "JFK", "LGA"], N, p=[0.4, 0.4, 0.2]), "signal": signal}
    )
    return labels, good, poor, frame


def _summary(labels: np.ndarray) -> LabelSummary:
    summary = LabelSummary()
    summary.add(labels)
    return summary


def test_resampled_metrics_are_the_metrics_of_the_resampled_rows(holdout) -> None:
    labels, good, _, _ = holdout
    rows = resample_rows(labels, 2, seed=3)
    assert (labels[rows].sum(axis=1) == labels.sum()).all()  # stratified: the class balance kept
    for drawn in rows:
        expected = classification_report(labels[drawn], good[drawn])
        for metric in METRICS:
            got = replicates(metric, labels, good, drawn[None, :])[0]
            assert got == pytest.approx(expected[metric], abs=1e-6), metric


def test_intervals_are_seeded_and_reproducible(holdout) -> None:
    labels, good, poor, _ = holdout
    kwargs = dict(resamples=300, confidence=0.95)
    first = paired_differences(labels, good, poor, seed=1, **kwargs)
    assert paired_differences(labels, good, poor, seed=1, **kwargs) == first
    assert paired_differences(labels, good, poor, seed=2, **kwargs)["auc"] != first["auc"]


def test_a_large_holdout_is_resampled_in_chunks_with_the_same_intervals(
    holdout, monkeypatch
) -> None:
    """Chunks hold at most the budget's indices, keep each resample stratified, and give the
    intervals all resamples at once give, within the bootstrap's own noise; a holdout within the
    budget is drawn in one chunk, as before chunks existed."""
    labels, good, poor, _ = holdout
    chunks = list(bootstrap.resample_chunks(labels, 300, seed=5, budget=40 * len(labels)))
    assert [len(c) for c in chunks] == [40] * 7 + [20]
    assert all((labels[c].sum(axis=1) == labels.sum()).all() for c in chunks)
    whole = list(bootstrap.resample_chunks(labels, 300, seed=5))
    assert len(whole) == 1 and (whole[0] == resample_rows(labels, 300, seed=5)).all()

    kwargs = dict(resamples=1000, confidence=0.95, seed=5)
    at_once = paired_differences(labels, good, poor, **kwargs)
    monkeypatch.setattr(bootstrap, "RESAMPLE_BUDGET", 40 * len(labels))
    chunked = paired_differences(labels, good, poor, **kwargs)
    assert chunked != at_once  # other draws
    for metric, interval in at_once.items():
        width = interval.high - interval.low
        assert chunked[metric].estimate == interval.estimate
        assert chunked[metric].low == pytest.approx(interval.low, abs=0.15 * width), metric
        assert chunked[metric].high == pytest.approx(interval.high, abs=0.15 * width), metric


def test_a_better_model_gets_an_interval_in_its_favour_and_itself_a_zero_one(holdout) -> None:
    labels, good, poor, _ = holdout
    better = paired_differences(labels, good, poor, resamples=500, confidence=0.95, seed=0)
    assert better["auc"].low > 0 and better["log_loss"].high < 0 and better["brier"].high < 0
    for interval in better.values():
        assert interval.low <= interval.estimate <= interval.high
    same = paired_differences(labels, good, good, resamples=200, confidence=0.95, seed=0)
    assert all((d.estimate, d.low, d.high) == (0, 0, 0) for d in same.values())


def test_a_day_sized_holdout_cannot_tell_models_of_equal_skill_apart(holdout) -> None:
    """Two models that see the signal through independent noise of the same size, as two
    retrains would: their AUCs differ by noise, and the interval spans zero."""
    labels, good, _, frame = holdout
    rng = np.random.default_rng(5)
    twin = 1 / (1 + np.exp(-(1.8 * frame["signal"].to_numpy() - 1.5 + rng.normal(0, 0.4, N))))
    diff = paired_differences(labels, good, twin, resamples=500, confidence=0.95, seed=0)["auc"]
    assert diff.estimate != 0 and diff.low < 0 < diff.high


def test_slices_name_each_value_and_only_large_ones_get_intervals(holdout) -> None:
    labels, good, poor, frame = holdout
    results = slice_results(
        frame[["origin"]], labels, poor, good, min_rows=300, resamples=200, confidence=0.95, seed=0
    )
    by_value = {r.value: r for r in results}
    assert list(by_value) == ["EWR", "JFK", "LGA"] or set(by_value) == {"EWR", "JFK", "LGA"}
    assert sum(r.rows for r in results) == N
    assert by_value["EWR"].differences["auc"].high < 0  # the poor model is worse there
    assert by_value["LGA"].rows < 300 and by_value["LGA"].differences == {}
    without_champion = slice_results(
        frame[["origin"]], labels, poor, None, min_rows=1, resamples=200, confidence=0.95, seed=0
    )
    assert all(r.champion is None and r.differences == {} for r in without_champion)


def test_baselines_the_delay_rate_and_a_logistic_regression(holdout) -> None:
    labels, _, _, frame = holdout
    train = frame.assign(delayed=labels)
    rate = trivial(_summary(labels[:600]), 300)
    assert np.all(rate == labels[:600].mean())
    p = logistic_regression(
        train.iloc[:600], train.iloc[600:], ["origin"], ["signal"], "delayed", 0
    )
    assert classification_report(labels[600:], p)["auc"] > 0.75


def test_the_report_renders_curves_metrics_slices_and_the_verdict(holdout, tmp_path) -> None:
    labels, good, poor, frame = holdout
    kwargs = dict(resamples=200, confidence=0.95, seed=0)
    champion = ScoredChampion(
        version="4", model_uri="models:/m/4", metrics=holdout_metrics(labels, good)
    )
    rate = trivial(_summary(labels), N)
    evaluation = replace(
        evaluate_manifest("r", "runs:/r/model", 0.0, champion),
        challenger=replace(
            evaluate_manifest("r", "runs:/r/model", 0.0, None).challenger,
            metrics=holdout_metrics(labels, poor),
        ),
        differences=paired_differences(labels, poor, good, **kwargs),
        baselines=[
            ScoredBaseline(
                name="trivial",
                metrics=holdout_metrics(labels, rate),
                differences=paired_differences(labels, poor, rate, **kwargs),
            )
        ],
        slices=slice_results(frame[["origin"]], labels, poor, good, min_rows=200, **kwargs),
    )
    verdict = gate(evaluation, GateSettings(), 0.95)
    assert verdict.outcome == "refuse"
    files = render(
        evaluation,
        "scheduled__2013-06-04",
        labels,
        {"challenger": poor, "champion": good, "trivial": rate},
        verdict,
        tmp_path,
    )
    assert sorted(f.name for f in files) == [
        "calibration.png",
        "index.html",
        "precision_recall.png",
        "roc.png",
    ]
    assert all(f.read_bytes()[:4] == b"\x89PNG" for f in files if f.suffix == ".png")
    html = (tmp_path / "index.html").read_text()
    assert 'Gate: <span class="refuse">refuse</span>' in html
    assert html.count("data:image/png;base64,") == 3
    assert "origin = EWR" in html and "champion (version 4)" in html
    assert verdict.reasons[-1].split(":")[0] in html  # the reasons are listed


def test_the_binary_task_is_the_default_and_its_numbers_do_not_move(holdout) -> None:
    """Naming the task ``binary`` gives what the binary evaluation always gave: the same
    stratified draws, the same metrics with intervals, the same logistic regression."""
    labels, good, poor, frame = holdout
    rows = resample_rows(labels, 50, seed=7)
    assert (resample_rows(labels, 50, seed=7, task="binary") == rows).all()
    assert (labels[rows[:, : labels.sum()]] == 1).all()  # positives first, then negatives
    kwargs = dict(resamples=200, confidence=0.95, seed=0)
    default = paired_differences(labels, good, poor, **kwargs)
    assert list(default) == list(METRICS)
    assert paired_differences(labels, good, poor, task="binary", **kwargs) == default
    train = frame.assign(delayed=labels)
    args = (train.iloc[:600], train.iloc[600:], ["origin"], ["signal"], "delayed", 0)
    assert (linear("binary", *args) == logistic_regression(*args)).all()
    assert LINEAR["binary"] == "logistic_regression"  # the name recorded runs carry
