"""The drift statistics the monitor calibrates, computed row by row over count matrices."""

import math

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon

from pipeline_steps.quality.calibration import EPS, js_rows, psi_rows


def test_psi_and_js_known_values() -> None:
    assert psi_rows(np.array([[50, 50]]), np.array([[50, 50]])).tolist() == [0.0]
    expected = (0.9 - 0.5) * math.log(0.9 / 0.5) + (0.1 - 0.5) * math.log(0.1 / 0.5)
    assert psi_rows(np.array([[50, 50]]), np.array([[90, 10]]))[0] == pytest.approx(expected)
    assert js_rows(np.array([[5, 5]]), np.array([[1, 1]])).tolist() == [0.0]
    assert js_rows(np.array([[1, 0]]), np.array([[0, 1]]))[0] == pytest.approx(1.0)  # base 2


def test_an_empty_bin_keeps_psi_finite() -> None:
    value = psi_rows(np.array([[100, 0]]), np.array([[50, 50]]))[0]
    expected = (0.5 - 1) * math.log(0.5 / 1) + (0.5 - EPS) * math.log(0.5 / EPS)
    assert math.isfinite(value) and value == pytest.approx(expected)


def test_each_row_pair_is_compared_on_its_own() -> None:
    reference = np.array([[50, 50], [50, 50], [10, 90]])
    current = np.array([[50, 50], [90, 10], [10, 90]])
    together = psi_rows(reference, current)
    alone = [psi_rows(reference[i : i + 1], current[i : i + 1])[0] for i in range(3)]
    assert together.tolist() == pytest.approx(alone)
    assert together[0] == together[2] == 0.0 and together[1] > 0


def test_js_is_scipys_base_2_distance_and_never_nan() -> None:
    rng = np.random.default_rng(0)
    reference = rng.integers(0, 5000, (50, 16))
    current = rng.integers(0, 5000, (50, 16))
    expected = [jensenshannon(p, q, base=2) for p, q in zip(reference, current, strict=True)]
    assert js_rows(reference, current).tolist() == pytest.approx(expected, rel=1e-9)
    # nearly equal large counts: the divergence is rounding noise, the distance stays a number
    nearly = js_rows(np.array([[57_000_000, 6_000_000]]), np.array([[57_000_001, 6_000_000]]))
    assert not np.isnan(nearly).any() and nearly[0] == pytest.approx(0.0, abs=1e-6)
