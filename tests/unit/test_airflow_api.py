"""The REST client's wait against a real HTTP server that answers late, fails, then answers:
a poll the server leaves unanswered is polled again; only the run's state decides."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipeline_steps.services import airflow_api
from pipeline_steps.services.airflow_api import AirflowApi, AirflowApiError


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    answers: list[tuple[float, int, str]]  # per GET of the run: seconds late, status, state
    tasks: list[str] = ["running"]  # per GET of its task instances: the one task's state


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, status: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        self._answer(201, {"access_token": "t"})

    def do_GET(self) -> None:
        if self.path.endswith("/taskInstances"):
            tasks = self.server.tasks
            state = tasks.pop(0) if len(tasks) > 1 else tasks[0]
            self._answer(200, {"task_instances": [{"task_id": "t", "state": state}]})
            return
        answers = self.server.answers
        late, status, state = answers.pop(0) if len(answers) > 1 else answers[0]
        time.sleep(late)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._answer(status, {"state": state, "detail": "boom"})


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _api(server: _Server) -> AirflowApi:
    return AirflowApi(f"http://127.0.0.1:{server.server_address[1]}", "admin", "pw")


def test_a_poll_answered_late_or_with_a_server_error_is_polled_again(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(airflow_api, "POLL_TIMEOUT_S", 0.3)
    server.answers = [(2.0, 200, "running"), (0, 503, ""), (0, 200, "running"), (0, 200, "success")]
    assert _api(server).wait("d", ["r"], timeout_s=20, poll_s=0.05) == {"r": "success"}
    assert server.answers == [(0, 200, "success")]


def test_a_run_still_going_at_the_deadline_says_so_with_the_unanswered_polls(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(airflow_api, "POLL_TIMEOUT_S", 0.3)
    server.answers = [(0, 200, "running"), (2.0, 200, "running")]
    monkeypatch.setattr(AirflowApi, "unsuccessful", lambda self, dag, run: f"{run}: stuck")
    with pytest.raises(
        AirflowApiError, match=r"not finished after 2 s.*'r': 'running'.*unanswered"
    ):
        _api(server).wait("d", ["r"], timeout_s=2, poll_s=0.05)


def test_a_slow_run_that_keeps_changing_is_waited_for_past_the_stall_limit(
    server: _Server,
) -> None:
    server.answers = [(0, 200, "running")] * 30 + [(0, 200, "success")]
    server.tasks = [f"try {n}" for n in range(40)]  # a task state changing at every poll
    started = time.monotonic()
    states = _api(server).wait("d", ["r"], timeout_s=60, poll_s=0.1, stall_s=1)
    assert states == {"r": "success"}
    assert time.monotonic() - started > 2  # well past stall_s: it kept changing


def test_a_run_whose_tasks_stop_changing_fails_after_the_stall_limit(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.answers = [(0, 200, "running")]
    server.tasks = ["queued", "running"]  # one change, then none
    monkeypatch.setattr(AirflowApi, "unsuccessful", lambda self, dag, run: f"{run}: stuck")
    started = time.monotonic()
    with pytest.raises(AirflowApiError, match=r"no task changed state for 1 s \(stall_s\)"):
        _api(server).wait("d", ["r"], timeout_s=60, poll_s=0.1, stall_s=1)
    assert time.monotonic() - started < 10  # the stall decided, not the 60 s ceiling


def test_a_refused_request_is_not_polled_again(server: _Server) -> None:
    server.answers = [(0, 404, "")]
    with pytest.raises(AirflowApiError, match="HTTP 404") as refused:
        _api(server).wait("d", ["r"], timeout_s=20, poll_s=0.05)
    assert refused.value.status == 404
