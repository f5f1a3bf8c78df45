"""Daily drift check of new data, training nothing, and the release path of the champion.

wait_for_data → ingest → validate → monitor → release → emit_drift_event, and release →
approve_release → emit_champion_event. The monitor step compares the window of
``drift.current_days`` days ending at the logical date with the champion's reference (thresholds
calibrated on the reference itself) and scores the champion, and the staged candidate beside it,
on the day (MLflow experiment ``flight_delay_monitoring``). The release step rolls back a champion
that stayed worse than the version it replaced, or releases, retires or keeps waiting the staged
candidate on its pooled shadow days; ``approve_release`` asks a person when ``release.approval``
says so. When drift crosses its thresholds outside ``drift.cooldown_hours``, or the champion was
rolled back, ``emit_drift_event`` records an event of the ``flight_delay_drift`` asset carrying
the evidence, and that event schedules ``flight_delay_training``; ``emit_champion_event`` records
an event of ``flight_delay_champion`` when the champion moved.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, chain

from pipeline_steps.core.settings import load_settings
from pipeline_steps.orchestration import drift_event_task, step_task
from pipeline_steps.orchestration.release import (
    approval_task,
    champion_event_task,
    monitor_run_args,
)
from pipeline_steps.orchestration.trigger import SourceDataSensor

settings = load_settings()
orchestration = settings.orchestration

with DAG(
    dag_id="flight_delay_drift_monitor",
    description="Check each new day for drift, release or roll back the champion",
    schedule=orchestration.schedule,
    start_date=pendulum.parse(orchestration.start_date, tz="UTC"),
    catchup=orchestration.catchup,
    max_active_runs=1,  # the cooldown reads the last event: one verdict at a time
    doc_md=__doc__,
    tags=["trainyard", "monitoring"],
):
    release = step_task("release", settings, monitor_run_args())
    chain(
        SourceDataSensor(settings=settings, day="{{ ds }}"),
        *(step_task(step, settings) for step in ("ingest", "validate", "monitor")),
        release,
        drift_event_task(settings),
    )
    chain(
        release,
        approval_task(settings),
        champion_event_task(settings, "release", "approve_release"),
    )
