"""Exclusive locks across processes and machines: a file lock (``flock``) in a local folder, a
PostgreSQL advisory lock for a ``postgresql...`` URL.

Promotion (``promotion.lock``) and tuning claims (``tuning.storage``) take one around a
read-compare-write that the store behind it cannot do atomically; a process opening a database
store takes one around the opening, which creates the store's tables on first use (MLflow's
once per process, Optuna's at each opening).
"""

from __future__ import annotations

import fcntl
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline_steps.core.settings import SettingsError

log = logging.getLogger(__name__)
WAIT_NOTED_S = 1.0  # a wait longer than this is logged


@contextmanager
def exclusive(where: str, name: str, *, setting: str) -> Iterator[None]:
    """Hold the lock ``name`` while the block runs.

    ``where`` is a folder (the lock is the file ``<where>/<name>.lock``; it works across the
    processes of one machine, or of machines sharing a network file system that supports
    ``flock``) or a ``postgresql...`` SQLAlchemy URL (an advisory lock, held by a connection of
    its own; it works across machines). ``setting`` names where ``where`` came from, for the
    error when it is neither.
    """
    started = time.monotonic()
    if where.startswith("postgresql"):
        lock = _advisory_lock(where, name)
    elif "://" in where:
        raise SettingsError(f"{setting}={where!r}: a lock is a local folder or a postgresql:// URL")
    else:
        lock = _file_lock(Path(where) / f"{name}.lock")
    with lock:
        waited = time.monotonic() - started
        if waited > WAIT_NOTED_S:
            log.info("waited %.1f s for the lock %s", waited, name)
        yield


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def _advisory_lock(url: str, name: str) -> Iterator[None]:
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as conn:
            key = {"name": f"trainyard:{name}"}
            conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(hashtext(:name))"), key)
            try:
                yield
            finally:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(hashtext(:name))"), key)
    finally:
        engine.dispose()


@contextmanager
def store_lock(url: str, name: str, *, setting: str, sqlite_suffix: str = "") -> Iterator[bool]:
    """Hold a lock of the database store at the SQLAlchemy ``url`` and yield True: on
    PostgreSQL the advisory lock ``name``, beside a SQLite database the file lock of the
    database's name and ``sqlite_suffix``; yield False for any other store (a tracking server,
    another database)."""
    if url.startswith("sqlite:///"):
        database = Path(url.removeprefix("sqlite:///"))
        database.parent.mkdir(parents=True, exist_ok=True)
        with exclusive(str(database.parent), database.name + sqlite_suffix, setting=setting):
            yield True
    elif url.startswith("postgresql"):
        with exclusive(url, name, setting=setting):
            yield True
    else:
        yield False
