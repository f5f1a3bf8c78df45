"""The pipeline steps: one module (or package) per step, pure functions of a run context, and
:mod:`~pipeline_steps.steps.registry`, the steps by name and the command that runs one.

Steps import the foundation, the domain and the libraries (quality, evaluation, tuning), never
Airflow or a command; orchestration and the commands import the steps through the registry.
"""
