"""The Airflow pools of the deployment's domains, created (or resized) where Airflow is set up.

For every domain (:mod:`pipeline_steps.core.deployment`): ``orchestration.gpu_pool`` with
``orchestration.gpu_pool_slots`` slots (the train task and the tuning trials take one slot per
GPU, :mod:`pipeline_steps.orchestration.pools`) and, with ``domain.team``, the team's pool
``orchestration.pool`` with ``pool_slots`` slots (every other task of the team's DAGs). A task
of a pool that does not exist is never scheduled. ``make airflow-db`` (``python -m
pipeline_steps.services.gpu_pool``) and ``trainyard services up`` call :func:`ensure_pools`
after ``airflow db migrate``: one ``airflow pools import`` of them all; docker-compose's
``airflow-init`` runs :func:`deployment_pool_commands`, one ``airflow pools set`` each. Setting a
pool again resizes it to the settings' size (a size changed in the UI does not survive the next
setup); two domains naming one pool share it, at the first one's size.

Under Airflow's multi-team mode (``AIRFLOW__CORE__MULTI_TEAM=True``, each team a DAG bundle
of its own, docs/teams.md) a team's pools belong to the team (``--team-name``): Airflow then
refuses them to the tasks of another team's DAGs. The teams are created from the bundles'
configuration first (``airflow teams sync``); a domain whose team is no bundle's is named.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from pipeline_steps.core.deployment import domain_settings_files
from pipeline_steps.core.settings import Settings

POOL_DESCRIPTION = "GPUs of trainyard's training and tuning (orchestration.gpu_pool_slots)"
TEAM_POOL_DESCRIPTION = "Tasks of team {team}'s trainyard DAGs (orchestration.pool_slots)"


def multi_team(environ: Mapping[str, str]) -> bool:
    """Whether the Airflow of ``environ`` runs in multi-team mode (``[core] multi_team``)."""
    return environ.get("AIRFLOW__CORE__MULTI_TEAM", "").strip().lower() in ("true", "1", "t")


def pool_commands(
    settings: Settings, airflow: str = "airflow", teams: bool = False
) -> list[list[str]]:
    """``airflow pools set`` for the domain's GPU pool and its team's pool (creates each or
    sets its size); none without either. With ``teams`` (multi-team mode), the pools named
    after the domain's team belong to it; a shared GPU pool stays everyone's."""
    orch = settings.orchestration
    team = settings.domain.team
    commands = []

    def owned(pool: str) -> list[str]:
        return ["--team-name", team] if teams and team and pool.endswith(f"-{team}") else []

    if orch.gpu_pool:
        commands.append(
            [
                airflow,
                "pools",
                "set",
                orch.gpu_pool,
                str(orch.gpu_pool_slots),
                POOL_DESCRIPTION,
                *owned(orch.gpu_pool),
            ]
        )
    if orch.pool:
        description = TEAM_POOL_DESCRIPTION.format(team=team or orch.pool)
        commands.append(
            [
                airflow,
                "pools",
                "set",
                orch.pool,
                str(orch.pool_slots),
                description,
                *owned(orch.pool),
            ]
        )
    return commands


def deployment_pool_commands(
    environ: Mapping[str, str] | None = None, airflow: str = "airflow"
) -> list[list[str]]:
    """The pool commands of every domain of the deployment in ``environ``, each pool once (a
    domain whose settings file is refused has none: it has no DAGs either)."""
    environ = os.environ if environ is None else environ
    commands: dict[str, list[str]] = {}
    for domain in domain_settings_files(environ, refused=[]):
        for command in pool_commands(domain.settings, airflow, multi_team(environ)):
            commands.setdefault(command[3], command)
    return list(commands.values())


def ensure_pools(environ: Mapping[str, str] | None = None, airflow: str = "airflow") -> str:
    """Create or resize the pools of the deployment in ``environ`` (default: this process's),
    with the Airflow of that environment, in one ``airflow pools import``; what was done, in
    words. In multi-team mode the bundles' teams are synced first, and a pool of a team Airflow
    does not know raises ``PoolError`` naming it before any pool is written. Raises
    ``CalledProcessError`` (with Airflow's output) when Airflow refuses."""
    commands = deployment_pool_commands(environ, airflow)
    if not commands:
        return "orchestration.gpu_pool is empty and no domain has a team: no pool"
    env = None if environ is None else dict(environ)

    def run(*args: str) -> str:
        return subprocess.run(
            [airflow, *args], check=True, env=env, capture_output=True, text=True
        ).stdout

    pools = {
        c[3]: {
            "slots": int(c[4]),
            "description": c[5],
            "include_deferred": False,
            **({"team_name": c[c.index("--team-name") + 1]} if "--team-name" in c else {}),
        }
        for c in commands
    }
    teams = {str(p["team_name"]) for p in pools.values() if "team_name" in p}
    if teams:
        run("teams", "sync")
        listed = run("teams", "list", "-o", "json")
        known = {row["name"] for row in json.loads(listed[listed.index("[") :])}
        for pool, values in pools.items():
            if values.get("team_name", "") and values["team_name"] not in known:
                raise PoolError(
                    f"pool {pool}: Airflow has no team {values['team_name']!r} (domain.team); in "
                    "multi-team mode each team is the team_name of a DAG bundle "
                    "([dag_processor] dag_bundle_config_list), see docs/teams.md"
                )
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "pools.json"
        path.write_text(json.dumps(pools))
        run("pools", "import", str(path))
    return "; ".join(f"Airflow pool {c[3]} has {c[4]} slot(s)" for c in commands)


class PoolError(RuntimeError):
    """A pool Airflow cannot create as the settings ask."""


if __name__ == "__main__":
    beside = Path(sys.executable).parent / "airflow"  # the Airflow of this interpreter's venv
    print(ensure_pools(airflow=str(beside) if beside.exists() else "airflow"))
