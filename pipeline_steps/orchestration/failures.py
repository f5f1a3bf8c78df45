"""How a failed step's task fails: permanently (no retry) or to be retried, by the step's exit
code and failure line, for the local runner and the step's pod alike."""

from __future__ import annotations

from typing import Any

from pipeline_steps.core.errors import failure_class, is_empty_day


def step_failure(step: str, code: int, output: list[str], reason: str) -> Exception:
    """The exception a failed step's task raises: ``AirflowSkipException`` for an ordinary empty
    day, ``AirflowFailException`` (no retry) for a permanent failure (bad data, bad
    configuration), ``AirflowException`` (retried with backoff) for anything else, see
    ``pipeline_steps.core.errors``."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

    if is_empty_day(code, output):
        return AirflowSkipException(f"step {step}: {reason}")
    if failure_class(code, output) == "permanent":
        return AirflowFailException(
            f"step {step} failed permanently (exit code {code}; not retried): {reason}"
        )
    return AirflowException(f"step {step} exited with code {code} (will be retried): {reason}")


def pod_outcome(remote_pod: Any, container: str) -> tuple[int, str]:
    """The step container's exit code and termination message (-1 and "" when unknown)."""
    statuses = (
        remote_pod.status.container_statuses if remote_pod and remote_pod.status else None
    ) or []
    for status in statuses:
        terminated = status.state.terminated if status.state else None
        if status.name == container and terminated is not None:
            return int(terminated.exit_code), str(terminated.message or "")
    return -1, ""
