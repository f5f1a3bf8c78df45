"""Optuna tuning: search space files, the study (storage, sampler, pruner, lock), trials
(claim, report, conclude), the best trial and its report.

A library of the steps: imports only :mod:`pipeline_steps.core`; the train step, orchestration
and the commands import it.
"""
