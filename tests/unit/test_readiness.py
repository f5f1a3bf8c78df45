"""Waiting for a service to start: done when the service says it is ready, at once told when a
process it depends on exits (with its log), and a limit whose error says what was waited for and
what was seen last."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline_steps.services.readiness import Seen, ServiceError, Watched, wait_until_ready


def test_the_wait_ends_when_the_service_says_it_is_ready() -> None:
    answers: Iterator[Seen | Exception] = iter(
        [ConnectionRefusedError("refused"), Seen(False, "1 of 2"), Seen(True, "2")]
    )

    def look() -> Seen:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    took = wait_until_ready("two workers", look, [], limit_s=10, every_s=0.01)
    assert took < 5
    assert next(answers, None) is None  # through the refusal and the answer "not yet"


def test_a_process_that_exits_ends_the_wait_at_once_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-c", "print('bind: address already in use'); raise SystemExit(3)"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    started = time.monotonic()
    with pytest.raises(ServiceError) as raised:
        wait_until_ready(
            "the server's /health",
            lambda: Seen(False, "HTTP 503"),
            [Watched.child("the server", server, log)],
            limit_s=300,
            every_s=0.05,
        )
    assert time.monotonic() - started < 60  # not the limit
    message = str(raised.value)
    assert "the server exited" in message and "waiting for the server's /health" in message
    assert "last seen: HTTP 503" in message
    assert "bind: address already in use" in message and str(log) in message


def test_the_limit_says_what_was_waited_for_and_what_was_seen_last(tmp_path: Path) -> None:
    log = tmp_path / "master.log"
    log.write_text("".join(f"line {n}\n" for n in range(40)))
    answers = iter(
        [Seen(False, "0 of 2 workers alive")] + [Seen(False, "1 of 2 workers alive")] * 99
    )
    with pytest.raises(ServiceError) as raised:
        wait_until_ready(
            "2 workers registered",
            lambda: next(answers),
            [Watched("the master", lambda: True, log)],
            limit_s=0.3,
            every_s=0.05,
        )
    message = str(raised.value)
    assert message.startswith("waited 0 s for 2 workers registered; last seen: 1 of 2 workers")
    assert "(since 0 s)" in message
    assert "line 39" in message and "line 24" not in message  # the log's last 15 lines


def test_an_error_while_the_service_starts_is_what_was_seen() -> None:
    def look() -> bool:
        raise TimeoutError("timed out")

    with pytest.raises(ServiceError, match="last seen: TimeoutError: timed out"):
        wait_until_ready("MLflow's /health", look, [], limit_s=0.1, every_s=0.05)


@pytest.fixture
def master_ui() -> Iterator[tuple[int, dict[str, object]]]:
    """A stand-in for the Spark master's web UI JSON (``/json/``), its answer changeable."""
    state: dict[str, object] = {"status": "ALIVE", "aliveworkers": 1}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(state).encode()
            self.send_response(200 if self.path == "/json/" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], state
    finally:
        server.shutdown()


def test_the_spark_master_is_ready_when_it_counts_every_worker_alive(
    master_ui: tuple[int, dict[str, object]],
) -> None:
    from pipeline_steps.services.spark_cluster import workers_alive

    port, state = master_ui
    assert workers_alive(port, 2) == Seen(False, "master ALIVE, 1 of 2 workers alive")
    state["aliveworkers"] = 2
    assert workers_alive(port, 2).ready


def test_a_profile_process_that_ended_is_not_waited_for(tmp_path: Path) -> None:
    """``up`` starts a process and waits for it without reaping it: ended, it is a zombie whose
    pid still answers, and the wait must end at once all the same."""
    from pipeline_steps.services import processes
    from pipeline_steps.services.profile import load_profile

    profile = load_profile({"TRAINYARD_PROD_HOME": str(tmp_path)})
    log = processes.log_file(profile, "mlflow")
    log.parent.mkdir(parents=True)
    log.write_text("Error: no such option: --timeout-worker-healthcheck\n")
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    processes.pid_file(profile, "mlflow").parent.mkdir(parents=True)
    processes.pid_file(profile, "mlflow").write_text(str(ended.pid))
    while processes._state(ended.pid) != "Z":
        time.sleep(0.05)
    try:
        with pytest.raises(ServiceError, match="mlflow exited") as raised:
            processes.wait_for(profile, "mlflow", lambda: False, 30, "MLflow's /health")
        assert "no such option" in str(raised.value)
    finally:
        ended.wait()
