"""Produce the next items of an iterator in a background thread while the caller works.

Reading and decoding parquet (pyarrow) and building arrays release the GIL, so on a machine
with a spare core the next chunk or batch is ready when the current one is done. At most
``depth`` items wait in the queue, which bounds the memory held ahead. An exception in the
producer is raised in the consumer at the point it would have occurred.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
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
