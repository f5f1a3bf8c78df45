"""The Airflow pool of GPU slots, created (or resized) where Airflow is set up.

``orchestration.gpu_pool`` with ``orchestration.gpu_pool_slots`` slots: the train task and the
tuning trials take one slot per GPU (:mod:`pipeline_steps.orchestration.pools`), and a task of a
pool that does not exist is never scheduled. ``make airflow-db`` runs ``python -m
pipeline_steps.services.gpu_pool``; ``trainyard services up`` and docker-compose's
``airflow-init`` call :func:`pool_command` after ``airflow db migrate``. Setting the pool again
resizes it to the settings' size (a size changed in the UI does not survive the next setup).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from pipeline_steps.core.settings import Settings, load_settings

POOL_DESCRIPTION = "GPUs of trainyard's training and tuning (orchestration.gpu_pool_slots)"


def pool_command(settings: Settings, airflow: str = "airflow") -> list[str] | None:
    """``airflow pools set`` for the GPU pool (creates it or sets its size); None without one."""
    orch = settings.orchestration
    if not orch.gpu_pool:
        return None
    return [airflow, "pools", "set", orch.gpu_pool, str(orch.gpu_pool_slots), POOL_DESCRIPTION]


def ensure_pool(environ: Mapping[str, str] | None = None, airflow: str = "airflow") -> str:
    """Create or resize the GPU pool of the settings in ``environ`` (default: this process's),
    with the Airflow of that environment; what was done, in words. Raises
    ``CalledProcessError`` (with Airflow's output) when Airflow refuses."""
    command = pool_command(load_settings(environ=environ), airflow)
    if command is None:
        return "orchestration.gpu_pool is empty: no GPU pool"
    env = None if environ is None else dict(environ)
    subprocess.run(command, check=True, env=env, capture_output=True, text=True)
    return f"Airflow pool {command[3]} has {command[4]} slot(s)"


if __name__ == "__main__":
    beside = Path(sys.executable).parent / "airflow"  # the Airflow of this interpreter's venv
    print(ensure_pool(airflow=str(beside) if beside.exists() else "airflow"))
