"""Runs whose training sets are built, for the training tests."""

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from pipeline_steps.context import RunContext
from pipeline_steps.steps.features import build_features
from pipeline_steps.steps.ingest import ingest
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


def final_weights(ctx: RunContext) -> dict[str, torch.Tensor]:
    """The model of the newest checkpoint (written at the last epoch's end)."""
    folder = Path(ctx.lake.path(ctx.run_dir, "checkpoints"))
    newest = max(folder.glob("step-*.pt"))
    return torch.load(newest, weights_only=False)["model"]


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name, tensor in a.items():
        assert torch.equal(tensor, b[name]), name
