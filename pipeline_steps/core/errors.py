"""The errors a user sees: each names the file, setting, partition or step that is wrong.

A failed step's exit code carries its failure class, so the orchestrator retries only what a
retry can fix:

- ``EXIT_PERMANENT`` (2): bad data (a failed suite, a quarantined or unreadable partition), bad
  configuration, a refused request. Retrying gives the same answer; the task fails at once.
- ``EXIT_TRANSIENT`` (75, ``EX_TEMPFAIL``): a refused or dropped connection to MLflow, the
  database or the object store. Retried with backoff.
- ``EXIT_EMPTY_DAY`` (3): the day holds no row of the labelled dataset in a domain where that
  is ordinary (``domain.empty_days: skip``). Not a failure: the task ends skipped, and so does
  the rest of the run.
- Anything else (a killed process, a preempted pod, an unexpected crash) is retried too; the
  train step resumes from its newest checkpoint.
"""

from __future__ import annotations

import re
from typing import Literal

EXIT_PERMANENT = 2
EXIT_TRANSIENT = 75
EXIT_EMPTY_DAY = 3
FailureClass = Literal["permanent", "transient"]
EMPTY_DAY_LINE = re.compile(r"trainyard (?:step )?\S+ skipped \(empty day\)")
"""The line a step ending on an ordinary empty day prints last on stderr."""
FAILURE_LINE = re.compile(r"trainyard (?:step )?\S+ failed \((permanent|transient)\)")
"""The line a failed step prints last on stderr: ``trainyard step <name> failed (<class>): ...``.
torchrun reports its own exit code, not its workers': the orchestrator reads this line."""


class StepError(RuntimeError):
    """A step cannot go on; the message says what is wrong and where, for the task log."""


class EmptyDay(StepError):
    """The day has no row of the labelled dataset, and the domain says that is ordinary
    (``domain.empty_days: skip``): the run ends skipped, nothing is written."""


def is_empty_day(exit_code: int, output: list[str]) -> bool:
    """Whether a step ended on an ordinary empty day (its exit code, or its last line under
    torchrun or in a pod's termination message)."""
    return exit_code == EXIT_EMPTY_DAY or any(
        EMPTY_DAY_LINE.search(line.strip()) for line in output[-5:]
    )


class TransientError(RuntimeError):
    """A service the step needs is unreachable for now; a retry may succeed."""


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` or an exception it was raised from is a connection-level failure."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, TransientError | ConnectionError | TimeoutError):
            return True
        name = f"{type(current).__module__}.{type(current).__name__}"
        if name in _TRANSIENT_TYPES or _transient_http(current):
            return True
        current = current.__cause__ or current.__context__
    return False


# Named, not imported: the CLI classifies errors without loading these libraries.
_TRANSIENT_TYPES = {
    "requests.exceptions.ConnectionError",
    "requests.exceptions.Timeout",
    "requests.exceptions.ConnectTimeout",
    "requests.exceptions.ReadTimeout",
    "urllib3.exceptions.MaxRetryError",
    "urllib3.exceptions.NewConnectionError",
    "sqlalchemy.exc.OperationalError",
    "sqlalchemy.exc.DisconnectionError",
    "botocore.exceptions.EndpointConnectionError",
}


def _transient_http(exc: BaseException) -> bool:
    """An MLflow REST error with a 5xx or 429 status (a server restarting or overloaded)."""
    status = getattr(exc, "get_http_status_code", None)
    try:
        code = int(status()) if callable(status) else 0
    except (TypeError, ValueError):
        return False
    return code == 429 or 500 <= code < 600


def failure_class(exit_code: int, output: list[str]) -> FailureClass:
    """How the orchestrator treats a failed step: ``permanent`` (fail at once) when the step
    exited 2 or said so in its failure line, else ``transient`` (retry)."""
    if exit_code == EXIT_PERMANENT:
        return "permanent"
    for line in reversed(output):
        found = FAILURE_LINE.search(line.strip())
        if found:
            return "permanent" if found.group(1) == "permanent" else "transient"
    return "transient"
