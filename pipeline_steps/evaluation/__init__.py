"""Evaluation: holdout metrics with paired-bootstrap intervals, slices, baselines, the gate and
the HTML report. Pure functions over arrays and frames; the evaluate and promote steps call
them."""
