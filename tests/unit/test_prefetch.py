import threading
import time

import pytest

from pipeline_steps.prefetch import prefetch


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
