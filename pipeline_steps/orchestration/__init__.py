"""The Airflow-facing layer: the runner factory the DAG files call. The only package that imports
Airflow; the steps never do."""

from pipeline_steps.orchestration.runners import step_task

__all__ = ["step_task"]
