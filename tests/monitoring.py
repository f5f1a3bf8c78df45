"""A real Prometheus and Pushgateway for a test (Debian's packages, scripts/prometheus.sh), on
free ports, scraping and evaluating every second."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline_steps.services import prometheus


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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

    def wait_for(self, what: str, check: Any, timeout_s: float = 60) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def require_prometheus() -> None:
    missing = [c for c in ("prometheus", "prometheus-pushgateway") if shutil.which(c) is None]
    if missing:
        why = f"no {', '.join(missing)} (scripts/prometheus.sh installs Debian's packages)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"the monitoring tests must run in CI: {why}")
        pytest.skip(why)


@contextmanager
def monitoring(folder: Path) -> Iterator[Monitoring]:
    """A Pushgateway and a Prometheus scraping it and evaluating trainyard's alert rules every
    second; both stopped after the block."""
    require_prometheus()
    gateway, web = f"127.0.0.1:{_free_port()}", f"127.0.0.1:{_free_port()}"
    config = folder / "prometheus.yml"
    config.write_text(prometheus.config(gateway, scrape_s=1, evaluate_s=1))
    logs = [(folder / f"{name}.log").open("w") for name in ("pushgateway", "prometheus")]
    argvs = [
        prometheus.pushgateway_argv(gateway),
        prometheus.prometheus_argv(config, folder / "tsdb", web),
    ]
    started = [
        subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        for argv, log in zip(argvs, logs, strict=True)
    ]
    found = Monitoring(prometheus=f"http://{web}", pushgateway=f"http://{gateway}")
    try:
        found.wait_for("Prometheus to answer", lambda: _ready(found.prometheus), 30)
        found.wait_for("the Pushgateway to answer", lambda: _ready(found.pushgateway), 30)
        yield found
    finally:
        for process in started:
            process.terminate()
        for process in started:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        for log in logs:
            log.close()


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False
