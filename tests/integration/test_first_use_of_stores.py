"""A new PostgreSQL database as the deployment's study storage and MLflow store, opened by
several processes at once, as the first runs of several teams' domains open them: each store
creates its tables on first use, and without the store's lock all but one process failed on a
unique violation (Optuna's ``CREATE TYPE studydirection``, MLflow's ``alembic_version``)."""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing import get_context
from typing import Any

import pytest

pytestmark = [pytest.mark.services, pytest.mark.slow]
PROCESSES = 6


def open_study_storage(url: str, _experiment: str) -> None:
    from pipeline_steps.core.settings import TuningSettings
    from pipeline_steps.tuning.study import storage

    storage(TuningSettings(storage=url))


def open_tracking_store(url: str, experiment: str) -> None:
    from pipeline_steps.core.settings import MlflowSettings
    from pipeline_steps.core.tracking import connect

    connect(MlflowSettings(tracking_uri=url, experiment=experiment))


def _first_use(opener: Callable[[str, str], None], url: str, ready: Any, said: Any) -> None:
    """One process's first use of the store, once every process is ready."""
    ready.wait()
    try:
        opener(url, "matches_scouting_tuning")
        said.put("opened")
    except Exception as exc:
        said.put(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")


@pytest.mark.parametrize("opener", [open_study_storage, open_tracking_store])
def test_processes_opening_a_new_store_at_once_all_open_it(
    opener: Callable[[str, str], None], new_database: str
) -> None:
    ctx = get_context("spawn")
    ready, said = ctx.Barrier(PROCESSES), ctx.Queue()
    processes = [
        ctx.Process(target=_first_use, args=(opener, new_database, ready, said))
        for _ in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    results = [said.get(timeout=180) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    assert results == ["opened"] * PROCESSES, results
