"""The lock helper behind promotion.lock and tuning claims: one holder at a time, across
processes (file lock) and across machines (PostgreSQL advisory lock)."""

import multiprocessing
import time
from pathlib import Path

import pytest

from pipeline_steps.core.locks import exclusive


def _hold(where: str, name: str, hold_s: float, log: "multiprocessing.Queue[tuple]") -> None:
    with exclusive(where, name, setting="test.lock"):
        log.put(("in", time.monotonic()))
        time.sleep(hold_s)
        log.put(("out", time.monotonic()))


def _contend(where: str, name: str = "promotion.flight_delay") -> list[tuple]:
    context = multiprocessing.get_context("spawn")
    log = context.Queue()
    workers = [context.Process(target=_hold, args=(where, name, 0.5, log)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    return [log.get(timeout=5) for _ in range(4)]


def _assert_one_at_a_time(events: list[tuple]) -> None:
    ordered = sorted(events, key=lambda e: e[1])
    assert [kind for kind, _ in ordered] == ["in", "out", "in", "out"], ordered


def test_a_file_lock_admits_one_process_at_a_time(tmp_path: Path) -> None:
    _assert_one_at_a_time(_contend(str(tmp_path / "locks")))
    assert (tmp_path / "locks" / "promotion.flight_delay.lock").exists()


@pytest.mark.services
def test_an_advisory_lock_admits_one_process_at_a_time(postgres_url: str) -> None:
    _assert_one_at_a_time(_contend(postgres_url))


@pytest.mark.services
def test_advisory_locks_of_different_names_do_not_wait(postgres_url: str) -> None:
    with exclusive(postgres_url, "promotion.a", setting="test.lock"):
        started = time.monotonic()
        with exclusive(postgres_url, "promotion.b", setting="test.lock"):
            assert time.monotonic() - started < 5
