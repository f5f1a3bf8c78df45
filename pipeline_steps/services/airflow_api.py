"""A small client of Airflow 3's authenticated REST API (``/api/v2``): what scripts, the
production profile's test and the scheduler benchmark need — trigger, unpause, wait, read task
instances and their logs."""

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
POLL_TIMEOUT_S = 60


class AirflowApiError(RuntimeError):
    """The API refused a request; the message has the method, path, status and body."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


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
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        auth: bool = True,
        timeout_s: float = POLL_TIMEOUT_S,
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
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise AirflowApiError(f"{method} {path}: HTTP {exc.code}: {detail}", exc.code) from exc

    def get(self, path: str) -> Any:
        return self._send("GET", path)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self._send("POST", path, body)

    def patch(self, path: str, body: dict[str, Any]) -> Any:
        return self._send("PATCH", path, body)

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

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> list[str]:
        """The lines of one try's log (its events, as the UI shows them)."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
        content = self.get(f"{path}?full_content=true").get("content", [])
        if isinstance(content, str):
            return content.splitlines()
        return [
            f"{line.get('timestamp', '')} {line.get('level', '')} {line.get('event', '')}".strip()
            if isinstance(line, dict)
            else str(line)
            for line in content
        ]

    def unsuccessful(self, dag_id: str, run_id: str, tail: int = 30) -> str:
        """Each task of the run that did not succeed, its state and the last ``tail`` lines of
        its latest try's log: what a failed or stuck run is read by."""
        lines = []
        for task in self.task_instances(dag_id, run_id):
            if task["state"] == "success":
                continue
            tries = int(task.get("try_number") or 0)
            lines.append(f"--- {task['task_id']}: {task['state']} (try {tries})")
            if tries:
                try:
                    lines += self.task_log(dag_id, run_id, task["task_id"], tries)[-tail:]
                except AirflowApiError as exc:
                    lines.append(f"(no log: {exc})")
        return "\n".join(lines)

    def wait(
        self,
        dag_id: str,
        run_ids: list[str],
        timeout_s: float,
        poll_s: float = 5,
        stall_s: float | None = None,
    ) -> dict[str, str]:
        """Each run's final state; AirflowApiError when one is still going at the deadline.

        With ``stall_s`` the deadline is the earlier of ``timeout_s`` from now and ``stall_s``
        after the last change of any of the runs' task instances (a task queued, started,
        ended, retried): a slow machine's run that keeps going is waited for, a stuck one fails
        after ``stall_s`` without change. A poll the API server does not answer in time (a busy
        server, a restarting one) or answers with a 5xx is polled again until the deadline:
        only the runs' states decide."""
        started = time.monotonic()
        ceiling = started + timeout_s
        progress: tuple[tuple[str, ...], ...] = ()
        changed = started
        states: dict[str, str] = {}
        missed: list[str] = []

        def deadline() -> float:
            return ceiling if stall_s is None else min(ceiling, changed + stall_s)

        while time.monotonic() < deadline():
            try:
                states = {run_id: self._state(dag_id, run_id, deadline()) for run_id in run_ids}
                if all(state in FINISHED for state in states.values()):
                    return states
                if stall_s is not None:
                    now = self._progress(dag_id, run_ids, deadline())
                    if now != progress:
                        progress, changed = now, time.monotonic()
            except _Unanswered as exc:
                missed.append(str(exc))
            time.sleep(max(0.0, min(poll_s, deadline() - time.monotonic())))
        going = [run_id for run_id in run_ids if states.get(run_id) not in FINISHED]
        detail = "\n".join(self.unsuccessful(dag_id, run_id) for run_id in going)
        unanswered = f" ({len(missed)} polls unanswered, last: {missed[-1]})" if missed else ""
        waited = time.monotonic() - started
        why = f"not finished after {waited:.0f} s"
        if stall_s is not None and deadline() < ceiling:
            why += f", no task changed state for {time.monotonic() - changed:.0f} s (stall_s)"
        raise AirflowApiError(f"runs of {dag_id} {why}: {states}{unanswered}\n{detail}")

    def _state(self, dag_id: str, run_id: str, deadline: float) -> str:
        found = self._poll(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}", deadline)
        return str(found["state"])

    def _progress(
        self, dag_id: str, run_ids: list[str], deadline: float
    ) -> tuple[tuple[str, ...], ...]:
        """Where the runs' task instances stand: each one's id, map index, state and try."""
        found = []
        for run_id in run_ids:
            path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
            for task in self._poll(path, deadline).get("task_instances", []):
                fields = ("task_id", "map_index", "state", "try_number")
                found.append((run_id, *(str(task.get(f)) for f in fields)))
        return tuple(sorted(found))

    def _poll(self, path: str, deadline: float) -> Any:
        """GET ``path``; ``_Unanswered`` when the server does not answer before ``deadline``
        (or ``POLL_TIMEOUT_S``), is unreachable or answers with a 5xx."""
        left = min(POLL_TIMEOUT_S, max(1.0, deadline - time.monotonic()))
        try:
            return self._send("GET", path, timeout_s=left)
        except AirflowApiError as exc:
            if exc.status is not None and exc.status >= 500:
                raise _Unanswered(str(exc)) from exc
            raise
        except (TimeoutError, ConnectionError, urllib.error.URLError) as exc:
            raise _Unanswered(f"GET {path}: {exc}") from exc


class _Unanswered(Exception):
    """A poll with no usable answer: timed out, refused, reset, or a server error."""


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
