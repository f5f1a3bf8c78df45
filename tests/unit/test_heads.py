"""The task heads: a label that does not fit the task is refused by name, regression learns on
the standardised label and predicts in its units, and binary keeps its loss and histograms."""

import json
import math
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
import torch

from pipeline_steps.core.errors import StepError
from pipeline_steps.steps.train.heads import AUC_BINS, Head, fit_head
from tests.conftest import ROOT

CLASSES = ["low", "mid", "high"]


@pytest.mark.parametrize(
    ("task", "classes", "labels", "message"),
    [
        ("binary", [], [0, 1, 2], r"binary label must be 0 or 1; found \[2\.0\]"),
        ("multiclass", CLASSES, [0, 3], r"class index 0\.\.2 into \['low', 'mid', 'high'\]"),
        ("regression", [], [1.0, None], "1 missing value"),
        ("regression", [], [1.0, float("inf")], "non-finite"),
    ],
)
def test_a_label_that_does_not_fit_the_task_is_named(task, classes, labels, message) -> None:
    with pytest.raises(StepError, match=message) as raised:
        fit_head(task, classes, pa.array(labels), "training_sets/r/train.parquet")
    assert "training_sets/r/train.parquet" in str(raised.value)


def test_regression_learns_standardised_and_predicts_in_label_units() -> None:
    labels = pa.array([80.0, 100.0, 120.0, 100.0])
    head = fit_head("regression", [], labels, "set")
    assert head.label_mean == 100.0 and head.label_std == pytest.approx(np.std([80, 100, 120, 100]))
    target = torch.tensor([[1.0], [-1.0]])  # standardised outputs
    assert head.predict(target).tolist() == pytest.approx(
        [100 + head.label_std, 100 - head.label_std]
    )
    exact = (torch.tensor([80.0, 120.0]) - 100.0) / head.label_std
    assert float(head(exact.unsqueeze(1), torch.tensor([80.0, 120.0]))) == 0.0
    sums = head.validation_sums(torch.zeros(2, 1), torch.tensor([90.0, 110.0]))
    assert head.validation_metrics(sums.tolist())["val_rmse"] == pytest.approx(10.0)


def test_multiclass_loss_accuracy_and_probabilities() -> None:
    head = fit_head("multiclass", CLASSES, pa.array([0, 1, 2]), "set")
    outputs = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 3.0]])
    labels = torch.tensor([0.0, 1.0])
    expected = torch.nn.functional.cross_entropy(outputs, labels.long())
    assert float(head(outputs, labels)) == pytest.approx(float(expected))
    metrics = head.validation_metrics(head.validation_sums(outputs, labels).tolist())
    assert metrics["val_accuracy"] == 0.5
    assert head.predict(outputs).sum(axis=1) == pytest.approx([1.0, 1.0])


def test_binary_is_the_logistic_loss_on_one_logit() -> None:
    head = Head()
    logits, labels = torch.tensor([[0.0], [2.0]]), torch.tensor([1.0, 0.0])
    expected = (math.log(2) + math.log1p(math.exp(2))) / 2
    assert float(head(logits, labels)) == pytest.approx(expected)
    sums = head.validation_sums(logits, labels)
    assert len(sums) == 2 + 2 * AUC_BINS and head.validation_metrics(sums.tolist())["val_auc"] == 0


def test_a_training_rank_imports_no_evaluation_library() -> None:
    """Every rank of every training imports the loop; the validation metrics it computes are
    numpy's (:func:`binned_auc`), so scikit-learn and SciPy (1 s of CPU a rank) stay out."""
    code = (
        "import sys, json; import pipeline_steps.steps.train.loop; "
        "from pipeline_steps.evaluation.metrics import binned_auc; "
        "assert binned_auc([0, 1, 3], [2, 1, 0]) > 0.5; "
        "print(json.dumps([m for m in ('sklearn', 'scipy') if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
