"""Fixtures of the data tests."""

import pytest

from pipeline_steps.core.context import RunContext
from pipeline_steps.steps.ingest import ingest
from tests.conftest import FIRST_DAY


@pytest.fixture
def run(lake_home, make_settings) -> RunContext:
    """A run of the first test day whose flights are ingested (raw version 1), not validated."""
    ctx = RunContext(run_id="bad", logical_date=FIRST_DAY, settings=make_settings(home=lake_home))
    ingest(ctx)
    return ctx
