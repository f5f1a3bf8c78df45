"""A small client of Airflow 3's authenticated REST API (``/api/v2``): what scripts, the
production profile's test and the scheduler benchmark need — trigger, unpause, wait, read task
instances."""

from __future__ import annotations

import itertools
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

FINISHED = ("success", "failed")


class AirflowApiError(RuntimeError):
    """The API refused a request; the message has the method, path, status and body."""


@dataclass
class AirflowApi:
    url: str
    username: str
    password: str
    _token: str = field(default="", repr=False)

    def token(self) -> str:
        if not self._token:
            body = {"username": self.username, "password": self.password}
            self._token = str(self._send("POST", "/auth/token", body, auth=False)["access_token"])
        return self._token

    def _send(
        self, method: str, path: str, body: dict[str, Any] | None = None, auth: bool = True
    ) -> Any:
        request = urllib.request.Request(
            self.url + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        if auth:
            request.add_header("Authorization", f"Bearer {self.token()}")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise AirflowApiError(f"{method} {path}: HTTP {exc.code}: {detail}") from exc

    def get(self, path: str) -> Any:
        return self._send("GET", path)

    def unpause(self, dag_id: str) -> None:
        self._send("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def trigger(
        self, dag_id: str, day: str, run_id: str, conf: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        body = {"logical_date": f"{day}T00:00:00Z", "dag_run_id": run_id, "conf": conf or {}}
        return dict(self._send("POST", f"/api/v2/dags/{dag_id}/dagRuns", body))

    def run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return dict(self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}"))

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        found = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return list(found["task_instances"])

    def wait(self, dag_id: str, run_ids: list[str], timeout_s: float) -> dict[str, str]:
        """Each run's final state; AirflowApiError when one is still going at the deadline."""
        deadline = time.monotonic() + timeout_s
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = {run_id: self.run(dag_id, run_id)["state"] for run_id in run_ids}
            if all(state in FINISHED for state in states.values()):
                return states
            time.sleep(5)
        raise AirflowApiError(f"runs of {dag_id} not finished after {timeout_s:.0f} s: {states}")


def boundary_gaps(task_instances: list[dict[str, Any]]) -> list[float]:
    """Seconds from each task's end to the start of the next task that waited for it (the
    scheduler's overhead per task boundary), for a run whose tasks form a chain."""
    ran = [t for t in task_instances if t.get("start_date") and t.get("end_date")]
    ran.sort(key=lambda t: t["start_date"])
    gaps = []
    for before, after in itertools.pairwise(ran):
        end = datetime.fromisoformat(before["end_date"])
        start = datetime.fromisoformat(after["start_date"])
        gaps.append((start - end).total_seconds())
    return gaps
