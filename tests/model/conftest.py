"""Runs whose training sets are built, for the training tests."""

import shutil
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
from tests.conftest import FIRST_DAY, settings_in


def prepare(home: Path, run_id: str, *overrides: str) -> RunContext:
    """A run of FIRST_DAY in ``home`` (a copy of the seeded lake) whose ingest, validate and
    features are done, with the tests' settings and ``overrides``."""
    ctx = RunContext(run_id=run_id, logical_date=FIRST_DAY, settings=settings_in(home, *overrides))
    ingest(ctx)
    validate(ctx)
    build_features(ctx)
    return ctx


@pytest.fixture
def prepare_run(ready_lake_home) -> Callable[..., RunContext]:
    """Call with a run id and setting overrides: ingest, validate and features done (the first
    two found done in the home)."""
    return lambda run_id, *overrides: prepare(ready_lake_home, run_id, *overrides)


@pytest.fixture(scope="module")
def module_home(ready_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the seeded lake, FIRST_DAY validated, for the module: a run trained once there
    serves its tests."""
    home = tmp_path_factory.mktemp("module") / "home"
    shutil.copytree(ready_home, home)
    return home


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
