"""Runs whose training sets are built, for the training tests."""

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from pipeline_steps.core.context import RunContext
from pipeline_steps.steps.features import build_features
from pipeline_steps.steps.ingest import ingest
from pipeline_steps.steps.train import checkpoint
from pipeline_steps.steps.train.state import TrainingState
from pipeline_steps.steps.validate import validate
from tests.conftest import FIRST_DAY


@pytest.fixture
def prepare_run(lake_home, make_settings) -> Callable[..., RunContext]:
    """Call with a run id and setting overrides: ingest, validate and features done."""

    def prepare(run_id: str, *overrides: str) -> RunContext:
        settings = make_settings(*overrides, home=lake_home)
        ctx = RunContext(run_id=run_id, logical_date=FIRST_DAY, settings=settings)
        ingest(ctx)
        validate(ctx)
        build_features(ctx)
        return ctx

    return prepare


def states_of(ctx: RunContext) -> dict[Path, TrainingState]:
    """The training states of the run's checkpoints, by file, oldest first."""
    found = checkpoint.paths(ctx.lake, f"{ctx.run_dir}/checkpoints")
    return {Path(p): checkpoint.read(ctx.lake, p) for p in found}


def final_weights(ctx: RunContext) -> dict[str, torch.Tensor]:
    """The model of the newest checkpoint (written at the last epoch's end)."""
    return list(states_of(ctx).values())[-1].model


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name, tensor in a.items():
        assert torch.equal(tensor, b[name]), name
