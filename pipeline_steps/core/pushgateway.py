"""Gauges pushed to a Prometheus Pushgateway, for Prometheus to scrape and alert on.

A batch job is gone before Prometheus could scrape it, so trainyard's steps push what they want
watched (a training's progress and last step, a step failing for good, a drift event, a
rollback) to the Pushgateway named by ``monitoring.pushgateway_url``; Prometheus scrapes the
Pushgateway (``honor_labels``) and evaluates ``containers/prometheus/alerts.yml``.

Each push replaces one group of gauges, keyed by the job and its grouping labels (a domain, a
run), in Prometheus' text format. A push never fails a step: an unreachable Pushgateway is
logged once per process and the step goes on.
"""

from __future__ import annotations

import http.client
import logging
import math
import urllib.error
import urllib.request
from base64 import urlsafe_b64encode
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

_warned: set[str] = set()


class PushError(RuntimeError):
    """The Pushgateway refused or did not answer a push."""


@dataclass(frozen=True, slots=True)
class Gauge:
    """One gauge's value, with what it means (its ``# HELP``)."""

    value: float
    help: str


def exposition(gauges: Mapping[str, Gauge], labels: Mapping[str, str]) -> str:
    """The gauges in Prometheus' text format, each with ``labels``; non-finite values left out."""
    tags = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    lines = []
    for name, gauge in gauges.items():
        if not math.isfinite(gauge.value):
            continue
        lines += [
            f"# HELP {name} {gauge.help}",
            f"# TYPE {name} gauge",
            f"{name}{{{tags}}} {gauge.value!r}" if tags else f"{name} {gauge.value!r}",
        ]
    return "\n".join(lines) + "\n"


def group_path(job: str, grouping: Mapping[str, str]) -> str:
    """``/metrics/job/<job>/<label>@base64/<value>...``: values base64-encoded, so a run id's
    ``:`` and ``+`` (and an empty value) travel as they are."""
    parts = [f"/metrics/job@base64/{_b64(job)}"]
    parts += [f"{k}@base64/{_b64(v)}" for k, v in sorted(grouping.items())]
    return "/".join(parts)


@dataclass(frozen=True, slots=True)
class Pushgateway:
    """A Pushgateway at ``url`` (``http://host:9091``)."""

    url: str
    timeout_s: float = 2.0

    def push(
        self,
        job: str,
        grouping: Mapping[str, str],
        gauges: Mapping[str, Gauge],
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """Replace the group's gauges (``PUT``); ``PushError`` when refused or unanswered."""
        body = exposition(gauges, labels or {}).encode()
        request = urllib.request.Request(
            self.url.rstrip("/") + group_path(job, grouping),
            data=body,
            method="PUT",
            headers={"Content-Type": "text/plain; version=0.0.4"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                answer.read()
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
            raise PushError(f"Pushgateway {self.url} did not take {job}: {exc}") from exc

    def push_quietly(
        self,
        job: str,
        grouping: Mapping[str, str],
        gauges: Mapping[str, Gauge],
        labels: Mapping[str, str] | None = None,
    ) -> bool:
        """``push``, a failure logged (once per Pushgateway and process) instead of raised."""
        try:
            self.push(job, grouping, gauges, labels)
        except Exception as exc:  # whatever it is, the step goes on
            if self.url not in _warned:
                _warned.add(self.url)
                log.warning("%s (monitoring.pushgateway_url); the step goes on", exc)
            return False
        return True

    def delete(self, job: str, grouping: Mapping[str, str]) -> None:
        """Remove the group (``DELETE``): its gauges are gone from the next scrape, and an
        alert on them resolves; ``PushError`` when refused or unanswered."""
        request = urllib.request.Request(
            self.url.rstrip("/") + group_path(job, grouping), method="DELETE"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                answer.read()
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
            raise PushError(f"Pushgateway {self.url} did not remove {job}: {exc}") from exc


TRAIN_JOB = "trainyard_train"
"""The job of a training's gauges; each run's group is ``{domain, run_id}``."""


FORGET_TIMEOUT_S = 10.0
FORGET_ATTEMPTS = 3
"""A task's end waits up to this long, this many times, for its group to be removed (a push
during the training waits 2 s once: a step never waits for monitoring)."""


def forget_training(url: str, domain: str, run: str) -> bool:
    """Remove the gauges of the training of ``run`` (:data:`TRAIN_JOB`) from the Pushgateway at
    ``url`` once its task has ended, so that the alerts on them (a stall, a silence) clear
    whether the run succeeded, failed for good or was abandoned; a failure is logged, never
    raised. Whether it was removed."""
    gateway = Pushgateway(url, timeout_s=FORGET_TIMEOUT_S)  # once per task: it may wait
    for attempt in range(1, FORGET_ATTEMPTS + 1):
        try:
            gateway.delete(TRAIN_JOB, {"domain": domain, "run_id": run})
            return True
        except PushError as exc:
            if attempt == FORGET_ATTEMPTS:
                log.warning(
                    "%s (monitoring.pushgateway_url, %d tries): its alerts stay until it is "
                    "removed",
                    exc,
                    attempt,
                )
    return False


def _b64(value: str) -> str:
    return urlsafe_b64encode(value.encode()).decode() or "="


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")
