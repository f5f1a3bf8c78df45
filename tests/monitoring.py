"""A real Prometheus and Pushgateway for a test (Debian's packages, scripts/prometheus.sh), on
free ports, scraping and evaluating every second."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline_steps.services import prometheus
from tests.conftest import free_port, wait_until


@dataclass(frozen=True)
class Monitoring:
    prometheus: str
    pushgateway: str

    def get(self, path: str, **query: str) -> Any:
        url = f"{self.prometheus}{path}?{urllib.parse.urlencode(query)}"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.load(answer)["data"]

    def alerts(self, name: str) -> list[dict[str, Any]]:
        """The alerts named ``name`` Prometheus holds now (pending or firing)."""
        return [a for a in self.get("/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == name]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.get("/api/v1/query", query=expr)["result"])


def require_prometheus() -> None:
    missing = [c for c in ("prometheus", "prometheus-pushgateway") if shutil.which(c) is None]
    if missing:
        why = f"no {', '.join(missing)} (scripts/prometheus.sh installs Debian's packages)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"the monitoring tests must run in CI: {why}")
        pytest.skip(why)


@contextmanager
def _serving(folder: Path, name: str, argv: list[str], url: str) -> Iterator[str]:
    """``argv`` running (its output in ``folder/<name>.log``) until ``url`` is ready, then for
    the block; stopped after it."""
    with (folder / f"{name}.log").open("w") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(f"{name} to answer", lambda: ready(url), 30)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


@contextmanager
def pushgateway(folder: Path) -> Iterator[str]:
    """A Pushgateway (what it holds in memory only); its URL."""
    require_prometheus()
    listen = f"127.0.0.1:{free_port()}"
    argv = prometheus.pushgateway_argv(listen)
    with _serving(folder, "pushgateway", argv, f"http://{listen}") as url:
        yield url


@contextmanager
def monitoring(folder: Path) -> Iterator[Monitoring]:
    """A Pushgateway and a Prometheus scraping it and evaluating trainyard's alert rules every
    second; both stopped after the block."""
    with pushgateway(folder) as gateway:
        web = f"127.0.0.1:{free_port()}"
        config = folder / "prometheus.yml"
        config.write_text(
            prometheus.config(gateway.removeprefix("http://"), scrape_s=1, evaluate_s=1)
        )
        argv = prometheus.prometheus_argv(config, folder / "tsdb", web)
        with _serving(folder, "prometheus", argv, f"http://{web}") as url:
            yield Monitoring(prometheus=url, pushgateway=gateway)


def ready(url: str) -> bool:
    """Whether a Prometheus or a Pushgateway at ``url`` says it is ready."""
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False
