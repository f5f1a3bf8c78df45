"""Prometheus and its Pushgateway as trainyard runs them (Debian's ``prometheus`` and
``prometheus-pushgateway`` packages, ``scripts/prometheus.sh``): the configuration that
scrapes the Pushgateway the steps push to (``honor_labels``, so a pushed ``job`` and ``domain``
stay) and MLflow's ``/metrics`` (``mlflow server --expose-prometheus``), evaluates
``containers/prometheus/alerts.yml``, and the two commands. Airflow's metrics are scraped from
the statsd-exporter its components send StatsD to
(:mod:`pipeline_steps.services.statsd_exporter`)."""

from __future__ import annotations

from pathlib import Path

import yaml

from pipeline_steps.core.settings import PROJECT_ROOT

RULES = PROJECT_ROOT / "containers" / "prometheus" / "alerts.yml"
"""trainyard's alert rules."""


def config(
    pushgateway: str,
    mlflow: str | None = None,
    rules: Path | str = RULES,
    scrape_s: int = 15,
    evaluate_s: int = 15,
    mlflow_auth: tuple[str, str] | None = None,
    airflow: str | None = None,
) -> str:
    """``prometheus.yml``: scrape the Pushgateway at ``pushgateway`` (``host:port``) and, when
    given, MLflow at ``mlflow`` (``host:port``) every ``scrape_s`` seconds; evaluate ``rules``
    every ``evaluate_s`` seconds. ``mlflow_auth`` is ``(user, password file)`` for an MLflow
    server with basic auth: its ``/metrics`` answers its admins only. ``airflow`` is the
    statsd-exporter that serves Airflow's metrics (``host:port``)."""
    jobs: list[dict[str, object]] = [
        {
            "job_name": "pushgateway",
            "honor_labels": True,
            "static_configs": [{"targets": [pushgateway]}],
        }
    ]
    if mlflow:
        job: dict[str, object] = {"job_name": "mlflow", "static_configs": [{"targets": [mlflow]}]}
        if mlflow_auth:
            job["basic_auth"] = {"username": mlflow_auth[0], "password_file": mlflow_auth[1]}
        jobs.append(job)
    if airflow:
        jobs.append({"job_name": "airflow", "static_configs": [{"targets": [airflow]}]})
    document = {
        "global": {
            "scrape_interval": f"{scrape_s}s",
            "evaluation_interval": f"{evaluate_s}s",
        },
        "rule_files": [str(rules)],
        "scrape_configs": jobs,
    }
    return yaml.safe_dump(document, sort_keys=False)


def prometheus_argv(config_file: Path | str, data_dir: Path | str, listen: str) -> list[str]:
    """Prometheus serving on ``listen`` (``host:port``), its database in ``data_dir``."""
    return [
        "prometheus",
        f"--config.file={config_file}",
        f"--storage.tsdb.path={data_dir}",
        f"--web.listen-address={listen}",
        "--storage.tsdb.retention.time=15d",
    ]


def pushgateway_argv(listen: str, persistence: Path | None = None) -> list[str]:
    """The Pushgateway serving on ``listen`` (``host:port``), what it holds kept in
    ``persistence`` across restarts, or in memory only (None). Named either way: Debian's
    build otherwise shares ``/var/lib/prometheus/pushgateway.data`` between every instance."""
    return [
        "prometheus-pushgateway",
        f"--web.listen-address={listen}",
        f"--persistence.file={persistence or ''}",
    ]
