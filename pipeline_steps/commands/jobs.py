"""Jobs: a domain's training run submitted with its data window, model, hyperparameters,
processes and priority within its team's quota; each team's queue; cancelling a job.

A job is a run of ``<domain>_training`` triggered over Airflow's REST API with the trigger
form's values as its conf (the form checks them again when the run starts). What it holds
(processes, nodes, GPUs, memory) comes from the form's processes and the domain's settings;
``submit`` refuses a job its team's quota (``orchestration.quotas``, the deployment's) can
never hold, or one beyond the team's queue, naming the limit. Admitted jobs wait in Airflow's
own queue: a CPU job's train task for a slot of ``train-<team>`` (``runs`` slots, which the
team's tuning trials take too, at a lower priority), a GPU job's
for the team's GPU pool, the highest priority first (:mod:`pipeline_steps.orchestration.policy`),
then the earlier day, then the earlier submission.

``jobs`` reads the queue back: each team's running and waiting jobs, a waiting job's position,
how long it has waited, and when it should start and end, from the running jobs' time left (the
training's own live estimate on the Pushgateway while it trains, else the domain's median run)
and the team's slots.
"""

from __future__ import annotations

import json
import os
import statistics
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from pipeline_steps.core.deployment import DomainFile, domain_settings_files, team_quota
from pipeline_steps.core.settings import Settings
from pipeline_steps.core.step_registry import TRAIN
from pipeline_steps.orchestration.job_resources import (
    Resources,
    ResourcesRefused,
    check_resources,
    with_form,
)
from pipeline_steps.orchestration.params import FORM, PRIORITY, schema
from pipeline_steps.orchestration.pools import TRIAL_TASK, train_pool
from pipeline_steps.services.airflow_api import AirflowApi, AirflowApiError

RECENT_RUNS = 10
"""Successful runs of a DAG whose median duration estimates a job of it."""
CANCEL_NOTE = "cancelled with trainyard cancel"
JOB_PREFIX = "job__"
"""How the run id of a submitted job starts."""
SUBMITTED = "job"
WAITING = ("waiting", "paused")
"""The states of a job that has not started its training."""
KINDS = {"scheduled": "cron", "asset_triggered": "drift", "backfill": "backfill"}
"""What a training run that was not submitted is, by Airflow's run type (else ``manual``)."""


class JobRefused(ValueError):
    """The job cannot be submitted, cancelled or listed as asked; the message says why."""


def job_resources(domain: DomainFile, conf: Mapping[str, Any]) -> Resources:
    """A job's resources: the domain's settings with the job's form values (processes, and on
    Kubernetes nodes, GPUs per node and memory per node); ``JobRefused`` naming the field when
    the domain cannot run them or the team's quota could never hold them."""
    try:
        run = with_form(domain.settings, conf, domain.config)
        return check_resources(domain.settings, run)
    except (ResourcesRefused, ValueError) as exc:
        raise JobRefused(str(exc)) from exc


def find_domain(name: str, environ: Mapping[str, str] | None = None) -> DomainFile:
    """The deployment's domain called ``name``; ``JobRefused`` naming the known ones."""
    domains = domain_settings_files(environ, refused=[])
    for domain in domains:
        if domain.name == name:
            return domain
    known = ", ".join(d.name for d in domains) or "none"
    raise JobRefused(f"no domain {name!r} on this deployment (trainyard domains); known: {known}")


def form_value(name: str, text: str, domain: DomainFile) -> Any:
    """The training form's field ``name`` read from the command line's ``text`` and checked
    against the field's schema; ``JobRefused`` naming the field."""
    import jsonschema

    field = FORM.get(name)
    if field is None:
        raise JobRefused(f"{name!r} is no field of the training form; known: {', '.join(FORM)}")
    kinds = field.schema.get("type")
    kind = kinds[0] if isinstance(kinds, list) else kinds
    try:
        value: Any = _parsed(text, kind)
        jsonschema.validate(value, schema(field, domain.settings))
    except (ValueError, jsonschema.ValidationError) as exc:
        reason = exc.message if isinstance(exc, jsonschema.ValidationError) else str(exc)
        raise JobRefused(f"{name} ({field.setting}) = {text!r} is refused: {reason}") from exc
    return value


def _parsed(text: str, kind: Any) -> Any:
    if kind == "integer":
        return int(text)
    if kind == "number":
        return float(text)
    if kind == "boolean":
        if text.lower() not in ("true", "false"):
            raise ValueError("expects true or false")
        return text.lower() == "true"
    return text


def job_conf(domain: DomainFile, values: Mapping[str, str]) -> dict[str, Any]:
    """The run conf of a job of ``domain`` from the form's fields given as text, checked field
    by field and then together with the domain's settings (as the run's first task does)."""
    from pipeline_steps.orchestration.trigger import RunRefused, check_form, overrides_of

    conf = {name: form_value(name, text, domain) for name, text in values.items()}
    try:
        check_form(overrides_of(conf, domain.settings), domain.config)
    except RunRefused as exc:
        raise JobRefused(str(exc)) from exc
    return conf


def check_queue(domain: DomainFile, waiting: int) -> None:
    """``JobRefused`` naming the limit when the team's queue is full (``waiting`` jobs of the
    team wait already); nothing without a quota."""
    settings = domain.settings
    quota = team_quota(settings)
    if quota is None:
        return
    team = settings.domain.team
    if waiting >= quota.queued:
        raise JobRefused(
            f"team {team} has {waiting} job(s) waiting, its quota "
            f"orchestration.quotas.{team}.queued is {quota.queued}: submit again when one has "
            "started, or cancel one (trainyard cancel)"
        )


def submit(
    api: AirflowApi,
    domain: DomainFile,
    day: str,
    values: Mapping[str, str],
    now: datetime | None = None,
    unpause: bool = False,
) -> dict[str, Any]:
    """Submit a job of ``domain`` training for ``day`` with the form's ``values``; the
    triggered run as the API returns it, with the job's resources, its place in the queue and
    whether its DAG is paused (a paused DAG's runs wait until it is unpaused, as Airflow's
    trigger form leaves them; ``unpause``: unpause it, as the form's checkbox does)."""
    try:
        date.fromisoformat(day)
    except ValueError as exc:
        raise JobRefused(f"--day {day!r} is no ISO date (e.g. 2013-06-03)") from exc
    conf = job_conf(domain, values)
    resources = job_resources(domain, conf)
    team = domain.settings.domain.team
    queue = team_jobs(api, [domain, *_team_mates(domain)], now)
    # the queue shows every run waiting for the team's slots; its limit counts the jobs
    waiting = sum(1 for job in queue if job.state in WAITING and job.kind == SUBMITTED)
    check_queue(domain, waiting)
    now = now or datetime.now(UTC)
    # one run per logical date of a DAG: the day, at the time of day it was submitted
    logical = f"{day}T{now.strftime('%H:%M:%S.%f')}Z"
    run_id = f"{JOB_PREFIX}{team or domain.name}__{day}__{now.strftime('%Y%m%dT%H%M%S%f')}"
    body = {"logical_date": logical, "dag_run_id": run_id, "conf": conf}
    dag_id = f"{domain.name}_training"
    try:
        run = dict(api.post(f"/api/v2/dags/{dag_id}/dagRuns", body))
        paused = bool(paused_dags(api, [dag_id]))
        if paused and unpause:
            api.unpause(dag_id)
    except AirflowApiError as exc:
        raise JobRefused(f"Airflow refused the job: {exc}") from exc
    ahead = sum(1 for job in queue if job.state in WAITING)
    return run | {
        "resources": resources.words(),
        "waiting": ahead,
        "paused": paused and not unpause,
    }


def paused_dags(api: AirflowApi, dag_ids: Iterable[str]) -> set[str]:
    """Those of ``dag_ids`` that are paused: their runs wait, whatever the quota."""
    return {dag for dag in dag_ids if api.get(f"/api/v2/dags/{dag}").get("is_paused")}


def _team_mates(domain: DomainFile) -> list[DomainFile]:
    """The other domains of the deployment of the same team."""
    team = domain.settings.domain.team
    if not team:
        return []
    return [
        d
        for d in domain_settings_files(refused=[])
        if d.settings.domain.team == team and d.name != domain.name
    ]


@dataclass(frozen=True)
class Job:
    """One job of the queue."""

    team: str
    domain: str
    dag_id: str
    run_id: str
    day: str
    state: str
    """``running`` (its training started), ``waiting``, or ``paused`` (waiting on a paused DAG:
    it has no place in the queue until the DAG is unpaused)."""
    kind: str
    """``job`` (submitted), ``manual`` (the trigger form), ``cron``, ``drift`` or
    ``backfill``: every training run takes the team's slots."""
    priority: int
    queued_at: datetime
    started_at: datetime | None
    """When its training started (None while waiting)."""
    admitted: bool = True
    """Whether Airflow started its run (its tasks wait at the pools, where the priorities
    decide); False for a run Airflow still holds back (the DAG's ``max_active_runs`` reached):
    such runs start oldest day first, whatever their priority."""
    position: int = 0
    """Place among the team's waiting jobs, 1 first; 0 for a running one."""
    starts_in_s: float | None = None
    ends_in_s: float | None = None


def team_jobs(
    api: AirflowApi, domains: Sequence[DomainFile], now: datetime | None = None
) -> list[Job]:
    """The running and waiting jobs of ``domains``' training DAGs, each team's waiting ones
    in the order Airflow starts them, with their position and estimated start and end."""
    now = now or datetime.now(UTC)
    by_dag = {f"{d.name}_training": d for d in domains}
    if not by_dag:
        return []
    runs = _list(
        api,
        "/api/v2/dags/~/dagRuns/list",
        {"dag_ids": sorted(by_dag), "states": ["queued", "running"]},
        "dag_runs",
    )
    trains = _list(
        api,
        "/api/v2/dags/~/dagRuns/~/taskInstances/list",
        {"dag_ids": sorted(by_dag), "task_ids": [TRAIN.task_id]},
        "task_instances",
    )
    started = {
        (t["dag_id"], t["dag_run_id"]): _time(t["start_date"])
        for t in trains
        if t.get("start_date") and t.get("state") not in (None, "scheduled", "queued")
    }
    paused = paused_dags(api, {run["dag_id"] for run in runs})
    jobs = []
    for run in runs:
        domain = by_dag[run["dag_id"]]
        key = (run["dag_id"], run["dag_run_id"])
        waits = "paused" if run["dag_id"] in paused else "waiting"
        jobs.append(
            Job(
                team=domain.settings.domain.team,
                domain=domain.name,
                dag_id=run["dag_id"],
                run_id=run["dag_run_id"],
                day=str(run.get("logical_date") or "")[:10],
                state="running" if key in started else waits,
                kind=_kind(run),
                priority=_priority(run, domain.settings),
                queued_at=_time(str(run.get("queued_at") or run.get("run_after"))),
                started_at=started.get(key),
                admitted=run.get("state") != "queued",
            )
        )
    typical = {dag: _typical_s(api, dag) for dag in {j.dag_id for j in jobs}}
    return _in_queue(jobs, domains, typical, now, _live_etas(domains), _trial_slots(api, domains))


def _trial_slots(api: AirflowApi, domains: Sequence[DomainFile]) -> dict[str, int]:
    """The slots of each team's training pool its tuning trials hold (running or queued):
    a trial takes one as a job's training does, and its end is not estimated."""
    pools = {
        f"{d.name}_tuning": (d.settings.domain.team or d.name, train_pool(d.settings))
        for d in domains
    }
    pools = {dag: held for dag, held in pools.items() if held[1]}
    if not pools:
        return {}
    trials = _list(
        api,
        "/api/v2/dags/~/dagRuns/~/taskInstances/list",
        {"dag_ids": sorted(pools), "task_ids": [TRIAL_TASK], "state": ["queued", "running"]},
        "task_instances",
    )
    held: dict[str, int] = {}
    for trial in trials:
        team, pool = pools.get(trial.get("dag_id", ""), ("", ""))
        if trial.get("task_id") == TRIAL_TASK and pool and trial.get("pool") == pool:
            held[team] = held.get(team, 0) + 1
    return held


def _kind(run: Mapping[str, Any]) -> str:
    if str(run["dag_run_id"]).startswith(JOB_PREFIX):
        return SUBMITTED
    return KINDS.get(str(run.get("run_type")), "manual")


def _priority(run: Mapping[str, Any], settings: Settings) -> int:
    value = (run.get("conf") or {}).get(PRIORITY)
    return value if isinstance(value, int) else settings.orchestration.train_priority


def _in_queue(
    jobs: list[Job],
    domains: Sequence[DomainFile],
    typical: Mapping[str, float | None],
    now: datetime,
    live: Mapping[str, float],
    trial_slots: Mapping[str, int] | None = None,
) -> list[Job]:
    """``jobs`` with each waiting one's position in its team's queue and the running and
    waiting ones' estimated times: the team's ``runs`` slots each free when its job ends, the
    next waiting job taking the first freed; a slot a tuning trial holds (``trial_slots``)
    frees at a time not estimated."""
    trial_slots = trial_slots or {}
    slots_of = {}
    for d in domains:
        quota = team_quota(d.settings)
        slots_of[d.settings.domain.team or d.name] = (
            quota.runs if quota and train_pool(d.settings) else None
        )
    placed: list[Job] = []
    teams = dict.fromkeys(j.team or j.domain for j in jobs)
    for team in teams:
        mine = [j for j in jobs if (j.team or j.domain) == team]
        running = [j for j in mine if j.state == "running"]
        waiting = sorted(
            (j for j in mine if j.state == "waiting"),
            # started runs by priority; the runs Airflow holds back after them, oldest day first
            key=lambda j: (not j.admitted, -j.priority if j.admitted else 0, j.day, j.queued_at),
        )
        free_at: list[float | None] = []
        for job in running:
            left = _left_s(job, typical.get(job.dag_id), now, live)
            free_at.append(left)
            placed.append(_replace(job, ends_in_s=left))
        slots = slots_of.get(team)
        if slots is not None:
            held = trial_slots.get(team, 0)
            free_at += [None] * held
            free_at += [0.0] * max(0, slots - len(running) - held)
        for position, job in enumerate(waiting, start=1):
            start = _take_slot(free_at, slots)
            run_s = typical.get(job.dag_id)
            end = None if start is None or run_s is None else start + run_s
            if start is not None:
                free_at.append(end)
            placed.append(_replace(job, position=position, starts_in_s=start, ends_in_s=end))
        placed += [j for j in mine if j.state == "paused"]
    return placed


def _take_slot(free_at: list[float | None], slots: int | None) -> float | None:
    """When the first slot frees (taking it): at once when one is free, else None when a
    slot's end cannot be known."""
    if slots is None or not free_at:
        return None
    known = [t for t in free_at if t is not None]
    if not known or (min(known) > 0 and len(known) < len(free_at)):
        return None
    first = min(known)
    free_at.remove(first)
    return first


def _left_s(
    job: Job, typical_s: float | None, now: datetime, live: Mapping[str, float]
) -> float | None:
    if job.run_id in live:
        return live[job.run_id]
    if typical_s is None:
        return None
    elapsed = (now - (job.started_at or job.queued_at)).total_seconds()
    return max(0.0, typical_s - elapsed)


def _replace(job: Job, **changes: Any) -> Job:
    import dataclasses

    return dataclasses.replace(job, **changes)


def _typical_s(api: AirflowApi, dag_id: str) -> float | None:
    """The median seconds of the DAG's recent successful runs, from their training's start
    (None before the first)."""
    runs = api.get(
        f"/api/v2/dags/{dag_id}/dagRuns?state=success&order_by=-end_date&limit={RECENT_RUNS}"
    ).get("dag_runs", [])
    seconds = [
        (_time(r["end_date"]) - _time(r["start_date"])).total_seconds()
        for r in runs
        if r.get("start_date") and r.get("end_date")
    ]
    return statistics.median(seconds) if seconds else None


def _live_etas(domains: Sequence[DomainFile]) -> dict[str, float]:
    """``{run id: seconds left}`` of the trainings running now, from each domain's
    Pushgateway (``monitoring.pushgateway_url``); none where it is not set or not answering."""
    urls = {d.settings.monitoring.pushgateway_url for d in domains} - {""}
    etas: dict[str, float] = {}
    for url in urls:
        try:
            with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/metrics", timeout=5) as answer:
                groups = json.load(answer).get("data", [])
        except (OSError, ValueError):
            continue
        for group in groups:
            labels = group.get("labels", {})
            eta = group.get("trainyard_train_eta_seconds", {}).get("metrics", [])
            running = group.get("trainyard_train_running", {}).get("metrics", [])
            if eta and running and float(running[0]["value"]) == 1.0 and "run_id" in labels:
                etas[labels["run_id"]] = float(eta[0]["value"])
    return etas


def _list(api: AirflowApi, path: str, body: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """Every item of a batch list endpoint, page by page."""
    items: list[dict[str, Any]] = []
    while True:
        page = api.post(path, body | {"page_offset": len(items), "page_limit": 100})
        items += page.get(key, [])
        if len(items) >= int(page.get("total_entries", 0)) or not page.get(key):
            return items


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def cancel(api: AirflowApi, domains: Sequence[DomainFile], run_id: str) -> str:
    """Cancel the job ``run_id`` (a run of one of ``domains``' training DAGs): Airflow marks the
    run failed and stops its running task; what was done, in words."""
    for domain in domains:
        dag_id = f"{domain.name}_training"
        try:
            run = api.run(dag_id, run_id)
        except AirflowApiError as exc:
            if exc.status == 404:
                continue
            raise
        if run["state"] not in ("queued", "running"):
            raise JobRefused(
                f"job {run_id} of {dag_id} has ended ({run['state']}): nothing to cancel"
            )
        api.patch(
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}", {"state": "failed", "note": CANCEL_NOTE}
        )
        return f"cancelled job {run_id} of {dag_id}: its {run['state']} run is marked failed"
    raise JobRefused(
        f"no job {run_id!r} in the training DAGs of {', '.join(d.name for d in domains)}"
    )


def api_from_environment(
    environ: Mapping[str, str] | None = None, url: str | None = None, user: str | None = None
) -> AirflowApi:
    """A client of the deployment's Airflow: ``url`` (or ``TRAINYARD_AIRFLOW_URL``, else the
    local API server on ``AIRFLOW__API__PORT``), ``user`` (or ``TRAINYARD_AIRFLOW_USER``, else
    admin) with ``TRAINYARD_AIRFLOW_PASSWORD`` or, for a local Airflow, the password the simple
    auth manager keeps under ``AIRFLOW_HOME``."""
    environ = os.environ if environ is None else environ
    port = environ.get("AIRFLOW__API__PORT", "8080")
    url = url or environ.get("TRAINYARD_AIRFLOW_URL") or f"http://localhost:{port}"
    user = user or environ.get("TRAINYARD_AIRFLOW_USER") or "admin"
    password = environ.get("TRAINYARD_AIRFLOW_PASSWORD", "")
    if not password:
        home = environ.get("AIRFLOW_HOME", "")
        kept = Path(
            environ.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE")
            or Path(home) / "simple_auth_manager_passwords.json.generated"
        )
        if home and kept.is_file():
            password = str(json.loads(kept.read_text()).get(user, ""))
    if not password:
        raise JobRefused(
            f"no password for Airflow user {user!r}: set TRAINYARD_AIRFLOW_PASSWORD (the "
            "production profile's AIRFLOW_ADMIN_PASSWORD in .env), or AIRFLOW_HOME for a local one"
        )
    return AirflowApi(url.rstrip("/"), user, password)
