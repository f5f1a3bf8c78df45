"""Waiting for a service to start: on the service's own answer, for as long as its processes live.

A start on a busy small machine can take minutes where an idle one takes seconds, so a wait has
no fixed guess of how long starting takes: it asks the service (its health endpoint, the Spark
master's JSON) until the answer says ready, ends at once with the log's last lines when one of
the processes it depends on has ended, and otherwise gives up only after a limit sized for a
loaded machine, saying what it waited for and what it saw last.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

START_LIMIT_S = 600.0
"""How long a start may take while its processes run. MLflow's server answered after 22 s on two
idle cores and after 130 s on two cores shared with six busy processes; a wait whose processes
exit ends at once, so a generous limit costs only a hung start's time."""
LOG_TAIL_LINES = 15


class ServiceError(RuntimeError):
    """A process did not start or a service is not reachable; the message says which, what was
    waited for, what was seen last, and where the log is."""


@dataclass(frozen=True)
class Seen:
    """One answer of the service: whether it is ready, and what it said, in words."""

    ready: bool
    said: str


@dataclass(frozen=True)
class Watched:
    """A process a wait depends on: its name, whether it still runs, and its log."""

    name: str
    running: Callable[[], bool]
    log: Path | None = None

    @classmethod
    def child(cls, name: str, process: subprocess.Popen[Any], log: Path | None = None) -> Watched:
        """A process this one started: running until it exits."""
        return cls(name, lambda: process.poll() is None, log)

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def wait_until_ready(
    what: str,
    look: Callable[[], Seen | bool],
    watched: Sequence[Watched],
    limit_s: float = START_LIMIT_S,
    every_s: float = 1.0,
) -> float:
    """Ask ``look`` every ``every_s`` seconds until the service is ready; the seconds it took.

    ``look`` answers a :class:`Seen` or a bool; an exception it raises (refused, timed out, not
    JSON yet) counts as not ready and is what was seen. Raises :class:`ServiceError` at once when
    a ``watched`` process has ended (naming it, with its log's last lines), or when ``limit_s``
    passed, naming ``what`` was waited for, what was seen last and since when.
    """
    started = time.monotonic()
    said, since = "nothing yet", 0.0
    while True:
        seen = _ask(look)
        elapsed = time.monotonic() - started
        if seen.ready:
            return elapsed
        if seen.said != said:
            said, since = seen.said, elapsed
        ended = [w for w in watched if not w.running()]
        if ended:
            raise ServiceError(
                _report(
                    f"{ended[0].name} exited after {elapsed:.0f} s while waiting for {what}; "
                    f"last seen: {said}",
                    ended,
                )
            )
        if elapsed >= limit_s:
            raise ServiceError(
                _report(
                    f"waited {elapsed:.0f} s for {what}; last seen: {said} (since {since:.0f} s)",
                    watched,
                )
            )
        time.sleep(every_s)


def _ask(look: Callable[[], Seen | bool]) -> Seen:
    try:
        answer = look()
    except Exception as exc:  # a service still starting answers with errors of every kind
        return Seen(False, f"{type(exc).__name__}: {exc}")
    if isinstance(answer, Seen):
        return answer
    return Seen(bool(answer), "not ready")


def _report(headline: str, processes: Sequence[Watched]) -> str:
    parts = [headline]
    for process in processes:
        if process.log is not None:
            parts.append(f"--- {process.name} (log: {process.log})\n{process.tail()}")
    return "\n".join(parts)
