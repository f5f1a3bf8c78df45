"""Produce the next items of an iterator in a background thread while the caller works.

Reading and decoding parquet (pyarrow) and building arrays release the GIL, so on a machine
with a spare core the next chunk or batch is ready when the current one is done. At most
``depth`` items wait in the queue, which bounds the memory held ahead. An exception in the
producer is raised in the consumer at the point it would have occurred.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")
_DONE = object()


def prefetch(items: Iterable[T], depth: int = 1) -> Iterator[T]:
    """Iterate ``items`` with up to ``depth`` of them produced ahead in a daemon thread."""
    if depth < 1:
        yield from items
        return
    ready: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                if not _put(ready, item, stop):
                    return
        except BaseException as exc:  # handed to the consumer, re-raised there
            _put(ready, _Failure(exc), stop)
            return
        _put(ready, _DONE, stop)

    worker = threading.Thread(target=produce, name="trainyard-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item = ready.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        worker.join(timeout=5)


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def _put(ready: queue.Queue[object], item: object, stop: threading.Event) -> bool:
    """Queue ``item`` unless the consumer has gone; False once it has."""
    while not stop.is_set():
        try:
            ready.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def map_ahead(fn: Callable[[T], R], items: Iterable[T], workers: int, depth: int) -> Iterator[R]:
    """``fn`` over ``items`` in ``workers`` threads, results in the order of ``items``.

    ``items`` is drawn in a background thread of its own (``prefetch``), so a sequential source
    such as a file is read while earlier items are converted; at most ``workers + depth``
    results are running or waiting. An exception in ``fn`` is raised here, in order.
    """
    pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="trainyard-map")
    pending: deque[Future[R]] = deque()
    try:
        for item in prefetch(items, depth=1):
            pending.append(pool.submit(fn, item))
            if len(pending) >= max(1, workers) + depth:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
