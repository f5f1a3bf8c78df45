"""Temperature scaling: the temperature is fitted on the validation rows the trainer holds out,
lowers an over-confident model's validation log loss, travels with the packaged model and is
recorded in the train manifest."""

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from pipeline_steps.core.manifests import Calibration, TrainManifest, load_manifest
from pipeline_steps.core.models import BatchShape
from pipeline_steps.core.settings import TrainSettings
from pipeline_steps.steps.train.calibration import (
    calibrate,
    fit_temperature,
    mean_loss,
    validation_outputs,
)
from pipeline_steps.steps.train.data import Preprocessor, TrainingTable
from pipeline_steps.steps.train.heads import Head
from pipeline_steps.steps.train.models import build
from pipeline_steps.steps.train.packaging import BUNDLE, TrainedModel, bundle
from tests.manifests import train_manifest

CATEGORICAL, NUMERIC = ["carrier"], ["distance"]
OVERCONFIDENCE = 4.0


class Overconfident(torch.nn.Module):
    """A fixed model whose logit is ``OVERCONFIDENCE`` times the true one (the standardised
    distance): the temperature that calibrates it is ``OVERCONFIDENCE``."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(OVERCONFIDENCE))

    def forward(self, codes: torch.Tensor, numeric: torch.Tensor) -> torch.Tensor:
        return self.scale * numeric[:, :1]


def _frame(rows: int = 6000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    distance = rng.normal(1000.0, 300.0, rows)
    true_logit = (distance - 1000.0) / 300.0
    delayed = (rng.random(rows) < 1 / (1 + np.exp(-true_logit))).astype(np.int64)
    carrier = rng.choice(["UA", "AA", "DL"], rows).astype(object)
    return pd.DataFrame({"carrier": carrier, "distance": distance, "delayed": delayed})


def _table(tmp_path: Path, frame: pd.DataFrame) -> TrainingTable:
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pandas(frame), path, row_group_size=500)
    return TrainingTable(
        str(path), fsspec.filesystem("file"), [*CATEGORICAL, *NUMERIC, "delayed"], 13, 0.2
    )


def test_the_temperature_is_fitted_on_the_validation_rows_alone(tmp_path: Path) -> None:
    frame = _frame()
    table = _table(tmp_path, frame)
    pre = Preprocessor.fit(frame, CATEGORICAL, NUMERIC)
    outputs, labels = validation_outputs(Overconfident(), table, pre, "delayed", batch_size=64)
    masks = [table.is_validation(g) for g in range(len(table.group_rows))]
    held_out = np.concatenate(masks)
    assert 0 < len(labels) == int(held_out.sum()) < len(frame)
    # exactly the rows the trainer validates on, in order: not the fitting rows
    assert labels.numpy().tolist() == frame["delayed"].to_numpy()[held_out].tolist()
    _, numeric = pre.transform(frame[held_out])
    assert torch.allclose(outputs, OVERCONFIDENCE * numeric[:, :1])


def test_an_overconfident_model_gets_its_temperature_and_a_lower_log_loss(tmp_path: Path) -> None:
    frame = _frame(rows=20_000)
    table = _table(tmp_path, frame)
    pre = Preprocessor.fit(frame, CATEGORICAL, NUMERIC)
    head = Head(task="binary")
    fitted = calibrate(Overconfident(), head, table, pre, "delayed", batch_size=512)
    assert fitted.temperature == pytest.approx(OVERCONFIDENCE, rel=0.15)
    assert fitted.val_log_loss_after < fitted.val_log_loss_before - 0.05
    assert fitted.rows == sum(int(table.is_validation(g).sum()) for g in range(40))


@pytest.mark.parametrize(
    ("task", "classes", "outputs"),
    [
        ("multiclass", ("low", "mid", "high"), 3),
        ("ordinal", ("S", "M", "L"), 2),
    ],
)
def test_classes_are_calibrated_too(task: str, classes: tuple[str, ...], outputs: int) -> None:
    generator = torch.Generator().manual_seed(0)
    true = torch.randn(4000, outputs, generator=generator)
    head = Head(task=task, classes=classes)
    probabilities = torch.as_tensor(head.predict(true))
    labels = torch.multinomial(probabilities, 1, generator=generator).squeeze(1).float()
    fitted = fit_temperature(head, 3.0 * true, labels)
    assert fitted.temperature == pytest.approx(3.0, rel=0.2)
    assert fitted.val_log_loss_after < fitted.val_log_loss_before
    if task == "multiclass":  # softmax: the temperature changes no most probable class
        calibrated = replace(head, temperature=fitted.temperature).predict(3.0 * true)
        assert (calibrated.argmax(1) == head.predict(3.0 * true).argmax(1)).all()


def test_a_calibrated_model_keeps_temperature_one() -> None:
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(5000, 1, generator=generator)
    labels = (torch.rand(5000, generator=generator) < torch.sigmoid(logits[:, 0])).float()
    fitted = fit_temperature(Head(task="binary"), logits, labels)
    assert fitted.temperature == pytest.approx(1.0, abs=0.1)
    assert fitted.val_log_loss_after <= fitted.val_log_loss_before
    assert mean_loss(Head(task="binary"), logits, labels, 1.0) == pytest.approx(
        fitted.val_log_loss_before, abs=1e-6
    )


def test_no_validation_rows_keep_temperature_one() -> None:
    fitted = fit_temperature(Head(task="binary"), torch.zeros((0, 1)), torch.zeros(0))
    assert fitted.temperature == 1.0 and fitted.rows == 0


def test_the_packaged_model_predicts_with_its_temperature(tmp_path: Path) -> None:
    frame = _frame(rows=200)
    pre = Preprocessor.fit(frame, CATEGORICAL, NUMERIC)
    shape = BatchShape(
        cardinalities=pre.cardinalities, numeric_width=pre.numeric_width, outputs=1, task="binary"
    )
    torch.manual_seed(0)
    model, config = build(TrainSettings(), shape)

    def loaded(temperature: float) -> TrainedModel:
        path = tmp_path / f"bundle-{temperature}.pt"
        head = Head(task="binary", temperature=temperature)
        torch.save(bundle(model, pre, "mlp", {**config, "head": head.to_dict()}), path)
        packaged = TrainedModel()
        packaged.load_context(SimpleNamespace(artifacts={BUNDLE: str(path)}))
        return packaged

    rows = frame.drop(columns=["delayed"])
    plain = np.asarray(loaded(1.0).predict(None, rows))
    scaled = loaded(2.5)
    assert scaled.head.temperature == 2.5
    warmed = np.asarray(scaled.predict(None, rows))
    logit = np.log(plain / (1 - plain))
    assert np.log(warmed / (1 - warmed)) == pytest.approx(logit / 2.5, abs=1e-5)


def test_a_head_recorded_before_calibration_predicts_with_temperature_one() -> None:
    head = Head.from_dict({"task": "binary", "classes": [], "label_mean": 0, "label_std": 1})
    assert head.temperature == 1.0
    assert Head.from_dict(replace(head, temperature=1.7).to_dict()).temperature == 1.7


def test_the_train_manifest_records_the_temperature() -> None:
    calibration = Calibration(
        temperature=1.8, val_log_loss_before=0.52, val_log_loss_after=0.49, rows=2600
    )
    manifest = replace(train_manifest("r", "runs:/r/model"), calibration=calibration)
    document = manifest.to_json()
    assert document["calibration"]["temperature"] == 1.8
    assert load_manifest(TrainManifest, document, "train.json").calibration == calibration
    # a manifest written before calibration reads back without one
    del document["calibration"]
    assert load_manifest(TrainManifest, document, "train.json").calibration is None


def test_regression_is_not_calibrated_and_the_setting_turns_it_off() -> None:
    assert not Head(task="regression").spec.calibrated
    assert all(Head(task=t).spec.calibrated for t in ("binary", "multiclass", "ordinal"))
    assert TrainSettings().calibrate and not TrainSettings(calibrate=False).calibrate
