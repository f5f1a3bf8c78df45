"""Make a run of ``airflow dags test`` read true in the Airflow UI.

``dags test`` records its run as a manual run whose start is the logical date, so a run for
2013-06-01 shows a duration of years. This sets the run's start to when its first task started
and leaves a note on the run saying how it was made. Usage: demo_run_note.py DAG_ID DATE
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime


def main(dag_id: str, day: str) -> None:
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    logical = datetime.fromisoformat(day).replace(tzinfo=UTC)
    with create_session() as session:
        run = session.scalars(
            select(DagRun)
            .where(DagRun.dag_id == dag_id, DagRun.logical_date == logical)
            .order_by(DagRun.id.desc())
        ).first()
        if run is None:
            raise SystemExit(f"no run of {dag_id} for {day} in the metadata database")
        first_task = session.scalar(
            select(func.min(TaskInstance.start_date)).where(
                TaskInstance.dag_id == dag_id, TaskInstance.run_id == run.run_id
            )
        )
        if first_task is not None:
            run.start_date = first_task
        run.note = (
            "Run by `make demo` with `airflow dags test` (tasks in one process, no scheduler). "
            "Its start is set to its first task's; trigger runs from this UI to use the scheduler."
        )


if __name__ == "__main__":
    main(*sys.argv[1:3])
