"""The Airflow home the integration tests run their DAGs in (see ``pipeline_runs.dag_test``)."""

import os
import sys

import pytest

from tests.conftest import WINDOW


@pytest.fixture
def airflow_env(airflow_db, lake_home, monkeypatch):
    """The run's migrated Airflow metadata DB; the steps see the seeded lake, the short window
    and no linear baseline to beat."""
    monkeypatch.setenv("TRAINYARD_HOME", str(lake_home))
    monkeypatch.setenv("TRAINYARD_FEATURES__WINDOW_DAYS", str(WINDOW))
    # A few quick steps on three days of rows: such a network loses to the logistic regression,
    # which the gate refuses by default; these tests are about the DAG's path, not the model.
    monkeypatch.setenv("TRAINYARD_GATE__BASELINES_MUST_BEAT", "[]")
    # Task subprocesses find `trainyard` and `torchrun` beside this interpreter.
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
    return lake_home
