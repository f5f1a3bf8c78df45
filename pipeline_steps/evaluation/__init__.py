"""Evaluation: holdout metrics and their directions, paired-bootstrap intervals, slices,
baselines, the gate, the HTML report and the champion's history. Mostly pure functions over
arrays and frames; the evaluate and promote steps call them.

A library of the steps: imports only :mod:`pipeline_steps.core`; the steps, orchestration and
the commands import it.
"""
