"""Fixtures of the data tests."""

import contextlib
import io
import subprocess
from datetime import date
from pathlib import Path

import pytest

from pipeline_steps.commands.cli import main
from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.steps.ingest import ingest
from tests.conftest import FIRST_DAY


@pytest.fixture
def run(lake_home, make_settings) -> RunContext:
    """A run of the first test day whose flights are ingested (raw version 1), not validated."""
    ctx = RunContext(run_id="bad", logical_date=FIRST_DAY, settings=make_settings(home=lake_home))
    ingest(ctx)
    return ctx


def trainyard(*argv: str) -> subprocess.CompletedProcess[str]:
    """``trainyard ARGV`` in this process: its exit code and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())


def validate_file(
    path: Path, *extra: str, suite: str = "flights"
) -> subprocess.CompletedProcess[str]:
    """``trainyard validate --suite SUITE --path PATH``, in this process: its exit code and what
    it printed (``test_check_a_file_by_hand`` runs the command as its own process)."""
    return trainyard("validate", "--suite", suite, "--path", str(path), *extra)


def assert_ingest_refuses(make_settings, path: Path, match: str) -> None:
    """The ``file`` source pointed at ``path`` (named ``<day>.<ending>``, in a folder of its
    own) stops the ingest step with an error matching ``match``, and nothing is written to
    ``raw/`` or ``validated/``."""
    day = date.fromisoformat(path.name.split(".", 1)[0])
    settings = make_settings(
        "ingest.source=file",
        f"ingest.path={path.parent}/{{date}}{''.join(path.suffixes)}",
        "ingest.datasets=[flights]",
    )
    ctx = RunContext(run_id="refused", logical_date=day, settings=settings)
    with pytest.raises(StepError, match=match):
        ingest(ctx)
    assert not ctx.lake.raw_versions("flights", day)
    assert not ctx.lake.partition_dates("validated", "flights")
