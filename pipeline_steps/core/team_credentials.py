"""Each team's own MLflow user, so that one team's steps cannot write another team's runs and
models.

MLflow's basic-auth app (the production profile's server) grants ``MANAGE`` on an experiment or
registered model to the user who created it, and everyone else ``default_permission`` (``READ``
here). A domain with ``domain.team`` therefore writes as the team's user, ``team-<team>``: its
experiments and registered model are the team's, and another team's user is refused (HTTP 403)
writing them. The deployment keeps the team's password in ``MLFLOW_TEAM_<TEAM>_PASSWORD`` (the
team's name upper-cased, ``-`` as ``_``) in the environment of Airflow's workers; where it is
absent, the team's steps write as the deployment's one user (``MLFLOW_TRACKING_USERNAME``).
With ``orchestration.team_queues`` the team's tasks go to its Celery queue, ``team-<team>``,
whose workers hold its password alone (the production profile's ``airflow-worker-<team>``):
the shared worker and another team's hold none of it.
On Kubernetes the team's pods take its login from a Secret, ``trainyard-mlflow-<team>``
(``kubernetes.mlflow_secret``).

Standard library only (and the foundation): the DAG files' operators call this while running.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from pipeline_steps.core.environment import environment


def team_user(team: str) -> str:
    """The team's MLflow user name."""
    return f"team-{team}"


def team_secret(team: str) -> str:
    """The Kubernetes Secret holding the team's MLflow login (``kubernetes.mlflow_secret``);
    empty for no team."""
    return f"trainyard-mlflow-{team}" if team else ""


def team_queue(team: str) -> str:
    """The Celery queue of the team's tasks (``orchestration.team_queues``), taken by the
    workers holding its credentials alone."""
    return f"team-{team}"


def password_variable(team: str) -> str:
    """The environment variable holding the team's MLflow password."""
    return f"MLFLOW_TEAM_{team.upper().replace('-', '_')}_PASSWORD"


def team_environment(team: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``MLFLOW_TRACKING_USERNAME`` and ``_PASSWORD`` of ``team``'s user, when the deployment
    holds its password in ``environ``; else nothing (the deployment's own user stays)."""
    environ = os.environ if environ is None else environ
    password = environ.get(password_variable(team)) if team else None
    if not password:
        return {}
    return {"MLFLOW_TRACKING_USERNAME": team_user(team), "MLFLOW_TRACKING_PASSWORD": password}


@contextmanager
def as_team(team: str) -> Iterator[None]:
    """Within the block, this process's MLflow calls authenticate as ``team``'s user (see
    :func:`team_environment`); the environment is restored after."""
    with environment(team_environment(team)):
        yield
