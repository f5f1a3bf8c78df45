"""The evaluation of multiclass and regression models: metrics as scikit-learn computes them,
their bootstrap, the baselines, slices, the gate on real intervals, the report and the step."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import date

import mlflow
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from mlflow.pyfunc import PythonModel

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.manifests import (
    EvaluateManifest,
    FeaturesManifest,
    FrozenSet,
    HoldoutMetrics,
    HoldoutRef,
    ScoredBaseline,
    ScoredChallenger,
    ScoredChampion,
    SliceResult,
    TrainingSets,
    load_manifest,
    load_record,
)
from pipeline_steps.core.settings import GateSettings
from pipeline_steps.core.tasks import HIGHER_IS_BETTER, task_spec
from pipeline_steps.core.tracking import connect
from pipeline_steps.evaluation.baselines import linear, trivial
from pipeline_steps.evaluation.bootstrap import paired_differences, replicates, resample_rows
from pipeline_steps.evaluation.gate import gate
from pipeline_steps.evaluation.metrics import holdout_metrics, task_report, unjudged_classes
from pipeline_steps.evaluation.report import render
from pipeline_steps.evaluation.slices import slice_results
from pipeline_steps.evaluation.training_set import LabelSummary
from tests.manifests import train_manifest

N = 900
CLASSES = ["early", "on_time", "late"]
KW = dict(resamples=300, confidence=0.95, seed=0)


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.fixture(scope="module")
def multiclass() -> tuple[np.ndarray, np.ndarray, np.ndarray, pd.DataFrame]:
    """Labels drawn from a signal, a model that sees it through little noise and one through
    much, and the rows' origin airport."""
    rng = np.random.default_rng(1)
    signal = rng.normal(size=N)
    logits = np.c_[-1.8 * signal, np.zeros(N), 1.8 * signal]
    labels = np.array([rng.choice(3, p=p) for p in _softmax(logits)])
    good = _softmax(logits + rng.normal(0, 0.3, (N, 3)))
    poor = _softmax(logits + rng.normal(0, 2.5, (N, 3)))
    origin = rng.choice(["EWR", "JFK", "LGA"], N, p=[0.4, 0.4, 0.2])
    return labels, good, poor, pd.DataFrame({"origin": origin, "signal": signal})


@pytest.fixture(scope="module")
def regression() -> tuple[np.ndarray, np.ndarray, np.ndarray, pd.DataFrame]:
    """A delay in minutes from a signal, a model off by 0.5 minutes of noise and one by 4."""
    rng = np.random.default_rng(2)
    signal = rng.normal(size=N)
    labels = 12 + 9 * signal + rng.normal(0, 3, N)
    good = 12 + 9 * signal + rng.normal(0, 0.5, N)
    poor = 12 + 9 * signal + rng.normal(0, 4, N)
    origin = rng.choice(["EWR", "JFK", "LGA"], N, p=[0.4, 0.4, 0.2])
    return labels, good, poor, pd.DataFrame({"origin": origin, "signal": signal})


def test_a_multiclass_resample_keeps_each_class_count_and_its_metrics_are_sklearns(
    multiclass,
) -> None:
    labels, good, _, _ = multiclass
    rows = resample_rows(labels, 4, seed=3, task="multiclass")
    assert rows.shape == (4, N)
    for drawn in rows:
        assert (np.bincount(labels[drawn], minlength=3) == np.bincount(labels)).all()
        expected = task_report("multiclass", labels[drawn], good[drawn])
        for metric in task_spec("multiclass").metrics:
            got = replicates(metric, labels, good, drawn[None, :], "multiclass")[0]
            assert got == pytest.approx(expected[metric], abs=1e-6), metric


def test_a_regression_resample_draws_rows_and_its_metrics_are_sklearns(regression) -> None:
    labels, good, _, _ = regression
    rows = resample_rows(labels, 4, seed=3, task="regression")
    assert rows.shape == (4, N)
    assert len({round(float(labels[r].mean()), 6) for r in rows}) == 4  # not stratified
    for drawn in rows:
        expected = task_report("regression", labels[drawn], good[drawn])
        for metric in task_spec("regression").metrics:
            got = replicates(metric, labels, good, drawn[None, :], "regression")[0]
            assert got == pytest.approx(expected[metric], abs=1e-6), metric


@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_a_model_against_itself_has_zero_intervals_and_a_better_one_favourable_ones(
    task, multiclass, regression
) -> None:
    labels, good, poor, _ = multiclass if task == "multiclass" else regression
    same = paired_differences(labels, good, good, task=task, **KW)
    assert list(same) == list(task_spec(task).metrics)
    assert all((d.estimate, d.low, d.high) == (0, 0, 0) for d in same.values())
    better = paired_differences(labels, good, poor, task=task, **KW)
    assert paired_differences(labels, good, poor, task=task, **KW) == better  # seeded
    for metric, interval in better.items():
        assert interval.low <= interval.estimate <= interval.high
        favourable = interval.low > 0 if HIGHER_IS_BETTER[metric] else interval.high < 0
        assert favourable, (metric, interval)


def test_non_finite_regression_predictions_give_undefined_intervals(regression) -> None:
    labels, good, poor, _ = regression
    broken = good.copy()
    broken[3] = np.nan
    assert np.isnan(holdout_metrics(labels, broken, "regression").rmse)
    diff = paired_differences(labels, broken, poor, task="regression", **KW)["rmse"]
    assert np.isnan(diff.estimate) and np.isnan(diff.low)


def _summary(labels: np.ndarray, classes: int = 0) -> LabelSummary:
    summary = LabelSummary(classes=classes)
    summary.add(labels)
    return summary


def test_multiclass_baselines_the_class_shares_and_a_multinomial_regression(multiclass) -> None:
    labels, _, _, frame = multiclass
    prior = trivial(_summary(labels[:600], 3), 300, "multiclass")
    assert prior.shape == (300, 3)
    assert np.allclose(prior[0], np.bincount(labels[:600]) / 600)
    train = frame.assign(kind=labels)
    p = linear(
        "multiclass", train.iloc[:600], train.iloc[600:], ["origin"], ["signal"], "kind", 0, 3
    )
    assert p.shape == (300, 3) and np.allclose(p.sum(axis=1), 1)
    diff = paired_differences(labels[600:], p, prior, task="multiclass", **KW)
    assert diff["log_loss"].high < 0 and diff["macro_f1"].low > 0  # it beats the class shares
    # A class the training rows lack gets no probability instead of shifting the columns.
    without_late = train.iloc[:600][labels[:600] != 2]
    q = linear("multiclass", without_late, train.iloc[600:], ["origin"], ["signal"], "kind", 0, 3)
    assert q.shape == (300, 3) and (q[:, 2] == 0).all()


def test_regression_baselines_the_mean_and_a_ridge_regression(regression) -> None:
    labels, _, _, frame = regression
    mean = trivial(_summary(labels[:600]), 300, "regression")
    assert np.all(mean == labels[:600].mean())
    train = frame.assign(minutes=labels)
    p = linear(
        "regression", train.iloc[:600], train.iloc[600:], ["origin"], ["signal"], "minutes", 0
    )
    diff = paired_differences(labels[600:], p, mean, task="regression", **KW)
    assert diff["rmse"].high < 0 and diff["r2"].low > 0
    assert holdout_metrics(labels[600:], mean, "regression").r2 == pytest.approx(0, abs=0.02)


@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_slices_carry_the_tasks_slice_metric_interval(task, multiclass, regression) -> None:
    labels, good, poor, frame = multiclass if task == "multiclass" else regression
    metric = task_spec(task).slice_metric
    results = slice_results(frame[["origin"]], labels, poor, good, min_rows=300, task=task, **KW)
    by_value = {r.value: r for r in results}
    assert sum(r.rows for r in results) == N and all(r.positives == -1 for r in results)
    worse = by_value["EWR"].differences[metric]
    assert (worse.high < 0) if metric == "accuracy" else (worse.low > 0)  # the poor model
    assert by_value["LGA"].rows < 300 and by_value["LGA"].differences == {}


@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_slices_record_each_models_slice_metric_on_the_slice(task, multiclass, regression) -> None:
    labels, good, poor, frame = multiclass if task == "multiclass" else regression
    metric = task_spec(task).slice_metric
    results = slice_results(frame[["origin"]], labels, poor, good, min_rows=300, task=task, **KW)
    for piece in results:
        rows = (frame["origin"] == piece.value).to_numpy()
        assert piece.champion is not None
        for scores, predictions in ((piece.challenger, poor), (piece.champion, good)):
            expected = task_report(task, labels[rows], predictions[rows])[metric]
            assert getattr(scores, metric) == pytest.approx(expected, abs=1e-6), piece.value
        if piece.differences:  # the interval's estimate is the difference of the two values
            difference = getattr(piece.challenger, metric) - getattr(piece.champion, metric)
            assert piece.differences[metric].estimate == pytest.approx(difference, abs=1e-5)
    other = "rmse" if task == "multiclass" else "accuracy"
    assert all(np.isnan(getattr(r.challenger, other)) for r in results)
    # Slices recorded before they held the slice metric still load, with NaN there.
    old = {
        "column": "origin",
        "value": "EWR",
        "rows": 10,
        "positives": -1,
        "challenger": {"auc": None, "log_loss": None},
    }
    loaded = load_record(SliceResult, old, "evaluation.json")
    assert np.isnan(getattr(loaded.challenger, metric)) and loaded.champion is None


def _evaluation(
    task: str,
    labels: np.ndarray,
    challenger: np.ndarray,
    champion: np.ndarray | None,
    baseline: np.ndarray,
) -> EvaluateManifest:
    """What the evaluate step records for these predictions (one trivial baseline)."""
    classes = CLASSES if task == "multiclass" else []
    scored = (
        ScoredChampion(
            version="3",
            model_uri="models:/m/3",
            metrics=holdout_metrics(labels, champion, task, classes),
        )
        if champion is not None
        else None
    )
    return EvaluateManifest(
        logical_date="2013-06-04",
        holdout=HoldoutRef(path="h", sha256="h" * 64, rows=len(labels), days=["2013-06-04"]),
        challenger=ScoredChallenger(
            model_uri="runs:/r/model",
            mlflow_run_id="r",
            metrics=holdout_metrics(labels, challenger, task, classes),
        ),
        champion=scored,
        resamples=KW["resamples"],
        differences=paired_differences(labels, challenger, champion, task=task, **KW)
        if champion is not None
        else {},
        baselines=[
            ScoredBaseline(
                name="trivial",
                metrics=holdout_metrics(labels, baseline, task, classes),
                differences=paired_differences(labels, challenger, baseline, task=task, **KW),
            )
        ],
    )


def test_the_gate_on_real_regression_intervals(regression) -> None:
    labels, good, poor, _ = regression
    mean = np.full(N, labels.mean())
    passed = gate(_evaluation("regression", labels, good, poor, mean), GateSettings(), 0.95)
    assert passed.outcome == "pass", passed.reasons
    refused = gate(_evaluation("regression", labels, poor, good, mean), GateSettings(), 0.95)
    assert refused.outcome == "refuse"
    assert any(
        r.startswith("RMSE challenger - champion") and "may be worse" in r for r in refused.reasons
    )
    first = gate(_evaluation("regression", labels, mean + 0.01, None, mean), GateSettings(), 0.95)
    assert first.outcome == "refuse"  # no better than the mean label: no first model either
    assert first.reasons[0].startswith("challenger does not beat the trivial model")


def test_the_gate_on_real_multiclass_intervals(multiclass) -> None:
    labels, good, poor, _ = multiclass
    prior = np.tile(np.bincount(labels) / N, (N, 1))
    assert gate(_evaluation("multiclass", labels, good, poor, prior), GateSettings(), 0.95).passed
    refused = gate(_evaluation("multiclass", labels, poor, good, prior), GateSettings(), 0.95)
    assert refused.outcome == "refuse"
    assert any(r.startswith("macro-F1 challenger - champion") for r in refused.reasons)
    first = gate(_evaluation("multiclass", labels, good, None, prior), GateSettings(), 0.95)
    assert first.passed and "beating the trivial model is the floor" in first.reasons[-1]


def test_a_class_with_too_few_holdout_rows_is_not_judged_and_the_decision_says_so(
    multiclass,
) -> None:
    """A fourth class with three holdout rows: the champion gets them, the challenger none, and
    otherwise they are the same model. On every class, macro-F1 refuses the challenger for
    three rows; judged on the classes with at least ``gate.min_class_rows`` rows it passes, and
    the decision names the class it could not judge."""
    labels, good, _, _ = multiclass
    rare = np.array([3, 3, 3])
    y = np.r_[labels, rare]
    common = np.c_[good, np.full(N, 1e-3)]
    common /= common.sum(axis=1, keepdims=True)
    champion = np.r_[common, np.tile([0.04, 0.03, 0.03, 0.9], (3, 1))]
    challenger = np.r_[common, np.tile([0.5, 0.1, 0.1, 0.3], (3, 1))]
    classes = [*CLASSES, "diverted"]

    def decided(min_class_rows: int) -> tuple[str, list[str]]:
        def scored(p: np.ndarray) -> HoldoutMetrics:
            return holdout_metrics(y, p, "multiclass", classes, min_class_rows)

        evaluation = EvaluateManifest(
            logical_date="2013-06-04",
            holdout=HoldoutRef(path="h", sha256="h" * 64, rows=len(y), days=["2013-06-04"]),
            challenger=ScoredChallenger(
                model_uri="runs:/r/model", mlflow_run_id="r", metrics=scored(challenger)
            ),
            champion=ScoredChampion(version="3", model_uri="models:/m/3", metrics=scored(champion)),
            unjudged_classes=unjudged_classes(y, classes, min_class_rows),
            differences=paired_differences(
                y, challenger, champion, task="multiclass", min_class_rows=min_class_rows, **KW
            ),
            baselines=[
                ScoredBaseline(
                    name="trivial",
                    metrics=scored(np.tile(np.bincount(y) / len(y), (len(y), 1))),
                    differences=paired_differences(
                        y,
                        challenger,
                        np.tile(np.bincount(y) / len(y), (len(y), 1)),
                        task="multiclass",
                        min_class_rows=min_class_rows,
                        **KW,
                    ),
                )
            ],
        )
        settings = GateSettings(min_class_rows=max(min_class_rows, 1))
        verdict = gate(evaluation, settings, 0.95)
        return verdict.outcome, verdict.reasons

    outcome, reasons = decided(0)  # every class labelled or predicted, as before
    assert outcome == "refuse"
    assert any(
        r.startswith("macro-F1 challenger - champion") and "may be worse" in r for r in reasons
    )
    outcome, reasons = decided(20)
    assert outcome == "pass", reasons
    assert (
        "macro-F1 judged on the classes with at least gate.min_class_rows=20 holdout rows; not "
        "judged: diverted (3 rows)" in reasons
    )
    assert unjudged_classes(y, classes, 20) == {"diverted": 3}


@pytest.mark.parametrize(
    ("task", "plots"),
    [
        ("multiclass", ["confusion.png"]),
        ("regression", ["predicted_vs_actual.png", "residuals.png"]),
    ],
)
def test_the_report_draws_the_tasks_plots(task, plots, multiclass, regression, tmp_path) -> None:
    labels, good, poor, frame = multiclass if task == "multiclass" else regression
    baseline = (
        np.tile(np.bincount(labels) / N, (N, 1))
        if task == "multiclass"
        else np.full(N, labels.mean())
    )
    evaluation = replace(
        _evaluation(task, labels, poor, good, baseline),
        slices=slice_results(frame[["origin"]], labels, poor, good, min_rows=200, task=task, **KW),
    )
    verdict = gate(evaluation, GateSettings(), 0.95)
    curves = {"challenger": poor, "champion": good, "trivial": baseline}
    classes = CLASSES if task == "multiclass" else ()
    files = render(evaluation, "scheduled__2013-06-04", labels, curves, verdict, tmp_path, classes)
    assert sorted(f.name for f in files) == sorted(["index.html", *plots])
    assert all(f.read_bytes()[:4] == b"\x89PNG" for f in files if f.suffix == ".png")
    html = (tmp_path / "index.html").read_text()
    assert html.count("data:image/png;base64,") == len(plots)
    html = re.sub(r"base64,[^\"]*", "", html)  # the text, not the images
    assert f"{task} task" in html and "origin = EWR" in html
    assert 'Gate: <span class="refuse">refuse</span>' in html
    if task == "multiclass":
        assert "Recall per class" in html and all(f"<th>{c}</th>" in html for c in CLASSES)
        assert "macro-F1" in html and "AUC" not in html
    else:
        assert "RMSE" in html and "mean label" in html and "positive" not in html
    metric = task_spec(task).slice_metric  # both models' value on each slice, then the interval
    ewr = next(s for s in evaluation.slices if s.value == "EWR")
    assert ewr.champion is not None
    assert (
        f"<td>{getattr(ewr.challenger, metric):.4f}</td>\n"
        f"<td>{getattr(ewr.champion, metric):.4f}</td>" in html
    )


def test_task_metrics_survive_the_manifest_and_old_metrics_load_as_binary(multiclass) -> None:
    labels, good, poor, _ = multiclass
    evaluation = _evaluation("multiclass", labels, good, poor, poor)
    line = json.dumps(evaluation.to_json())
    back = load_manifest(EvaluateManifest, json.loads(line), "evaluate.json")
    assert back.to_json() == evaluation.to_json()
    assert list(back.challenger.metrics.class_recall) == CLASSES
    old = {"auc": 0.71, "log_loss": 0.45, "accuracy": 0.8, "positive_rate": 0.2, "rows": 900}
    metrics = load_record(HoldoutMetrics, old, "evaluation.json")
    assert (metrics.task, metrics.auc, metrics.class_recall) == ("binary", 0.71, {})
    assert np.isnan(metrics.rmse)


# -- the evaluate step on a multiclass and a regression domain's sets ------------------------------


class ClassShares(PythonModel):
    """Class probabilities from the signal, columns in an order other than the classes'."""

    def predict(self, context, model_input, params=None):
        s = model_input["signal"].to_numpy()
        p = _softmax(np.c_[-1.8 * s, np.zeros(len(s)), 1.8 * s])
        return pd.DataFrame({"late": p[:, 2], "early": p[:, 0], "on_time": p[:, 1]})


class Minutes(PythonModel):
    def predict(self, context, model_input, params=None):
        return 12 + 9 * model_input["signal"].to_numpy()


def _flights(rng: np.random.Generator, rows: int, task: str) -> pd.DataFrame:
    signal = rng.normal(size=rows)
    if task == "multiclass":
        p = _softmax(np.c_[-1.8 * signal, np.zeros(rows), 1.8 * signal])
        label = np.array([rng.choice(3, p=q) for q in p])
    else:
        label = 12 + 9 * signal + rng.normal(0, 3, rows)
    return pd.DataFrame(
        {
            "carrier": rng.choice(["UA", "B6", "EV"], rows),
            "origin": rng.choice(["EWR", "JFK", "LGA"], rows),
            "sched_dep_hour": rng.integers(5, 23, rows),
            "signal": signal,
            "label": label,
        }
    )


@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_the_evaluate_step_follows_the_features_task(task, make_settings, monkeypatch) -> None:
    from pipeline_steps.steps import evaluate as step
    from pipeline_steps.steps.evaluate import evaluate, score

    settings = make_settings("evaluate.resamples=200")
    ctx = RunContext(run_id=f"run-{task}", logical_date=date(2013, 6, 4), settings=settings)
    rng = np.random.default_rng(4)
    sets = {}
    for name, rows in (("train", 1500), ("holdout", 700)):
        frame = _flights(rng, rows, task)
        path = ctx.lake.write_table(pa.Table.from_pandas(frame), "sets", f"{name}.parquet")
        sets[name] = FrozenSet(path=path, rows=rows, positive_rate=None, sha256=name)
    ctx.record(
        FeaturesManifest(
            logical_date="2013-06-04",
            status="built",
            train_days=["2013-06-03"],
            holdout_day="2013-06-04",
            categorical=["carrier", "origin"],
            numeric=["signal", "sched_dep_hour"],
            label="label",
            key="flight_id",
            sets=TrainingSets(**sets),
            inputs={},
            input_sha256="i",
            training_set_sha256="t",
            task=task,
            classes=CLASSES if task == "multiclass" else [],
        )
    )
    connect(settings.mlflow)
    with mlflow.start_run() as run:
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=ClassShares() if task == "multiclass" else Minutes(),
            pip_requirements=["mlflow"],
        )
    ctx.record(train_manifest(run.info.run_id, info.model_uri))

    evaluation = evaluate(ctx)
    metrics = evaluation.challenger.metrics
    assert metrics.task == task and evaluation.holdout.positives == -1
    assert np.isnan(metrics.auc)
    names = [b.name for b in evaluation.baselines]
    assert names == ["trivial", "logistic_regression" if task == "multiclass" else "ridge"]
    trivial_diff = evaluation.baselines[0].differences[task_spec(task).trivial_metrics[0]]
    assert trivial_diff.high < 0  # the model knows the signal; the trivial one does not
    assert gate(evaluation, settings.gate, 0.95).passed
    assert {s.column for s in evaluation.slices} == {"carrier", "origin", "departure_band"}
    report = ctx.lake.fs.ls(evaluation.report.rsplit("/", 1)[0])
    plots = {p.rsplit("/", 1)[-1] for p in report if p.endswith(".png")}
    assert plots == (
        {"confusion.png"} if task == "multiclass" else {"residuals.png", "predicted_vs_actual.png"}
    )
    if task == "multiclass":
        assert list(metrics.class_recall) == CLASSES
        holdout = ctx.lake.read_table_at(evaluation.holdout.path).to_pandas()
        # The probabilities are read by class name, not in the model's column order.
        p = score(info.model_uri, holdout, ["signal"], task, CLASSES)
        high = holdout["signal"].to_numpy() > 0.5
        assert (p[high, 2] > p[high, 1]).all() and (p[high, 1] > p[high, 0]).all()
        monkeypatch.setattr(step, "SCORE_ROWS", 64)  # 700 rows scored 64 at a time
        assert (score(info.model_uri, holdout, ["signal"], task, CLASSES) == p).all()
        with pytest.raises(StepError, match=r"no probability of class\(es\) \['delayed'\]"):
            score(info.model_uri, holdout, ["signal"], task, ["early", "on_time", "delayed"])
    else:
        assert metrics.rmse == pytest.approx(3, abs=0.4) and metrics.r2 > 0.8
        holdout = ctx.lake.read_table_at(evaluation.holdout.path).to_pandas()
        whole = score(info.model_uri, holdout, ["signal"], task)
        monkeypatch.setattr(step, "SCORE_ROWS", 64)
        assert (score(info.model_uri, holdout, ["signal"], task) == whole).all()
