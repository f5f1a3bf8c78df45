"""Prometheus and its Pushgateway as trainyard runs them (Debian's ``prometheus`` and
``prometheus-pushgateway`` packages, ``scripts/prometheus.sh``): the configuration that
scrapes the Pushgateway the steps push to (``honor_labels``, so a pushed ``job`` and ``domain``
stay) and MLflow's ``/metrics`` (``mlflow server --expose-prometheus``), evaluates
``containers/prometheus/alerts.yml``, and the two commands."""

from __future__ import annotations

from pathlib import Path

import yaml

from pipeline_steps.core.settings import PROJECT_ROOT

RULES = PROJECT_ROOT / "containers" / "prometheus" / "alerts.yml"
"""trainyard's alert rules."""


def config(
    pushgateway: str,
    mlflow: str | None = None,
    rules: Path = RULES,
    scrape_s: int = 15,
    evaluate_s: int = 15,
) -> str:
    """``prometheus.yml``: scrape the Pushgateway at ``pushgateway`` (``host:port``) and, when
    given, MLflow at ``mlflow`` (``host:port``) every ``scrape_s`` seconds; evaluate ``rules``
    every ``evaluate_s`` seconds."""
    jobs: list[dict[str, object]] = [
        {
            "job_name": "pushgateway",
            "honor_labels": True,
            "static_configs": [{"targets": [pushgateway]}],
        }
    ]
    if mlflow:
        jobs.append({"job_name": "mlflow", "static_configs": [{"targets": [mlflow]}]})
    document = {
        "global": {
            "scrape_interval": f"{scrape_s}s",
            "evaluation_interval": f"{evaluate_s}s",
        },
        "rule_files": [str(rules)],
        "scrape_configs": jobs,
    }
    return yaml.safe_dump(document, sort_keys=False)


def prometheus_argv(config_file: Path, data_dir: Path, listen: str) -> list[str]:
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
