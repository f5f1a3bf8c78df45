"""The Airflow pools of the deployment's domains, created (or resized) where Airflow is set up.

For every domain (:mod:`pipeline_steps.core.deployment`): ``orchestration.gpu_pool`` with
``orchestration.gpu_pool_slots`` slots (the train task and the tuning trials take one slot per
GPU, :mod:`pipeline_steps.orchestration.pools`) and, with ``domain.team``, the team's pool
``orchestration.pool`` with ``pool_slots`` slots (every other task of the team's DAGs), and for
a team with a quota (``orchestration.quotas``) its training pool ``train-<team>`` of ``runs``
slots, which the train task of each CPU job takes one of. A task
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
from dataclasses import dataclass
from pathlib import Path

from pipeline_steps.core.deployment import domain_settings_files
from pipeline_steps.core.settings import Settings
from pipeline_steps.orchestration.pools import train_pool

POOL_DESCRIPTION = "GPUs of trainyard's training and tuning (orchestration.gpu_pool_slots)"
TEAM_POOL_DESCRIPTION = "Tasks of team {team}'s trainyard DAGs (orchestration.pool_slots)"
TRAIN_POOL_DESCRIPTION = "Trainings of team {team} at once (orchestration.quotas.{team}.runs)"


def multi_team(environ: Mapping[str, str]) -> bool:
    """Whether the Airflow of ``environ`` runs in multi-team mode (``[core] multi_team``)."""
    return environ.get("AIRFLOW__CORE__MULTI_TEAM", "").strip().lower() in ("true", "1", "t")


@dataclass(frozen=True)
class Pool:
    """One Airflow pool as the settings ask for it; ``team``: the Airflow team owning it."""

    name: str
    slots: int
    description: str
    team: str = ""

    def set_command(self, airflow: str = "airflow") -> list[str]:
        """``airflow pools set`` creating the pool or setting its size."""
        owner = ["--team-name", self.team] if self.team else []
        return [airflow, "pools", "set", self.name, str(self.slots), self.description, *owner]

    def imported(self) -> dict[str, object]:
        """The pool as an entry of ``airflow pools import``'s file."""
        entry: dict[str, object] = {
            "slots": self.slots,
            "description": self.description,
            "include_deferred": False,
        }
        return entry | ({"team_name": self.team} if self.team else {})


def domain_pools(settings: Settings, teams: bool = False) -> list[Pool]:
    """The domain's GPU pool and its team's pool; none without either. With ``teams``
    (multi-team mode), the pools named after the domain's team belong to it; a shared GPU pool
    stays everyone's."""
    orch = settings.orchestration
    team = settings.domain.team

    def owner(pool: str) -> str:
        return team if teams and team and pool.endswith(f"-{team}") else ""

    pools = []
    if orch.gpu_pool:
        pools.append(
            Pool(orch.gpu_pool, orch.gpu_pool_slots, POOL_DESCRIPTION, owner(orch.gpu_pool))
        )
    if orch.pool:
        description = TEAM_POOL_DESCRIPTION.format(team=team or orch.pool)
        pools.append(Pool(orch.pool, orch.pool_slots, description, owner(orch.pool)))
    trainings = train_pool(settings)
    if trainings:
        runs = orch.quotas[team].runs
        description = TRAIN_POOL_DESCRIPTION.format(team=team)
        pools.append(Pool(trainings, runs, description, owner(trainings)))
    return pools


def pool_commands(
    settings: Settings, airflow: str = "airflow", teams: bool = False
) -> list[list[str]]:
    """``airflow pools set`` for each of the domain's pools (:func:`domain_pools`)."""
    return [pool.set_command(airflow) for pool in domain_pools(settings, teams)]


def deployment_pools(environ: Mapping[str, str] | None = None) -> list[Pool]:
    """The pools of every domain of the deployment in ``environ``, each pool once (a domain
    whose settings file is refused has none: it has no DAGs either)."""
    environ = os.environ if environ is None else environ
    pools: dict[str, Pool] = {}
    for domain in domain_settings_files(environ, refused=[]):
        for pool in domain_pools(domain.settings, multi_team(environ)):
            pools.setdefault(pool.name, pool)
    return list(pools.values())


def deployment_pool_commands(
    environ: Mapping[str, str] | None = None, airflow: str = "airflow"
) -> list[list[str]]:
    """``airflow pools set`` for each pool of the deployment (:func:`deployment_pools`)."""
    return [pool.set_command(airflow) for pool in deployment_pools(environ)]


def ensure_pools(environ: Mapping[str, str] | None = None, airflow: str = "airflow") -> str:
    """Create or resize the pools of the deployment in ``environ`` (default: this process's),
    with the Airflow of that environment, in one ``airflow pools import``; what was done, in
    words. In multi-team mode the bundles' teams are synced first, and a pool of a team Airflow
    does not know raises ``PoolError`` naming it before any pool is written. Raises
    ``CalledProcessError`` (with Airflow's output) when Airflow refuses."""
    pools = deployment_pools(environ)
    if not pools:
        return "orchestration.gpu_pool is empty and no domain has a team: no pool"
    env = None if environ is None else dict(environ)

    def run(*args: str) -> str:
        return subprocess.run(
            [airflow, *args], check=True, env=env, capture_output=True, text=True
        ).stdout

    if any(pool.team for pool in pools):
        run("teams", "sync")
        listed = run("teams", "list", "-o", "json")
        known = {row["name"] for row in json.loads(listed[listed.index("[") :])}
        for pool in pools:
            if pool.team and pool.team not in known:
                raise PoolError(
                    f"pool {pool.name}: Airflow has no team {pool.team!r} (domain.team); in "
                    "multi-team mode each team is the team_name of a DAG bundle "
                    "([dag_processor] dag_bundle_config_list), see docs/teams.md"
                )
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "pools.json"
        path.write_text(json.dumps({pool.name: pool.imported() for pool in pools}))
        run("pools", "import", str(path))
    return "; ".join(f"Airflow pool {pool.name} has {pool.slots} slot(s)" for pool in pools)


class PoolError(RuntimeError):
    """A pool Airflow cannot create as the settings ask."""


if __name__ == "__main__":
    beside = Path(sys.executable).parent / "airflow"  # the Airflow of this interpreter's venv
    print(ensure_pools(airflow=str(beside) if beside.exists() else "airflow"))
