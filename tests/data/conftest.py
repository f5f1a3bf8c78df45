"""Fixtures of the data tests."""

import contextlib
import io
import subprocess
from pathlib import Path

import pytest

from pipeline_steps.commands.cli import main
from pipeline_steps.core.context import RunContext
from pipeline_steps.steps.ingest import ingest
from tests.conftest import FIRST_DAY


@pytest.fixture
def run(lake_home, make_settings) -> RunContext:
    """A run of the first test day whose flights are ingested (raw version 1), not validated."""
    ctx = RunContext(run_id="bad", logical_date=FIRST_DAY, settings=make_settings(home=lake_home))
    ingest(ctx)
    return ctx


def validate_file(
    path: Path, *extra: str, suite: str = "flights"
) -> subprocess.CompletedProcess[str]:
    """``trainyard validate --suite SUITE --path PATH``, in this process: its exit code and what
    it printed (``test_check_a_file_by_hand`` runs the command as its own process)."""
    argv = ["validate", "--suite", suite, "--path", str(path), *extra]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
