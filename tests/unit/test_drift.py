"""Drift statistics and the streaming measurement over lake partitions."""

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline_steps.lake import Lake
from pipeline_steps.quality.drift import js_distance, measure, psi, report_html
from pipeline_steps.settings import DriftSettings

CFG = DriftSettings(numeric=("d.x",), categorical=("d.c",), batch_rows=1000, sample_size=5000)


def test_psi_and_js_known_values() -> None:
    assert psi(np.array([50, 50]), np.array([50, 50])) == 0.0
    expected = (0.9 - 0.5) * math.log(0.9 / 0.5) + (0.1 - 0.5) * math.log(0.1 / 0.5)
    assert psi(np.array([50, 50]), np.array([90, 10])) == pytest.approx(expected)
    assert js_distance({"a": 5, "b": 5}, {"a": 1, "b": 1}) == 0.0
    assert js_distance({"a": 1}, {"b": 1}) == pytest.approx(1.0)  # base 2: disjoint is 1
    assert js_distance({}, {}) == 0.0 and js_distance({"a": 3}, {}) == 1.0


def test_js_distance_is_the_base_2_formula_and_never_nan() -> None:
    rng = np.random.default_rng(0)
    carriers = [f"c{i}" for i in range(16)]
    for _ in range(50):
        ref = dict(zip(carriers, rng.integers(0, 5000, 16).tolist(), strict=True))
        cur = dict(zip(carriers, rng.integers(0, 5000, 16).tolist(), strict=True))
        p = np.array(list(ref.values())) / sum(ref.values())
        q = np.array(list(cur.values())) / sum(cur.values())
        m = (p + q) / 2
        kl = [float(np.sum(a[a > 0] * np.log2(a[a > 0] / m[a > 0]))) for a in (p, q)]
        assert js_distance(ref, cur) == pytest.approx(math.sqrt(sum(kl) / 2), rel=1e-9)
    # nearly equal large counts: the divergence is rounding noise, the distance stays a number
    ref = {"a": 57_000_000, "b": 6_000_000}
    assert js_distance(ref, {**ref, "a": 57_000_001}) == 0.0


def _write(tmp: Path, name: str, x: np.ndarray, c: list[str | None]) -> str:
    path = tmp / f"{name}.parquet"
    pq.write_table(pa.table({"x": x, "c": pa.array(c)}), path, row_group_size=700)
    return str(path)


def test_same_distribution_is_stable_and_a_shift_is_drift(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    lake = Lake(str(tmp_path))
    ref = [
        _write(tmp_path, f"r{i}", rng.normal(0, 1, 4000), list(rng.choice(["a", "b"], 4000)))
        for i in range(3)
    ]
    same = _write(tmp_path, "same", rng.normal(0, 1, 4000), list(rng.choice(["a", "b"], 4000)))
    shifted = _write(tmp_path, "shifted", rng.normal(1.0, 1, 4000), ["c"] * 2000 + [None] * 2000)
    stable = measure(lake, {"d": ref}, {"d": same}, CFG)
    assert not stable["drift_detected"]
    assert stable["features"]["d.x"]["value"] < 0.05
    drifted = measure(lake, {"d": ref}, {"d": shifted}, CFG)
    assert drifted["drift_detected"] and drifted["crossed"] == ["d.c", "d.x"]
    assert drifted["features"]["d.x"]["value"] > CFG.psi_threshold
    assert set(drifted["features"]["d.c"]["crossed"]) == {"js_distance", "missing_share"}
    assert drifted["features"]["d.c"]["missing_current"] == 0.5
    page = report_html(
        {
            "logical_date": "2013-06-01",
            "reference": {"source": "trailing", "days": ["2013-05-31"]},
            **drifted,
        }
    )
    assert "DRIFT" in page and "<svg" in page and "d.x" in page
