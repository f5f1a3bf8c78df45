"""Drift statistics and the streaming measurement over lake partitions."""

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline_steps.core.lake import Lake
from pipeline_steps.core.settings import DriftSettings
from pipeline_steps.quality.drift import js_distance, measure, psi, report_html

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


def test_the_report_page_shows_every_feature_and_escapes_names() -> None:
    numeric = {
        "kind": "numeric",
        "statistic": "psi",
        "value": 0.31234,
        "threshold": 0.2,
        "missing_reference": 0.0,
        "missing_current": 0.25,
        "crossed": ["psi", "missing_share"],
        "drifted": True,
        "edges": [-1.5, 0.0, 2.25],
        "reference": [10, 20, 30, 40],
        "current": [40, 30, 20, 10],
    }
    categorical = {
        **numeric,
        "kind": "categorical",
        "statistic": "js_distance",
        "value": 0.01,
        "threshold": 0.1,
        "missing_current": 0.0,
        "crossed": [],
        "drifted": False,
        "categories": ["<b>AA</b>", "B&B"],
        "reference": [3, 1],
        "current": [1, 3],
    }
    page = report_html(
        {
            "logical_date": "2013-06-02",
            "reference": {
                "source": "champion training window",
                "days": ["2013-05-03", "2013-05-31"],
            },
            "features": {"d.x": numeric, "d.<c>": categorical},
            "drift_detected": True,
            "crossed": ["d.x"],
        }
    )
    assert "<title>Drift 2013-06-02</title>" in page
    assert "champion training window, 2 day(s)\n2013-05-03, 2013-05-31." in page
    assert "Drift detected: <b>yes</b>\n(d.x)</p>" in page
    assert "<tr class='drift'><td>d.x</td><td>psi</td>" in page
    assert "<td>0.3123</td><td>0.2</td>" in page and "<td>0.000 → 0.250</td>" in page
    assert "<tr class='ok'><td>d.&lt;c&gt;</td>" in page
    # names and categories are escaped, never markup
    assert "<b>AA" not in page and "&lt;b&gt;AA&lt;" in page and "B&amp;B" in page
    labels = ["≤-1.5", "≤0", "≤2.25", "more", "&lt;b&gt;AA&", "B&amp;B"]
    assert [f">{label}" in page for label in labels] == [True] * len(labels)
    # bars scale to the tallest share: 40 of 100 rows is the full 120 px
    assert "<rect class='ref' x='132' y='0.0' width='18' height='120.0'/>" in page
    assert page.count("<rect class='cur'") == 4 + 2
