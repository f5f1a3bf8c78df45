"""Training behaviour: it learns with both architectures, it is deterministic on CPU, and it
resumes from step checkpoints exactly."""

import dataclasses
import logging
from pathlib import Path

import mlflow.pyfunc
import pandas as pd
import pytest
import torch

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.lake import Lake
from pipeline_steps.core.manifests import FeaturesManifest, LoopPosition
from pipeline_steps.evaluation.metrics import roc_auc
from pipeline_steps.steps.train import checkpoint, step, train, trainer
from pipeline_steps.steps.train.state import TrainingState
from tests.model.conftest import assert_same_weights, final_weights, states_of

pytestmark = pytest.mark.slow
SMALL = ("train.epochs=3", "train.batch_size=128", "features.row_group_rows=256")


@pytest.fixture
def prepared(prepare_run):
    """Contexts of runs whose features are built; call with a run id and setting overrides."""
    return lambda run_id, *overrides: prepare_run(run_id, *SMALL, *overrides)


@pytest.mark.parametrize("model", ["mlp", "ft_transformer"])
def test_each_model_beats_a_constant_baseline_on_the_holdout(prepared, model: str) -> None:
    ctx = prepared(f"learn-{model}", f"train.model={model}")
    manifest = train(ctx)
    assert manifest is not None
    assert manifest.epochs == 3 and manifest.world_size == 1 and manifest.steps > 0
    mlflow.set_tracking_uri(ctx.settings.mlflow.tracking_uri)
    holdout = pd.read_parquet(ctx.upstream(FeaturesManifest).sets.holdout.path)
    # the registered pyfunc predicts from raw feature rows (preprocessing travels with it)
    loaded = mlflow.pyfunc.load_model(manifest.model_uri)
    probabilities = loaded.predict(holdout.drop(columns=["delayed"]))
    assert probabilities.shape == (len(holdout),)
    assert ((probabilities > 0) & (probabilities < 1)).all()
    assert roc_auc(holdout["delayed"], probabilities) > 0.6  # a constant scores 0.5
    run = mlflow.get_run(manifest.mlflow_run_id)
    assert run.data.params["world_size"] == "1" and run.data.params["train.model"] == model
    assert {"train_loss", "val_loss", "val_auc", "samples_per_s"} <= run.data.metrics.keys()
    # the temperature fitted on the validation rows: in the manifest, the run and the model
    calibration = manifest.calibration
    assert calibration is not None and calibration.temperature > 0
    assert calibration.val_log_loss_after <= calibration.val_log_loss_before
    assert run.data.metrics["calibration_temperature"] == pytest.approx(calibration.temperature)
    assert loaded.unwrap_python_model().head.temperature == calibration.temperature


def test_same_data_and_seed_give_the_same_weights(prepared) -> None:
    first, second = prepared("a"), prepared("b")
    train(first)
    train(second)
    assert_same_weights(final_weights(first), final_weights(second))


def test_resume_mid_epoch_continues_exactly(prepared, caplog) -> None:
    """Lose everything after a mid-epoch step checkpoint, as a killed worker would; the rerun
    resumes from that batch and ends with the uninterrupted run's weights."""
    extra = ("train.checkpoint_every=4", "train.keep_checkpoints=50", "train.grad_accumulation=2")
    reference, interrupted = prepared("reference", *extra), prepared("interrupted", *extra)
    train(reference)
    train(interrupted)
    states = states_of(interrupted)
    mid = next(p for p, s in states.items() if s.position.epoch == 1 and s.position.epoch_batches)
    for path in states:
        if path > mid:
            path.unlink()
    interrupted.lake.remove(interrupted.run_dir, "train.json")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="pipeline_steps.steps.train"):
        resumed = train(interrupted)
    trained = [r.getMessage().split(":")[0] for r in caplog.records]
    assert [m for m in trained if m.startswith("epoch ")] == ["epoch 1", "epoch 2"]
    assert resumed is not None and resumed.resumed_from == states[mid].position
    assert resumed.resumed_from.epoch == 1 and resumed.epochs == 3
    assert_same_weights(final_weights(reference), final_weights(interrupted))


def test_early_stopping_ends_training_after_patience(prepared) -> None:
    # a learning rate this small barely moves the loss: no epoch improves on the first by 1e-6
    ctx = prepared("patient", "train.epochs=6", "train.patience=1", "train.learning_rate=1e-12")
    manifest = train(ctx)
    assert manifest is not None and manifest.stopped_early is True and manifest.epochs < 6


def test_the_registered_model_holds_the_best_epochs_weights(prepared, monkeypatch) -> None:
    # validation losses scripted to 0.5, 0.4, 0.6, 0.7: epoch 1 is the best, patience 2 stops
    # after epoch 3, and the registered model is epoch 1's, not the last epoch's
    losses = iter([0.5, 0.4, 0.6, 0.7])
    measured = step.validation_sums

    def scripted(*args, **kwargs):
        sums = measured(*args, **kwargs)
        sums[0] = next(losses) * sums[1]  # the loss sum over the validation rows
        return sums

    monkeypatch.setattr(trainer.step, "validation_sums", scripted)
    ctx = prepared("best", "train.epochs=6", "train.patience=2", "train.checkpoint_every=0")
    manifest = train(ctx)
    assert manifest is not None and manifest.stopped_early is True and manifest.epochs == 4
    assert manifest.best_epoch == manifest.model_epoch == 1
    assert manifest.metrics["val_loss"] == pytest.approx(0.4)
    states = states_of(ctx).values()
    # written at epoch 1's end
    after_best = next(s.model for s in states if s.position.epoch == 2)
    mlflow.set_tracking_uri(ctx.settings.mlflow.tracking_uri)
    registered = mlflow.pyfunc.load_model(manifest.model_uri).unwrap_python_model()
    assert_same_weights(registered.model.state_dict(), after_best)
    last = final_weights(ctx)
    assert any(not torch.equal(last[k], after_best[k]) for k in last)  # training went on


def test_too_few_row_groups_for_the_ranks_is_a_clear_error(prepared, monkeypatch) -> None:
    ctx = prepared("wide", "features.row_group_rows=100000")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(StepError, match=r"1 row group\(s\) to fit, fewer than the 2 training"):
        train(ctx)


def _state(at_step: int, config_hash: str = "h") -> TrainingState:
    """A training state with empty model and optimizer states, for the checkpoint files."""
    return TrainingState(
        position=LoopPosition(epoch=0, epoch_batches=at_step, step=at_step),
        model={},
        optimizer={},
        scheduler={},
        rng=[],
        world_size=1,
        layout_world_size=1,
        config_hash=config_hash,
    )


def test_corrupt_newest_checkpoint_falls_back_to_the_previous(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path))
    for at_step in (10, 20, 30):
        checkpoint.save(lake, "ck", _state(at_step), keep=2)
    names = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert names == ["step-00000020.pt", "step-00000030.pt"]
    (tmp_path / "ck" / "step-00000030.pt").write_bytes(b"torn write")
    resumed = checkpoint.load_latest(lake, "ck", "h")
    assert resumed is not None and resumed.position.step == 20
    assert checkpoint.load_latest(lake, "ck", "other settings") is None


def _previous_layout(state: TrainingState) -> dict:
    """``state`` as checkpoints were written before the training state was typed: one flat
    dict with a (disabled) loss scaler's state beside the position's fields."""
    return {
        "model": state.model,
        "optimizer": state.optimizer,
        "scheduler": state.scheduler,
        "scaler": {},
        **dataclasses.asdict(state.position),
        "history": state.history,
        "stopping": dataclasses.asdict(state.stopping),
        "best_model": state.best_model,
        "rng": state.rng,
        "world_size": state.world_size,
        "config_hash": state.config_hash,
    }


def test_a_checkpoint_of_the_previous_layout_is_not_resumed_from(tmp_path: Path, caplog) -> None:
    lake = Lake(str(tmp_path))
    (tmp_path / "ck").mkdir()
    torch.save(_previous_layout(_state(10)), tmp_path / "ck" / "step-00000010.pt")
    with caplog.at_level(logging.INFO, logger="pipeline_steps.steps.train"):
        assert checkpoint.load_latest(lake, "ck", "h") is None
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "step-00000010.pt is of another layout" in messages
    assert "training starts fresh" in messages


def test_training_over_checkpoints_of_the_previous_layout_starts_fresh(prepared, caplog) -> None:
    """A run whose checkpoints were written in the previous layout (same settings) trains
    again from the start, to the weights a run without checkpoints reaches."""
    ctx = prepared("legacy", "train.epochs=2")
    train(ctx)
    reference = final_weights(ctx)
    for path, state in states_of(ctx).items():
        torch.save(_previous_layout(state), path)
    ctx.lake.remove(ctx.run_dir, "train.json")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="pipeline_steps.steps.train"):
        again = train(ctx)
    assert again is not None and again.resumed_from is None and again.epochs == 2
    messages = [r.getMessage() for r in caplog.records]
    assert any("training starts fresh" in m for m in messages)
    assert [m.split(":")[0] for m in messages if m.startswith("epoch ")] == ["epoch 0", "epoch 1"]
    assert_same_weights(final_weights(ctx), reference)


@pytest.mark.parametrize("max_norm", [0.05, 1e6])
def test_gradient_clipping_matches_torch(max_norm: float) -> None:
    """Clipped (small bound) and untouched (large bound): the same gradients as torch's own."""
    torch.manual_seed(0)
    ours = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.Linear(5, 1))
    reference = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.Linear(5, 1))
    reference.load_state_dict(ours.state_dict())
    x = torch.randn(32, 7)
    for model in (ours, reference):
        model(x).square().mean().backward()
    before = [p.grad.clone() for p in ours.parameters()]
    step.clip_grad_norm(list(ours.parameters()), max_norm)
    torch.nn.utils.clip_grad_norm_(reference.parameters(), max_norm, foreach=True)
    for mine, theirs in zip(ours.parameters(), reference.parameters(), strict=True):
        assert torch.equal(mine.grad, theirs.grad)
    after = list(ours.parameters())
    changed = any(not torch.equal(p.grad, b) for p, b in zip(after, before, strict=True))
    assert changed == (max_norm < 1)


def test_validation_days_and_an_epoch_floor_are_used_and_recorded(prepared) -> None:
    ctx = prepared(
        "by-days",
        "train.validation_split=days",
        "train.min_steps_per_epoch=60",
        "train.batch_size=512",
    )
    features = ctx.upstream(FeaturesManifest)
    one_pass = int(features.sets.train.rows * 0.9) // 512
    assert one_pass < 60  # the window is too small for 60 batches of 512 in one pass
    manifest = train(ctx)
    assert manifest is not None and manifest.validation is not None
    assert manifest.validation.by == "days"
    assert set(manifest.validation.days) < set(features.train_days)
    assert len(manifest.validation.days) == max(1, round(0.1 * len(features.train_days)))
    train_rows = pd.read_parquet(features.sets.train.path, columns=["flight_date", "delayed"])
    held = train_rows["flight_date"].isin(manifest.validation.days)
    assert manifest.validation.rows == int(held.sum())
    calibration = manifest.calibration
    assert calibration is not None and calibration.rows == manifest.validation.rows
    assert manifest.steps == 3 * 60  # three epochs of 60 batches each, not of one pass
    run = mlflow.get_run(manifest.mlflow_run_id)
    assert run.data.tags["validation_split"] == "days"
    assert run.data.tags["validation_days"] == ",".join(manifest.validation.days)
