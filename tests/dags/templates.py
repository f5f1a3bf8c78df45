"""Templates of a task's fields as the task renders them when it runs."""

from typing import Any


def rendered(template: str, **params: Any) -> str:
    """``template`` rendered with a run's ``params`` (Airflow renders a task's template fields
    with the run's Params in a sandboxed Jinja environment)."""
    from jinja2.sandbox import SandboxedEnvironment

    return SandboxedEnvironment().from_string(template).render(params=params)
