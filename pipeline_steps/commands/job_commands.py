"""``trainyard submit``, ``jobs`` and ``cancel``: the command line of
:mod:`pipeline_steps.commands.jobs`."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

EXIT_REFUSED = 2

# the training form's fields with a flag of their own (the others: --set NAME=VALUE)
FLAGS = {
    "window_days": "--window-days",
    "model": "--model",
    "epochs": "--epochs",
    "batch_size": "--batch-size",
    "learning_rate": "--learning-rate",
    "nproc_per_node": "--processes",
    "nodes": "--nodes",
    "gpus_per_node": "--gpus-per-node",
    "memory_per_node": "--memory-per-node",
    "priority": "--priority",
}


def add_parsers(sub: Any) -> None:
    """The three commands' parsers, on ``sub`` (the CLI's subparsers)."""
    submit = sub.add_parser(
        "submit",
        help="submit a training job of a domain over Airflow's REST API, within its team's "
        "quota (orchestration.quotas); exit 2 naming what is refused",
    )
    submit.add_argument("domain", help="the domain (trainyard domains)")
    submit.add_argument("--day", required=True, help="the day to train for (ISO date)")
    for name, flag in FLAGS.items():
        submit.add_argument(flag, dest=name, help=f"the training form's {name}")
    submit.add_argument(
        "--unpause",
        action="store_true",
        help="unpause the domain's training DAG if it is paused (its jobs wait until then)",
    )
    submit.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="any other field of the training form (e.g. skip_promotion=true)",
    )
    _connection(submit)
    jobs = sub.add_parser(
        "jobs", help="list each team's running and waiting jobs: position, wait, estimated times"
    )
    jobs.add_argument("--team", help="only this team's jobs")
    _connection(jobs)
    cancel = sub.add_parser(
        "cancel", help="cancel a job (its run is marked failed, its task stopped)"
    )
    cancel.add_argument("run_id", help="the job's run id (trainyard jobs)")
    _connection(cancel)


def _connection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--airflow",
        help="Airflow's URL (default: TRAINYARD_AIRFLOW_URL, else http://localhost:"
        "$AIRFLOW__API__PORT); the password: TRAINYARD_AIRFLOW_PASSWORD or the local one",
    )
    parser.add_argument("--user", help="Airflow user (default TRAINYARD_AIRFLOW_USER or admin)")


def run(args: argparse.Namespace) -> int:
    """Run ``submit``, ``jobs`` or ``cancel``; a refusal is one line on stderr and exit 2."""
    from pipeline_steps.commands.jobs import JobRefused, api_from_environment
    from pipeline_steps.services.airflow_api import AirflowApiError

    try:
        api = api_from_environment(url=args.airflow, user=args.user)
        if args.command == "submit":
            print(_submitted(api, args), flush=True)
        elif args.command == "jobs":
            print(_listed(api, args.team), flush=True)
        else:
            from pipeline_steps.commands.jobs import cancel
            from pipeline_steps.core.deployment import domain_settings_files

            print(cancel(api, domain_settings_files(refused=[]), args.run_id), flush=True)
    except JobRefused as exc:
        print(f"trainyard {args.command} refused: {exc}", file=sys.stderr, flush=True)
        return EXIT_REFUSED
    except AirflowApiError as exc:  # a wrong login, a missing DAG: the API's own answer
        print(f"trainyard {args.command} failed: Airflow answered {exc}", file=sys.stderr)
        return EXIT_REFUSED
    return 0


def _submitted(api: Any, args: argparse.Namespace) -> str:
    from pipeline_steps.commands.jobs import JobRefused, find_domain, submit

    values = {name: getattr(args, name) for name in FLAGS if getattr(args, name) is not None}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            raise JobRefused(f"--set {item!r}: expected FIELD=VALUE")
        values[name.strip()] = value
    domain = find_domain(args.domain)
    run = submit(api, domain, args.day, values, unpause=args.unpause)
    team = domain.settings.domain.team or "-"
    changed = ", ".join(f"{k}={v}" for k, v in run["conf"].items()) or "the domain's settings"
    return "\n".join(
        [
            f"submitted job {run['dag_run_id']} of {run['dag_id']} (team {team})",
            f"  day {args.day}; {changed}",
            f"  holds {run['resources']}",
            f"  {run['waiting']} run(s) of the team were waiting; trainyard jobs shows its place",
            *(
                [
                    f"  {run['dag_id']} is paused: the job waits until it is unpaused (the "
                    "DAG's toggle in Airflow's UI, or submit with --unpause)"
                ]
                if run["paused"]
                else []
            ),
        ]
    )


def _listed(api: Any, team: str | None) -> str:
    from pipeline_steps.commands.jobs import team_jobs
    from pipeline_steps.core.deployment import domain_settings_files

    domains = [
        d
        for d in domain_settings_files(refused=[])
        if team is None or d.settings.domain.team == team
    ]
    now = datetime.now(UTC)
    jobs = team_jobs(api, domains, now)
    if not jobs:
        return "no job running or waiting" + (f" for team {team}" if team else "")
    header = (
        "TEAM",
        "DOMAIN",
        "JOB",
        "KIND",
        "DAY",
        "STATE",
        "PRIORITY",
        "POSITION",
        "WAITED",
        "STARTS IN",
        "ENDS IN",
    )
    rows = [header]
    states = ("running", "waiting", "paused")
    for job in sorted(jobs, key=lambda j: (j.team, states.index(j.state), j.position)):
        waited = ((job.started_at or now) - job.queued_at).total_seconds()
        rows.append(
            (
                job.team or "-",
                job.domain,
                job.run_id,
                job.kind,
                job.day,
                job.state,
                str(job.priority),
                str(job.position) if job.position else "-",
                _duration(waited),
                "now" if job.state == "running" else _duration(job.starts_in_s),
                _duration(job.ends_in_s),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ) + _paused_note(jobs)


def _paused_note(jobs: list[Any]) -> str:
    """A line naming the paused DAGs whose jobs wait for them, if any."""
    paused = sorted({job.dag_id for job in jobs if job.state == "paused"})
    if not paused:
        return ""
    return (
        f"\npaused: {', '.join(paused)}: their jobs wait until unpaused (the DAG's toggle in "
        "Airflow's UI)"
    )


def _duration(seconds: float | None) -> str:
    """``1h02m``, ``3m05s``, ``12s``; ``?`` when not known."""
    if seconds is None:
        return "?"
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"
