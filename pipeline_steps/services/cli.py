"""The command line of the production profile: ``trainyard services
up|down|status|init|env|prometheus-config|statsd-exporter``."""

from __future__ import annotations

import argparse
import logging
import sys

from pipeline_steps.services import lifecycle
from pipeline_steps.services.processes import ServiceError
from pipeline_steps.services.profile import load_profile


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainyard services",
        description="The production profile as processes on this machine: Airflow with Celery "
        "workers, an authenticated MLflow server, an S3 store, on PostgreSQL and Redis.",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="start every process (prepares databases, users and secrets)")
    up.add_argument(
        "--spark",
        nargs="?",
        type=int,
        const=2,
        metavar="WORKERS",
        help="also a Spark standalone cluster (a master and WORKERS workers, 2 when not given), "
        "which the steps then run their data work on; --spark 0 goes back to the local engine",
    )
    down = sub.add_parser("down", help="stop every process")
    down.add_argument(
        "--purge",
        action="store_true",
        help="also drop the profile's databases, Redis databases and home (.env included)",
    )
    sub.add_parser("status", help="which processes run")
    sub.add_parser(
        "init",
        help="write the profile's .env (generated secrets, every team's MLflow password; mode "
        "0600) only",
    )
    sub.add_parser(
        "env", help="print `export` lines for a shell that runs steps against the profile"
    )
    config = sub.add_parser(
        "prometheus-config",
        help="print a prometheus.yml that scrapes the Pushgateway the steps push to "
        "(monitoring.pushgateway_url) and evaluates trainyard's alert rules",
    )
    config.add_argument("--pushgateway", required=True, help="the Pushgateway, host:port")
    config.add_argument("--mlflow", help="also scrape MLflow's /metrics there, host:port")
    config.add_argument("--airflow", help="also scrape Airflow's statsd-exporter there, host:port")
    config.add_argument("--scrape-s", type=int, default=15, help="scrape and evaluation interval")
    statsd = sub.add_parser(
        "statsd-exporter",
        help="take Airflow's StatsD metrics and serve them to Prometheus at /metrics",
    )
    statsd.add_argument("--statsd", default="127.0.0.1:8125", help="UDP host:port to take")
    statsd.add_argument("--listen", default="127.0.0.1:9102", help="HTTP host:port to serve")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        if args.action == "up":
            profile = lifecycle.up(spark_workers=args.spark)
            print("The production profile is up.\n" + lifecycle.describe(profile))
        elif args.action == "down":
            stopped = lifecycle.down(purge=args.purge)
            print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
            if args.purge:
                print("databases, Redis databases and the profile's home removed")
        elif args.action == "init":
            profile, teams = lifecycle.team_passwords(load_profile())
            print(f"{profile.env_file} (mode 0600)")
            if teams:
                made = ", ".join(teams)
                print(f"MLflow passwords of teams {made} (services up makes their users)")
        elif args.action == "prometheus-config":
            from pipeline_steps.services import prometheus

            every = args.scrape_s
            text = prometheus.config(
                args.pushgateway,
                args.mlflow,
                scrape_s=every,
                evaluate_s=every,
                airflow=args.airflow,
            )
            print(text)
        elif args.action == "statsd-exporter":
            from pipeline_steps.services.statsd_exporter import Exporter

            try:
                exporter = Exporter(args.statsd, args.listen)
            except (ValueError, OSError) as exc:
                print(f"trainyard services statsd-exporter: {exc}", file=sys.stderr)
                return 2
            exporter.serve_forever()
        elif args.action == "status":
            for name, pid in lifecycle.status().items():
                print(f"{name:24} {'running, pid ' + str(pid) if pid else 'stopped'}")
        else:
            from pipeline_steps.services.airflow_env import shell_exports

            print(shell_exports(load_profile().airflow_env()))
    except ServiceError as exc:
        print(f"trainyard services {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0
