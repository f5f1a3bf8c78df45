"""Metrics per slice of the holdout (a value of a column: a carrier, an origin airport, a band
of departure hours), for the challenger and the champion."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline_steps.core.manifests import SliceResult, SliceScores
from pipeline_steps.evaluation.bootstrap import paired_differences
from pipeline_steps.evaluation.metrics import log_loss, roc_auc

SLICE_METRICS = ("auc", "log_loss")


def _scores(labels: np.ndarray, probabilities: np.ndarray) -> SliceScores:
    return SliceScores(
        auc=round(roc_auc(labels, probabilities), 6),
        log_loss=round(log_loss(labels, probabilities), 6),
    )


def slice_results(
    slices: pd.DataFrame,
    labels: np.ndarray,
    challenger: np.ndarray,
    champion: np.ndarray | None,
    *,
    min_rows: int,
    resamples: int,
    confidence: float,
    seed: int,
) -> list[SliceResult]:
    """One result per value of each column of ``slices`` (rows aligned with ``labels`` and the
    predictions; missing values form the slice ``<missing>``), largest slices first within a
    column. Slices of at least ``min_rows`` rows with both classes get paired-bootstrap
    intervals of challenger minus champion."""
    results: list[SliceResult] = []
    y = np.asarray(labels)
    for column in slices.columns:
        values = slices[column].astype("string").fillna("<missing>").to_numpy()
        names, counts = np.unique(values, return_counts=True)
        for value in names[np.argsort(-counts, kind="stable")]:
            rows = values == value
            ys = y[rows]
            positives = int(ys.sum())
            differences = {}
            if champion is not None and rows.sum() >= min_rows and 0 < positives < len(ys):
                differences = paired_differences(
                    ys,
                    challenger[rows],
                    champion[rows],
                    resamples=resamples,
                    confidence=confidence,
                    seed=seed,
                    metrics=SLICE_METRICS,
                )
            results.append(
                SliceResult(
                    column=str(column),
                    value=str(value),
                    rows=int(rows.sum()),
                    positives=positives,
                    challenger=_scores(ys, challenger[rows]),
                    champion=_scores(ys, champion[rows]) if champion is not None else None,
                    differences=differences,
                )
            )
    return results
