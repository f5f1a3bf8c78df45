"""The drift asset: how a domain's monitor tells Airflow that the data drifted, and who listens.

``<domain>_drift_monitor`` ends with ``emit_drift_event``: when the monitor step's verdict
crossed its thresholds and the last drift event is more than ``drift.cooldown_hours`` away, the task
succeeds and Airflow records an event of the domain's drift asset (:func:`drift_asset`,
``<domain>_drift``) whose ``extra`` is the evidence (:func:`drift_event_extra`). When the release
step found the champion degraded (and rolled it back), the event goes out whatever the verdict and
the cooldown, its ``extra`` saying why under ``rollback``. Otherwise the task ends skipped, which
records no event, and its log says why. ``<domain>_training`` is scheduled by its cron or by its
own domain's drift asset only (:func:`training_schedule`); Airflow queues one asset-triggered run
per batch of events.

Airflow has no cooldown of its own: the task reads the asset's latest event through its inlet
(``inlet_events``) and compares logical times, so a re-run or a backfill of a drifting week emits
once too.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from airflow.sdk import Asset, BaseOperator

from pipeline_steps.core import pipeline_gauges
from pipeline_steps.core.manifests import MonitorManifest, to_json
from pipeline_steps.core.settings import Settings
from pipeline_steps.core.step_registry import MONITOR, RELEASE

MONITOR_TASK = MONITOR.task_id
RELEASE_TASK = RELEASE.task_id


def drift_asset(settings: Settings) -> Asset:
    """The domain's drift asset, ``<domain.name>_drift``: updated when its monitor finds drift
    outside the cooldown (or rolled its champion back); schedules the domain's training only."""
    name = settings.domain.name
    return Asset(name=f"{name}_drift", uri=f"trainyard://drift/{name}")


def training_schedule(settings: Settings) -> Any:
    """The training DAG's schedule: its cron, or its domain's drift event, whichever comes
    first."""
    from airflow.timetables.assets import AssetOrTimeSchedule
    from airflow.timetables.trigger import CronTriggerTimetable

    cron = CronTriggerTimetable(settings.orchestration.schedule, timezone="UTC")
    # Airflow's annotation names its serialized asset; DAG files pass the SDK's (converted on
    # serialization), as Airflow's own examples do.
    return AssetOrTimeSchedule(timetable=cron, assets=drift_asset(settings))  # type: ignore[arg-type]


def drift_event_extra(verdict: MonitorManifest, monitor_run_id: str) -> dict[str, Any]:
    """The evidence a drift event carries (JSON): the data day the training run trains for, what
    crossed (each with its statistic, value, threshold and p-value; the trigger signals first,
    then single input features over their own thresholds), the report and the monitor run."""
    crossed = [s for s in verdict.signals if s.name in verdict.crossed]
    crossed.sort(key=lambda s: verdict.crossed.index(s.name))
    features = [s for s in verdict.signals if s.crossed and s.kind == "input" and s not in crossed]
    return {
        "logical_date": verdict.logical_date,
        "features": [
            {
                "name": s.name,
                "kind": s.kind,
                "statistic": s.statistic,
                "value": s.value,
                "threshold": s.threshold,
                "p_value": s.p_value,
                "trigger": s in crossed,
                **({"importance": s.importance} if s.importance is not None else {}),
                **({"reference": s.reference, "current": s.current} if s.kind == "label" else {}),
            }
            for s in [*crossed, *features]
        ],
        "report": verdict.report,
        "monitor_run_id": monitor_run_id,
        "current_days": [verdict.current_days[0], verdict.current_days[-1]],
        "reference_days": [verdict.reference_days[0], verdict.reference_days[-1]],
        "reference": verdict.reference,
        "champion_version": verdict.champion.version if verdict.champion else None,
        "champion_day": to_json(verdict.champion.metrics) if verdict.champion else None,
    }


def event_logical_time(extra: dict[str, Any] | None, timestamp: datetime | None) -> datetime | None:
    """The logical time of a drift event: its data day (``extra.logical_date``), else the time it
    was recorded (an event posted by hand through the API carries no data day)."""
    day = (extra or {}).get("logical_date")
    if isinstance(day, str):
        try:
            return datetime.combine(date.fromisoformat(day[:10]), datetime.min.time(), UTC)
        except ValueError:
            pass
    return timestamp


def rollback_reason(release: dict[str, Any] | None) -> str | None:
    """Why the release step asked for retraining (its champion degraded: rolled back, or with
    nothing to go back to), from its XCom; None otherwise or when it did not run."""
    from pipeline_steps.core.manifests import ReleaseManifest, load_manifest

    if release is None:
        return None
    manifest = load_manifest(ReleaseManifest, release, f"XCom of task {RELEASE_TASK!r}")
    if manifest.rollback is None or not manifest.rollback.due:
        return None
    return manifest.reasons[0]


class DriftEventOperator(BaseOperator):
    """Emits an event of the domain's drift ``asset`` with the monitor's evidence, or ends
    skipped saying why."""

    ui_color = "#fdebd0"

    def __init__(
        self,
        *,
        asset: Asset,
        cooldown_hours: float,
        settings: Settings | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(inlets=[asset], outlets=[asset], **kwargs)
        self.asset = asset
        self.cooldown_hours = cooldown_hours
        self.settings = settings  # the domain whose event's gauge is pushed (None: none)

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowSkipException

        from pipeline_steps.core.manifests import load_manifest
        from pipeline_steps.quality.calibration import cooldown_reason

        payload = context["ti"].xcom_pull(task_ids=MONITOR_TASK)
        if payload is None:  # runs after a failed release too, but never without a verdict
            raise AirflowSkipException("the monitor step recorded no verdict; no event")
        verdict = load_manifest(MonitorManifest, payload, f"XCom of task {MONITOR_TASK!r}")
        retrain = rollback_reason(context["ti"].xcom_pull(task_ids=RELEASE_TASK))
        if retrain is not None:  # a degraded champion: retrain now, whatever the cooldown
            extra = {**drift_event_extra(verdict, context["run_id"]), "rollback": retrain}
            context["outlet_events"][self.asset].extra = extra
            self.log.warning("retraining asked for %s: %s", verdict.logical_date, retrain)
            self._pushed()
            return extra
        if not verdict.drift_detected:
            raise AirflowSkipException(
                f"no drift on the window ending {verdict.logical_date}; no event emitted"
            )
        latest = list(context["inlet_events"][self.asset].ascending(False).limit(1))
        last = event_logical_time(latest[0].extra, latest[0].timestamp) if latest else None
        now = event_logical_time({"logical_date": verdict.logical_date}, None)
        assert now is not None
        reason = cooldown_reason(now, last, self.cooldown_hours)
        if reason is not None:
            self.log.warning(
                "drift on the window ending %s (%s) but no event: %s",
                verdict.logical_date,
                ", ".join(verdict.crossed),
                reason,
            )
            raise AirflowSkipException(reason)
        extra = drift_event_extra(verdict, context["run_id"])
        context["outlet_events"][self.asset].extra = extra
        self.log.info("drift event for %s: %s", verdict.logical_date, ", ".join(verdict.crossed))
        self._pushed()
        return extra

    def _pushed(self) -> None:
        if self.settings is not None:
            pipeline_gauges.drift_event(self.settings)


def drift_event_task(settings: Settings) -> BaseOperator:
    """The monitor DAG's last task: emit the drift event (see :class:`DriftEventOperator`)."""
    return DriftEventOperator(
        task_id="emit_drift_event",
        asset=drift_asset(settings),
        cooldown_hours=settings.drift.cooldown_hours,
        settings=settings,
        retries=settings.orchestration.retries,
        trigger_rule="all_done",  # a failed release step does not hold back a drift event
    )
