"""The pipeline steps: one module (or package) per step, pure functions of a run context, and
:mod:`~pipeline_steps.steps.registry`, a step's function by name (the steps are declared in
:mod:`pipeline_steps.core.step_registry`).

Steps import the foundation, the domain and the libraries (quality, evaluation, tuning), never
Airflow or a command; orchestration and the commands import the steps through the registry.
"""
