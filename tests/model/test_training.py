"""Training behaviour: it learns, it is deterministic on CPU, and it resumes from checkpoints."""

import logging
from pathlib import Path

import mlflow.pyfunc
import pandas as pd
import pytest
import torch

from pipeline_steps.context import RunContext
from pipeline_steps.features import build_features
from pipeline_steps.ingest import ingest
from pipeline_steps.lake import Lake
from pipeline_steps.metrics import roc_auc
from pipeline_steps.train import checkpoint, train
from pipeline_steps.validate import validate
from tests.conftest import FIRST_DAY

pytestmark = pytest.mark.slow


@pytest.fixture
def prepared(lake_home, make_settings):
    """Contexts of runs whose features are built; call with a run id."""
    settings = make_settings("train.epochs=3", home=lake_home)

    def prepare(run_id: str) -> RunContext:
        ctx = RunContext(run_id=run_id, logical_date=FIRST_DAY, settings=settings)
        ingest(ctx)
        validate(ctx)
        build_features(ctx)
        return ctx

    return prepare


def _weights(ctx: RunContext, epoch: int) -> dict[str, torch.Tensor]:
    path = ctx.lake.path(ctx.run_dir, "checkpoints", f"epoch-{epoch:04d}.pt")
    return torch.load(path, weights_only=False)["model"]


def test_model_beats_a_constant_baseline_on_the_holdout(prepared) -> None:
    ctx = prepared("learn")
    manifest = train(ctx)
    assert manifest["epochs"] == 3 and manifest["world_size"] == 1
    mlflow.set_tracking_uri(ctx.settings.mlflow.tracking_uri)
    holdout = pd.read_parquet(ctx.upstream("features")["sets"]["holdout"]["path"])
    model = mlflow.pyfunc.load_model(manifest["model_uri"])
    probabilities = model.predict(holdout.drop(columns=["delayed"]))
    assert probabilities.shape == (len(holdout),)
    assert ((probabilities > 0) & (probabilities < 1)).all()
    assert roc_auc(holdout["delayed"], probabilities) > 0.6  # a constant scores 0.5


def test_same_data_and_seed_give_the_same_weights(prepared) -> None:
    first, second = prepared("a"), prepared("b")
    train(first)
    train(second)
    for name, tensor in _weights(first, 2).items():
        assert torch.equal(tensor, _weights(second, 2)[name]), name


def test_resume_recomputes_no_finished_epoch(prepared, caplog) -> None:
    reference, interrupted = prepared("reference"), prepared("interrupted")
    train(reference)
    train(interrupted)
    # Lose the last epoch as a killed worker would: its checkpoint and the step's manifest.
    interrupted.lake.remove(interrupted.run_dir, "checkpoints", "epoch-0002.pt")
    interrupted.lake.remove(interrupted.run_dir, "train.json")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="pipeline_steps.train"):
        resumed = train(interrupted)
    trained_epochs = [r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch ")]
    assert [m.split(":")[0] for m in trained_epochs] == ["epoch 2"]
    assert resumed["epochs"] == 3
    for name, tensor in _weights(reference, 2).items():
        assert torch.equal(tensor, _weights(interrupted, 2)[name]), name


def test_corrupt_newest_checkpoint_falls_back_to_the_previous(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path))
    for epoch in range(3):
        checkpoint.save(lake, "ck", epoch, {"epoch": epoch, "config_hash": "h"}, keep=2)
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["epoch-0001.pt", "epoch-0002.pt"]
    (tmp_path / "ck" / "epoch-0002.pt").write_bytes(b"torn write")
    assert checkpoint.load_latest(lake, "ck", "h")["epoch"] == 1
    assert checkpoint.load_latest(lake, "ck", "other settings") is None
