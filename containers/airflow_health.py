"""The health checks of docker-compose.yaml's Airflow services, light enough to run often.

``airflow jobs check --local`` answers whether this host's scheduler, DAG processor or
triggerer is alive, but it imports Airflow to do so: 2.5 s of CPU per check, every 30 s, in
every such container. This asks the metadata database the same question with ``psycopg2``
alone (0.05 s):

    python airflow_health.py job SchedulerJob        # exit 0: alive, 1: not (the reason printed)
    python airflow_health.py job TriggererJob --threshold 30

A job is alive as Airflow's ``Job.is_alive`` has it: a row of that type for this host (its fully
qualified name, Airflow's default ``hostname_callable``) in state ``running`` whose latest
heartbeat is younger than the threshold: the ``--threshold`` given, else Airflow's setting for
that job type from the environment (``AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD``,
``AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD``,
``AIRFLOW__DAG_PROCESSOR__HEALTH_CHECK_THRESHOLD``), else its default. The database is the one of
``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``: PostgreSQL (libpq reads ``PGPASSWORD``) or SQLite.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote, urlparse

THRESHOLDS = {
    "SchedulerJob": ("AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD", 30.0),
    "TriggererJob": ("AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD", 30.0),
    "DagProcessorJob": ("AIRFLOW__DAG_PROCESSOR__HEALTH_CHECK_THRESHOLD", 30.0),
}
"""Per job type: the environment variable of Airflow's threshold (seconds) and its default."""

LATEST_HEARTBEAT = (
    "SELECT latest_heartbeat FROM job WHERE job_type = {p} AND hostname = {p} AND state = 'running'"
    " ORDER BY latest_heartbeat DESC LIMIT 1"
)


class HealthError(RuntimeError):
    """The check cannot be made: an unknown job type, a database URL it cannot read."""


def threshold_s(job_type: str, environ: Mapping[str, str]) -> float:
    if job_type not in THRESHOLDS:
        raise HealthError(f"job type {job_type!r}: expected one of {', '.join(THRESHOLDS)}")
    variable, default = THRESHOLDS[job_type]
    value = environ.get(variable, "")
    try:
        return float(value) if value else default
    except ValueError:
        raise HealthError(f"{variable}={value!r} is not a number of seconds") from None


def connect(url: str) -> tuple[Any, str]:
    """A DB-API connection to the SQLAlchemy URL and its parameter style's placeholder."""
    parsed = urlparse(url)
    dialect = parsed.scheme.split("+", 1)[0]
    if dialect in ("postgresql", "postgres"):
        import psycopg2

        return psycopg2.connect(
            host=parsed.hostname or None,
            port=parsed.port,
            user=unquote(parsed.username) if parsed.username else None,
            password=unquote(parsed.password) if parsed.password else None,
            dbname=parsed.path.lstrip("/") or None,
            connect_timeout=10,
        ), "%s"
    if dialect == "sqlite":
        import sqlite3

        path = url.split(":///", 1)[1] if ":///" in url else ""
        if not path:
            raise HealthError(f"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN: no SQLite file in {url!r}")
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10), "?"
    raise HealthError(
        f"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN: the {dialect!r} database is not supported "
        "(PostgreSQL or SQLite)"
    )


def as_utc(value: datetime | str) -> datetime:
    """A heartbeat as the database returns it (aware from PostgreSQL, text from SQLite)."""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def job_alive(
    job_type: str,
    *,
    environ: Mapping[str, str] = os.environ,
    hostname: str | None = None,
    threshold: float | None = None,
    now: datetime | None = None,
) -> tuple[bool, str]:
    """Whether this host's job of ``job_type`` is alive, and why (or why not)."""
    limit = threshold if threshold is not None else threshold_s(job_type, environ)
    host = hostname or socket.getfqdn()
    url = environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "")
    if not url:
        raise HealthError("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN is not set")
    connection, placeholder = connect(url)
    try:
        cursor = connection.cursor()
        cursor.execute(LATEST_HEARTBEAT.format(p=placeholder), (job_type, host))
        row = cursor.fetchone()
    finally:
        connection.close()
    if row is None or row[0] is None:
        return False, f"no running {job_type} on {host}"
    age = ((now or datetime.now(UTC)) - as_utc(row[0])).total_seconds()
    if age >= limit:
        return False, f"{job_type} on {host}: last heartbeat {age:.0f} s ago (limit {limit:.0f} s)"
    return True, f"{job_type} on {host}: last heartbeat {age:.1f} s ago"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    sub = parser.add_subparsers(dest="check", required=True)
    job = sub.add_parser("job", help="this host's Airflow job of a type is running and heartbeats")
    job.add_argument("job_type", choices=sorted(THRESHOLDS))
    job.add_argument("--threshold", type=float, help="seconds (default: Airflow's setting)")
    args = parser.parse_args(argv)
    try:
        alive, reason = job_alive(args.job_type, threshold=args.threshold)
    except HealthError as exc:
        print(f"airflow_health: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the database unreachable: unhealthy, with the reason
        print(f"airflow_health: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(reason)
    return 0 if alive else 1


if __name__ == "__main__":
    sys.exit(main())
