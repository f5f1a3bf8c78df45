import threading
import time

import pytest

from pipeline_steps.core.prefetch import map_ahead, prefetch


def test_items_arrive_in_order_and_complete() -> None:
    assert list(prefetch(range(100), depth=3)) == list(range(100))
    assert list(prefetch(range(5), depth=0)) == list(range(5))


def test_producer_runs_ahead_of_the_consumer() -> None:
    produced: list[int] = []

    def slow_source():
        for i in range(3):
            produced.append(i)
            yield i

    items = prefetch(slow_source(), depth=2)
    assert next(items) == 0
    deadline = time.monotonic() + 5
    while len(produced) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert produced == [0, 1, 2]  # made while the consumer held item 0
    assert list(items) == [1, 2]


def test_a_producer_error_is_raised_in_the_consumer() -> None:
    def broken():
        yield 1
        raise ValueError("row group 2 is corrupt")

    items = prefetch(broken())
    assert next(items) == 1
    with pytest.raises(ValueError, match="row group 2 is corrupt"):
        next(items)


def test_closing_early_stops_the_producer() -> None:
    def endless():
        i = 0
        while True:
            yield i
            i += 1

    before = threading.active_count()
    items = prefetch(endless(), depth=2)
    assert next(items) == 0
    items.close()
    assert threading.active_count() == before


def test_map_ahead_keeps_the_order_of_the_items_whatever_finishes_first() -> None:
    def convert(i: int) -> int:
        time.sleep(0.02 if i % 2 == 0 else 0.0)  # even items finish after their successors
        return i * i

    assert list(map_ahead(convert, range(20), workers=3, depth=2)) == [i * i for i in range(20)]
    assert list(map_ahead(convert, range(3), workers=1, depth=0)) == [0, 1, 4]


def test_map_ahead_converts_in_parallel_and_bounds_the_items_in_flight() -> None:
    running, most, lock = 0, 0, threading.Lock()

    def convert(i: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.05)
        with lock:
            running -= 1
        return i

    drawn: list[int] = []

    def source():
        for i in range(100):
            drawn.append(i)
            yield i

    results = map_ahead(convert, source(), workers=2, depth=1)
    assert next(results) == 0
    time.sleep(0.3)
    assert most == 2  # two conversions at once
    assert len(drawn) <= 2 + 1 + 1 + 2  # in flight + the reader's queue, not the whole source
    results.close()


def test_map_ahead_raises_a_conversion_error_in_order() -> None:
    def convert(i: int) -> int:
        if i == 2:
            raise ValueError(f"buffer {i} is corrupt")
        return i

    results = map_ahead(convert, range(5), workers=2, depth=1)
    assert [next(results), next(results)] == [0, 1]
    with pytest.raises(ValueError, match="buffer 2 is corrupt"):
        next(results)
