"""How a training run starts: its first task says why it runs and for which day, the second
waits for that day's data.

``trigger``  reads Airflow's run type, the trigger form's values, the triggering user and, for a
             run scheduled by the drift asset, the events' evidence; checks the form's values
             together (the settings loader); returns ``{"logical_date", "trigger"}``. Every step
             receives both through its argv. A drift-started run has no logical date of its own
             in Airflow: it trains for the drifting day the newest event names.
``wait_for_data``  a reschedule-mode sensor that waits until the source has rows of the day and
             ends the run skipped (not failed) when they never come or the day lies outside the
             source's coverage; a day without rows is skipped at once where that is ordinary
             (``domain.empty_days: skip``), and goes on to fail at ingest where it is not and the
             source already holds later days (a broken feed).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from os import PathLike
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, BaseSensorOperator

from pipeline_steps.core.deployment import under_deployment
from pipeline_steps.core.manifests import to_json
from pipeline_steps.core.settings import Settings, SettingsError
from pipeline_steps.core.trigger import SettingOverride, Trigger, TriggerKind
from pipeline_steps.orchestration.job_resources import (
    ResourcesRefused,
    check_resources,
    with_changes,
)
from pipeline_steps.orchestration.params import FORM, overrides_of, set_arguments

if TYPE_CHECKING:  # the domain types import pyarrow; parsing a DAG file must not
    from pipeline_steps.core.domain import Source

TRIGGER_TASK = "trigger"
_TRIGGER = f"ti.xcom_pull(task_ids='{TRIGGER_TASK}')"
RUN_LOGICAL_DATE = f"{{{{ {_TRIGGER}['logical_date'] }}}}"
RUN_TRIGGER = f"{{{{ {_TRIGGER}['trigger'] | tojson }}}}"

KINDS: dict[str, TriggerKind] = {
    "scheduled": "scheduled",
    "manual": "manual",
    "backfill": "backfill",
    "asset_triggered": "drift",
}


def training_run_args(config: str | PathLike[str] | None = None) -> list[str]:
    """The argv after ``trainyard step <name>`` in a training run: the run, the day the trigger
    task resolved, the trigger, and the form's values as ``--set``; with ``config``, the settings
    file every step loads (a DAG built from its own file rather than ``TRAINYARD_CONFIG``)."""
    return [
        "--run-id",
        "{{ run_id }}",
        "--logical-date",
        RUN_LOGICAL_DATE,
        "--trigger",
        RUN_TRIGGER,
        *set_arguments(),
        *(["--config", str(config)] if config else []),
    ]


class RunRefused(ValueError):
    """The run cannot start as triggered; the message says which value or field is wrong."""


def describe_run(
    context: Any, settings: Settings, config: str | PathLike[str] | None = None
) -> dict[str, Any]:
    """``{"logical_date": ISO day, "trigger": Trigger JSON}`` of the run in ``context``; the
    form is checked over the settings file ``config`` (default: ``TRAINYARD_CONFIG``).

    Raises ``RunRefused`` when the form's values do not go together, a drift event names no
    day, or a run has no logical date at all."""
    dag_run = context["dag_run"]
    run_type = str(getattr(dag_run.run_type, "value", dag_run.run_type))
    kind = KINDS.get(run_type, "manual")
    unknown = sorted(set(getattr(dag_run, "conf", None) or {}) - set(FORM))
    if unknown:
        raise RunRefused(
            f"unknown parameter(s) {', '.join(map(repr, unknown))} in the run's conf; "
            f"known: {', '.join(FORM)}"
        )
    params = dict(context.get("params") or {})
    changed = overrides_of(params, settings)
    run = check_form(changed, config)
    try:  # what the job holds: within what the domain runs and the team's quota
        check_resources(settings, under_deployment(run, settings))
    except ResourcesRefused as exc:
        raise RunRefused(f"the trigger form's values are refused: {exc}") from exc
    evidence: dict[str, Any] = {}
    if kind == "drift":
        evidence, day = drift_evidence(context.get("triggering_asset_events") or {})
    else:
        logical = context.get("logical_date") or getattr(dag_run, "logical_date", None)
        if logical is None:
            raise RunRefused(
                "this run has no logical date; trigger it with one (the day to train for, "
                "e.g. 2013-06-03): its rows are the holdout, the days before it the window"
            )
        day = logical.date().isoformat() if hasattr(logical, "date") else str(logical)[:10]
    trigger = Trigger(
        kind=kind,
        run_type=run_type,
        user=getattr(dag_run, "triggering_user_name", None) or None,
        evidence=evidence,
        overrides=[SettingOverride(setting=s, value=v, default=d) for s, v, d in changed],
    )
    return {"logical_date": day, "trigger": to_json(trigger)}


def check_form(
    changed: list[tuple[str, Any, Any]], config: str | PathLike[str] | None = None
) -> Settings:
    """The settings (of the file ``config``, if given) with the form's changes, loaded so rules
    across fields are enforced before any step runs; the error names the form field and its
    setting."""
    try:
        return with_changes(config, changed)
    except SettingsError as exc:
        message = str(exc)
        for name, field in FORM.items():
            message = message.replace(field.setting, f"{name} ({field.setting})")
        raise RunRefused(f"the trigger form's values are refused: {message}") from exc


def newest_event(events: Any) -> tuple[dict[str, Any], int]:
    """The ``extra`` of the newest of a run's triggering asset events and how many there were
    (``{}`` and 0 without any)."""
    received = [event for queue in (events or {}).values() for event in queue]
    if not received:
        return {}, 0
    newest = max(received, key=lambda e: str(getattr(e, "timestamp", "")))
    return dict(getattr(newest, "extra", None) or {}), len(received)


def drift_evidence(events: Any) -> tuple[dict[str, Any], str]:
    """The newest drift event's ``extra`` (with the number of events) and the day it names."""
    extra, received = newest_event(events)
    if not received:
        raise RunRefused("a drift-triggered run without triggering asset events")
    day = extra.get("logical_date")
    if not isinstance(day, str):
        raise RunRefused(f"the drift event's extra has no logical_date: {extra}")
    return {**extra, "events": received}, day[:10]


class TriggerOperator(BaseOperator):
    """The run's first task: its XCom is ``describe_run``'s value; a refused run fails at once
    (``AirflowFailException``: no retry), while a try lost to the worker (killed, timed out) is
    retried as the steps are. ``config``: the settings file the DAG and its steps load, if not
    the default."""

    ui_color = "#fdf2d0"

    def __init__(
        self, *, settings: Settings, config: str | PathLike[str] | None = None, **kwargs: Any
    ) -> None:
        orch = settings.orchestration
        kwargs.setdefault("retries", orch.retries)
        kwargs.setdefault("retry_delay", timedelta(seconds=orch.retry_delay_s))
        super().__init__(task_id=TRIGGER_TASK, **kwargs)
        self.settings = settings
        self.config = str(config) if config else None

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        try:
            described = describe_run(context, self.settings, self.config)
        except RunRefused as exc:
            raise AirflowFailException(str(exc)) from exc
        trigger = described["trigger"]
        self.log.info(
            "run for %s, trigger %s; settings changed: %s",
            described["logical_date"],
            trigger["kind"],
            trigger["overrides"] or "none",
        )
        return described


class SourceDataSensor(BaseSensorOperator):
    """Waits (reschedule mode) until the source has the run's day for the labelled dataset.
    ``day`` is a template: the trigger task's day by default, ``{{ ds }}`` in a DAG without one."""

    ui_color = "#e0ecf8"
    template_fields = ("day",)

    def __init__(self, *, settings: Settings, day: str = RUN_LOGICAL_DATE, **kwargs: Any) -> None:
        orch = settings.orchestration
        super().__init__(
            task_id="wait_for_data",
            mode="reschedule",
            poke_interval=orch.data_poke_s,
            timeout=orch.data_wait_s,
            retries=0,
            **kwargs,
        )
        self.settings = settings
        self.day = day

    def poke(self, context: Any) -> bool:
        from airflow.sdk.exceptions import AirflowSkipException

        day = date.fromisoformat(self.day[:10])
        if (context.get("params") or {}).get("pin_raw_version"):
            self.log.info("raw version pinned: the day's data is in the lake already")
            return True
        labelled = LabelledSource.of(self.settings)
        availability = labelled.availability(day)
        self.log.info("%s", availability.message)
        if availability.final:
            raise AirflowSkipException(availability.message)
        if not availability.ready:
            return False
        empty = labelled.empty_day_message(day)
        if empty is None:
            return True
        if not labelled.moved_on(day):
            self.log.info("no row for %s yet (the files hold no later day): waiting", day)
            return False
        if self.settings.domain.empty_days == "skip":
            raise AirflowSkipException(
                f"{empty}: an ordinary empty day of this domain (domain.empty_days: skip), the "
                "run ends skipped"
            )
        self.log.warning("%s; the source holds later days: ingest fails the run", empty)
        return True  # a broken feed (domain.empty_days: fail): the run fails at ingest

    def execute(self, context: Any) -> Any:
        from airflow.sdk.exceptions import AirflowSensorTimeout, AirflowSkipException

        try:
            return super().execute(context)
        except AirflowSensorTimeout as exc:
            day = date.fromisoformat(self.day[:10])
            waited = timedelta(seconds=self.settings.orchestration.data_wait_s)
            raise AirflowSkipException(
                f"{source_availability(self.settings, day).message}; waited {waited} "
                "(orchestration.data_wait_s), ending the run skipped"
            ) from exc


@dataclass(frozen=True)
class LabelledSource:
    """The domain's labelled dataset and the source ingest reads it from, opened once for the
    questions a sensor or a serving search asks of a day."""

    dataset: str
    source: Source

    @classmethod
    def of(cls, settings: Settings) -> LabelledSource:
        from pipeline_steps.core.domain import load_domain
        from pipeline_steps.domain.sources import open_source

        domain = load_domain(settings.domain.module)
        return cls(domain.labelled_dataset, open_source(settings.ingest, domain))

    def availability(self, day: date) -> Any:
        """Whether the source has the labelled dataset's rows for ``day``."""
        return self.source.availability(self.dataset, day)

    def empty_day_message(self, day: date) -> str | None:
        """What is missing when the source has ``day`` but no row of the labelled dataset on
        it, or None when it has rows. Reads the day's rows until the first one."""
        if any(batch.num_rows for batch in self.source.batches(self.dataset, day)):
            return None
        return f"{day} has no row of {self.dataset} in source {self.source.name}"

    def moved_on(self, day: date) -> bool:
        """Whether a day without rows is missing, not late: a file source's files hold rows of
        later days; any other source that has the day (its availability) has moved on."""
        from pipeline_steps.domain.sources import FileSource

        return not isinstance(self.source, FileSource) or self.source.later_rows(self.dataset, day)


def empty_day_message(settings: Settings, day: date) -> str | None:
    """:meth:`LabelledSource.empty_day_message` of the domain's source."""
    return LabelledSource.of(settings).empty_day_message(day)


def source_availability(settings: Settings, day: date) -> Any:
    """Whether the configured source has the labelled dataset's rows for ``day``."""
    return LabelledSource.of(settings).availability(day)
