"""What the pipeline pushes for Prometheus' alerts besides a training's progress: a step failing
for good, the validation refusing days in a row, a drift event, a rollback of the champion
(``containers/prometheus/alerts.yml``; nothing is pushed without
``monitoring.pushgateway_url``). Each is one group per domain (and step), replaced by the next
push, so an alert clears by itself when the thing it is about does."""

from __future__ import annotations

import logging
import time
from datetime import date, timedelta
from typing import TYPE_CHECKING

from pipeline_steps.core.pushgateway import Gauge, Pushgateway
from pipeline_steps.core.settings import Settings

if TYPE_CHECKING:  # the DAG files import this module: no pyarrow at parse time
    from pipeline_steps.core.lake import Lake

log = logging.getLogger(__name__)


def _push(settings: Settings, job: str, grouping: dict[str, str], gauges: dict[str, Gauge]) -> None:
    url = settings.monitoring.pushgateway_url
    if not url:
        return
    labels = {"team": settings.domain.team} if settings.domain.team else {}
    Pushgateway(url).push_quietly(job, {"domain": settings.domain.name, **grouping}, gauges, labels)


def step_outcome(settings: Settings, step: str, failed_permanently: bool) -> None:
    """After a step ends: 1 when it failed for good (bad data, bad settings), 0 when it
    succeeded (a transient failure changes nothing: the retry decides)."""
    gauge = Gauge(float(failed_permanently), "1 when the step's last run failed for good")
    _push(settings, "trainyard_step", {"step": step}, {"trainyard_step_failing_permanently": gauge})


def refused_days_in_a_row(lake: Lake, datasets: list[str], day: date) -> int:
    """Days up to ``day`` in a row on which validation refused a partition of one of
    ``datasets`` (it is in quarantine, not validated)."""
    quarantined = {d: set(lake.partition_dates("quarantine", d)) for d in datasets}
    validated = {d: set(lake.validated_dates(d)) for d in datasets}
    count = 0
    while any(day in quarantined[d] and day not in validated[d] for d in datasets):
        count += 1
        day -= timedelta(days=1)
    return count


def validation_refused(settings: Settings, lake: Lake, datasets: list[str], day: date) -> None:
    """After the validate step refused ``day``: the days in a row it refused, counted from the
    lake only when something is pushed; a failure to count is logged, never the step's."""
    if not settings.monitoring.pushgateway_url:
        return
    try:
        refused = refused_days_in_a_row(lake, datasets, day)
    except Exception as exc:  # the refusal is what the step reports
        log.warning("could not count the days validation refused in a row: %s", exc)
        return
    validation_streak(settings, refused)


def validation_streak(settings: Settings, refused: int) -> None:
    """After the validate step: the days in a row it refused (0 after a day that passed)."""
    gauge = Gauge(float(refused), "days in a row on which validation refused a partition")
    _push(
        settings,
        "trainyard_validation",
        {},
        {"trainyard_validation_refused_days_in_a_row": gauge},
    )


def drift_event(settings: Settings) -> None:
    """A drift event was emitted (a retraining queued)."""
    gauge = Gauge(time.time(), "when the last drift event was emitted (Unix time)")
    _push(settings, "trainyard_drift", {}, {"trainyard_drift_last_event_timestamp_seconds": gauge})


def champion_rollback(settings: Settings) -> None:
    """The champion alias was moved back (by hand or by the release's automatic rollback)."""
    gauge = Gauge(time.time(), "when the champion was last rolled back (Unix time)")
    _push(
        settings,
        "trainyard_release",
        {},
        {"trainyard_champion_last_rollback_timestamp_seconds": gauge},
    )
