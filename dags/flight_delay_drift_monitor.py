"""Daily drift check of new data, training nothing.

wait_for_data → ingest → validate → monitor → emit_drift_event. The monitor step compares the
window of ``drift.current_days`` days ending at the logical date with the champion's reference
(thresholds calibrated on the reference itself) and scores the champion on the day (MLflow
experiment ``flight_delay_monitoring``). When drift crosses its thresholds outside
``drift.cooldown_hours``, ``emit_drift_event`` records an event of the ``flight_delay_drift``
asset carrying the evidence, and that event schedules ``flight_delay_training``; otherwise it
ends skipped and says why.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, chain

from pipeline_steps.core.settings import load_settings
from pipeline_steps.orchestration import drift_event_task, step_task
from pipeline_steps.orchestration.trigger import SourceDataSensor

settings = load_settings()
orchestration = settings.orchestration

with DAG(
    dag_id="flight_delay_drift_monitor",
    description="Check each new day for drift against the champion; emit the drift asset",
    schedule=orchestration.schedule,
    start_date=pendulum.parse(orchestration.start_date, tz="UTC"),
    catchup=orchestration.catchup,
    max_active_runs=1,  # the cooldown reads the last event: one verdict at a time
    doc_md=__doc__,
    tags=["trainyard", "monitoring"],
):
    chain(
        SourceDataSensor(settings=settings, day="{{ ds }}"),
        *(step_task(step, settings) for step in ("ingest", "validate", "monitor")),
        drift_event_task(settings),
    )
