"""The champion asset's example consumer: when the champion moves, serve the next day with it.

``<domain>_serving`` is scheduled on the domain's ``<domain>_champion`` asset
(:func:`pipeline_steps.orchestration.release.champion_asset`). ``serving_day`` reads the newest
event's ``extra`` (the version, the day it moved on) and names the day after it; ingest and
validate of that day run as in the other DAGs (cached when they already ran); ``score`` runs
``trainyard predict`` for it, which fills the Feast online store as the day goes on and scores
each row with the champion's features read online, into ``serving/date=D/predictions.parquet``
in the lake. A run triggered by hand serves the day after its logical date.
"""

from __future__ import annotations

import os
import subprocess
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator

from pipeline_steps.core.settings import Settings
from pipeline_steps.core.team_credentials import team_environment

SERVING_DAY_TASK = "serving_day"
SERVING_DAY = "{{ ti.xcom_pull(task_ids='serving_day')['day'] }}"


def next_day(events: Any, logical: Any) -> tuple[str, dict[str, Any]]:
    """The day to serve (the day after the newest champion event's, else after the run's logical
    date) and that event's ``extra``; ``ValueError`` when neither names a day."""
    from pipeline_steps.orchestration.trigger import newest_event

    extra, _ = newest_event(events)
    day = extra.get("logical_date")
    if not isinstance(day, str) and logical is not None:
        day = logical.date().isoformat() if hasattr(logical, "date") else str(logical)
    if not isinstance(day, str):
        raise ValueError(f"neither a champion event nor the run names a day: {extra}")
    return (date.fromisoformat(day[:10]) + timedelta(days=1)).isoformat(), extra


MAX_EMPTY_DAYS = 31
"""Days past the champion's move a sparse domain's serving looks for one with rows."""


def day_with_rows(settings: Settings, first: str) -> tuple[str, list[str]]:
    """The first day from ``first`` whose source has rows, and the empty days passed by (a
    domain with ``domain.empty_days: skip``); ``ValueError`` when none within
    :data:`MAX_EMPTY_DAYS` or the source's coverage."""
    from pipeline_steps.orchestration.trigger import LabelledSource

    labelled = LabelledSource.of(settings)
    day, passed = date.fromisoformat(first), list[str]()
    for _ in range(MAX_EMPTY_DAYS):
        availability = labelled.availability(day)
        if not availability.ready:
            raise ValueError(f"no day with rows to serve from {first}: {availability.message}")
        if labelled.empty_day_message(day) is None:
            return day.isoformat(), passed
        passed.append(day.isoformat())
        day += timedelta(days=1)
    raise ValueError(f"the {MAX_EMPTY_DAYS} days from {first} have no rows to serve")


class ServingDayOperator(BaseOperator):
    """Names the day to serve and the champion event behind it (its XCom); in a domain where
    empty days are ordinary, the first day with rows from the day after the move."""

    ui_color = "#d6eaf8"

    def __init__(self, *, settings: Settings | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings = settings

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowSkipException

        day, extra = next_day(context.get("triggering_asset_events"), context.get("logical_date"))
        if self.settings is not None and self.settings.domain.empty_days == "skip":
            try:
                day, passed = day_with_rows(self.settings, day)
            except ValueError as exc:
                raise AirflowSkipException(str(exc)) from exc
            if passed:
                self.log.info("passed by empty day(s) %s", ", ".join(passed))
        self.log.info("serving %s (champion event: %s)", day, extra or "none, run by hand")
        return {"day": day, "event": extra}


class ScoreDayOperator(BaseOperator):
    """``trainyard predict`` for the serving day, written to the lake; fails naming the cause
    (no champion, the day not validated) as the command prints it."""

    template_fields = ("day",)
    ui_color = "#e8f4ea"

    def __init__(
        self,
        *,
        settings: Settings,
        day: str = SERVING_DAY,
        config: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        self.day = day
        self.config = config

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException

        root = self.settings.lake_root
        output = Path(root) / "serving" / f"date={self.day}" / "predictions.parquet"
        output.parent.mkdir(parents=True, exist_ok=True)
        argv = ["trainyard", "predict", "--logical-date", self.day, "--output", str(output)]
        argv += ["--config", self.config] if self.config else []
        self.log.info("running %s", " ".join(argv))
        team = team_environment(self.settings.domain.team)  # MLflow as the team's user
        done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **team})
        for line in (done.stdout + done.stderr).splitlines():
            self.log.info("%s", line)
        if done.returncode != 0:
            raise AirflowException(
                f"trainyard predict failed for {self.day} (exit {done.returncode})"
            )
        event = (context["ti"].xcom_pull(task_ids=SERVING_DAY_TASK) or {}).get("event") or {}
        return {"day": self.day, "predictions": str(output), "champion_event": event}
