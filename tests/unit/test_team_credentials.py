"""A team's steps write to MLflow as the team's user when the deployment holds its password,
else as the deployment's one user."""

import os
import sys

from pipeline_steps.core.team_credentials import as_team, password_variable, team_environment


def test_a_team_s_password_variable_and_user() -> None:
    assert password_variable("revenue-ops") == "MLFLOW_TEAM_REVENUE_OPS_PASSWORD"
    assert team_environment("revenue-ops", {"MLFLOW_TEAM_REVENUE_OPS_PASSWORD": "s"}) == {
        "MLFLOW_TRACKING_USERNAME": "team-revenue-ops",
        "MLFLOW_TRACKING_PASSWORD": "s",
    }
    assert team_environment("revenue-ops", {}) == {}  # no password: the deployment's user
    assert team_environment("", {"MLFLOW_TEAM__PASSWORD": "s"}) == {}


def test_as_team_authenticates_within_the_block_only(monkeypatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "trainyard")
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    monkeypatch.setenv("MLFLOW_TEAM_REVENUE_PASSWORD", "s")
    with as_team("revenue"):
        assert os.environ["MLFLOW_TRACKING_USERNAME"] == "team-revenue"
        assert os.environ["MLFLOW_TRACKING_PASSWORD"] == "s"
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "trainyard"
    assert "MLFLOW_TRACKING_PASSWORD" not in os.environ


def test_a_team_s_step_process_writes_as_the_team(monkeypatch) -> None:
    from pipeline_steps.orchestration.runners import LocalStepOperator

    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "trainyard")
    monkeypatch.setenv("MLFLOW_TEAM_REVENUE_PASSWORD", "s")
    code = (
        "import json, os; print(json.dumps({'step': 'probe', "
        "'user': os.environ['MLFLOW_TRACKING_USERNAME']}))"
    )
    argv = [sys.executable, "-c", code]
    ran = LocalStepOperator(task_id="probe", step="probe", argv=argv, team="revenue").execute({})
    assert ran == {"step": "probe", "user": "team-revenue"}
    shared = LocalStepOperator(task_id="probe", step="probe", argv=argv).execute({})
    assert shared["user"] == "trainyard"  # a domain without a team: the deployment's user
