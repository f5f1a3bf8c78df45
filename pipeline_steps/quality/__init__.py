"""Data quality: Great Expectations suites, chunked validation, custom expectations, the drift
monitor's calibrated statistics.

A library of the steps: imports :mod:`pipeline_steps.core` and the sources of
:mod:`pipeline_steps.domain` (to check a file by hand); the steps, orchestration and the
commands import it.
"""
