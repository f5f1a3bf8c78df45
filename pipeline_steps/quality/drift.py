"""Drift of a day's partitions against a reference window, measured on every run.

Numeric features: PSI over bins placed at reference quantiles. Categorical features:
Jensen-Shannon distance (base 2). Every feature: the change in its share of missing values.
Partitions are read in record batches and reduced to histograms, so the cost is linear in rows
and memory is bounded by the batch size, the reference sample and the number of categories.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import date
from functools import cache
from typing import Any

import jinja2
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from scipy.spatial.distance import jensenshannon

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.lake import MANIFEST, Lake
from pipeline_steps.core.manifests import DriftSummary
from pipeline_steps.core.settings import DriftSettings

log = logging.getLogger(__name__)
EPS = 1e-4  # floor of a bin's share, so an empty bin does not make PSI infinite


def record_batches(
    lake: Lake, path: str, columns: list[str], rows: int
) -> Iterator[pa.RecordBatch]:
    with lake.fs.open(path, "rb") as fh:
        yield from pq.ParquetFile(fh).iter_batches(batch_size=rows, columns=columns)


@dataclass
class NumericHistogram:
    """Counts over fixed edges plus the missing count; merged batch by batch."""

    edges: np.ndarray
    counts: np.ndarray = field(init=False)
    missing: int = 0

    def __post_init__(self) -> None:
        self.counts = np.zeros(len(self.edges) + 1, dtype=np.int64)

    def add(self, values: pa.Array) -> None:
        self.missing += values.null_count
        present = values.drop_null().to_numpy(zero_copy_only=False).astype(np.float64)
        self.counts += np.bincount(
            np.searchsorted(self.edges, present, side="right"), minlength=len(self.counts)
        )

    @property
    def rows(self) -> int:
        return int(self.counts.sum()) + self.missing


@dataclass
class CategoricalHistogram:
    counts: Counter[str] = field(default_factory=Counter)
    missing: int = 0

    def add(self, values: pa.Array) -> None:
        self.missing += values.null_count
        counted = pc.value_counts(values.drop_null())
        self.counts.update(
            dict(
                zip(
                    counted.field("values").to_pylist(),
                    counted.field("counts").to_pylist(),
                    strict=True,
                )
            )
        )

    @property
    def rows(self) -> int:
        return sum(self.counts.values()) + self.missing


def psi(reference: np.ndarray, current: np.ndarray) -> float:
    """Population stability index of two count vectors over the same bins."""
    r = np.maximum(reference / max(reference.sum(), 1), EPS)
    c = np.maximum(current / max(current.sum(), 1), EPS)
    return float(np.sum((c - r) * np.log(c / r)))


def js_distance(reference: dict[str, int], current: dict[str, int]) -> float:
    """Jensen-Shannon distance (base 2, in [0, 1]) of two category count maps.

    0 when both are empty, 1 when only one is (SciPy would answer NaN for either).
    """
    keys = sorted(set(reference) | set(current))
    p = np.array([reference.get(k, 0) for k in keys], dtype=np.float64)
    q = np.array([current.get(k, 0) for k in keys], dtype=np.float64)
    if p.sum() == 0 or q.sum() == 0:
        return 0.0 if p.sum() == q.sum() else 1.0
    # For nearly equal distributions rounding can leave the divergence a hair below zero,
    # whose square root SciPy returns as NaN: that is a distance of 0.
    with np.errstate(invalid="ignore"):
        distance = float(jensenshannon(p, q, base=2))
    return 0.0 if math.isnan(distance) else distance


def _reference_edges(lake: Lake, paths: list[str], column: str, cfg: DriftSettings) -> np.ndarray:
    """Bin edges at reference quantiles, from a seeded uniform sample of bounded size.

    Bottom-k sampling: every value gets a random key and the k smallest keys are kept, which is
    a uniform sample without replacement however the values arrive in batches.
    """
    rng = np.random.default_rng(0)
    sample, keys = np.empty(0), np.empty(0)
    for path in paths:
        for batch in record_batches(lake, path, [column], cfg.batch_rows):
            values = batch.column(0).drop_null().to_numpy(zero_copy_only=False).astype(float)
            sample = np.concatenate([sample, values])
            keys = np.concatenate([keys, rng.random(len(values))])
            if len(sample) > cfg.sample_size:
                keep = np.argpartition(keys, cfg.sample_size)[: cfg.sample_size]
                sample, keys = sample[keep], keys[keep]
    if not len(sample):
        return np.array([0.0])
    quantiles = np.quantile(sample, np.linspace(0, 1, cfg.bins + 1)[1:-1])
    return np.unique(quantiles)


def _histogram(lake: Lake, paths: list[str], column: str, hist: Any, rows: int) -> Any:
    for path in paths:
        for batch in record_batches(lake, path, [column], rows):
            hist.add(batch.column(0))
    return hist


def measure(
    lake: Lake, reference: dict[str, list[str]], current: dict[str, str], cfg: DriftSettings
) -> dict[str, Any]:
    """Per-feature drift of ``current`` (dataset → file) against ``reference`` (dataset → files)."""
    features: dict[str, Any] = {}
    for kind, names in (("numeric", cfg.numeric), ("categorical", cfg.categorical)):
        for name in names:
            dataset, column = name.split(".")
            if dataset not in current or not reference.get(dataset):
                continue
            ref_paths, cur_paths = reference[dataset], [current[dataset]]
            if kind == "numeric":
                edges = _reference_edges(lake, ref_paths, column, cfg)
                ref = _histogram(lake, ref_paths, column, NumericHistogram(edges), cfg.batch_rows)
                cur = _histogram(lake, cur_paths, column, NumericHistogram(edges), cfg.batch_rows)
                value, threshold = psi(ref.counts, cur.counts), cfg.psi_threshold
                detail = {
                    "edges": edges.round(4).tolist(),
                    "reference": ref.counts.tolist(),
                    "current": cur.counts.tolist(),
                }
            else:
                ref = _histogram(lake, ref_paths, column, CategoricalHistogram(), cfg.batch_rows)
                cur = _histogram(lake, cur_paths, column, CategoricalHistogram(), cfg.batch_rows)
                value, threshold = js_distance(ref.counts, cur.counts), cfg.js_threshold
                top = [k for k, _ in (ref.counts + cur.counts).most_common(20)]
                detail = {
                    "categories": top,
                    "reference": [ref.counts.get(k, 0) for k in top],
                    "current": [cur.counts.get(k, 0) for k in top],
                }
            missing_ref = ref.missing / max(ref.rows, 1)
            missing_cur = cur.missing / max(cur.rows, 1)
            missing_delta = abs(missing_cur - missing_ref)
            statistic = "psi" if kind == "numeric" else "js_distance"
            crossed = []
            if value > threshold:
                crossed.append(statistic)
            if missing_delta > cfg.missing_threshold:
                crossed.append("missing_share")
            features[name] = {
                "kind": kind,
                "statistic": statistic,
                "value": round(value, 6),
                "threshold": threshold,
                "missing_reference": round(missing_ref, 6),
                "missing_current": round(missing_cur, 6),
                "missing_delta": round(missing_delta, 6),
                "crossed": crossed,
                "drifted": bool(crossed),
                **detail,
            }
    crossed_features = sorted(n for n, f in features.items() if f["drifted"])
    return {
        "features": features,
        "drift_detected": bool(crossed_features),
        "crossed": crossed_features,
    }


def reference_days(
    lake: Lake, day: date, cfg: DriftSettings, window: tuple[date, date] | None, dataset: str
) -> tuple[list[date], str]:
    """The champion's training window if known, else the trailing validated days before D
    (days on which the labelled ``dataset`` was validated)."""
    validated = lake.partition_dates("validated", dataset)
    if window is not None:
        days = [d for d in validated if window[0] <= d <= window[1] and d < day]
        if days:
            return days, "champion training window"
    trailing = [d for d in validated if d < day][-cfg.reference_days :]
    return trailing, f"trailing {cfg.reference_days} validated days"


def report_html(report: dict[str, Any]) -> str:
    """A page with the per-feature table and a bar chart per feature (inline SVG), rendered
    from ``templates/drift.html.j2``; names and categories from the data are escaped."""
    charts = {}
    for name, f in report["features"].items():
        if f["kind"] == "categorical":
            labels = f["categories"]
        else:
            labels = [f"≤{e:g}" for e in f["edges"]] + ["more"]
        charts[name] = _chart(labels, f["reference"], f["current"])
    return _template().render(report=report, charts=charts)


@cache
def _template() -> jinja2.Template:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("pipeline_steps.quality", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return environment.get_template("drift.html.j2")


def _chart(labels: list[str], reference: list[int], current: list[int]) -> dict[str, Any]:
    """Bars of the reference and current shares per bin, scaled to the tallest share."""
    ref = np.array(reference, dtype=float) / max(sum(reference), 1)
    cur = np.array(current, dtype=float) / max(sum(current), 1)
    top = max(ref.max(initial=0), cur.max(initial=0), 1e-9)
    width, height, slot = 40, 120, 44
    slots = []
    for i, label in enumerate(labels):
        bars = []
        for offset, share, css in ((0, ref[i], "ref"), (width / 2, cur[i], "cur")):
            h = height * share / top
            bars.append({"css": css, "x": i * slot + offset, "y": height - h, "height": h})
        slots.append({"x": i * slot, "label": label[:8], "bars": bars})
    return {
        "width": len(labels) * slot,
        "height": height + 20,
        "bar_width": width / 2 - 2,
        "label_y": height + 14,
        "slots": slots,
    }


def champion_window(ctx: RunContext) -> tuple[date, date] | None:
    """First and last training day of the current champion, as its MLflow run recorded them."""
    from pipeline_steps.core.tracking import champion_version, connect

    client = connect(ctx.settings.mlflow)
    version = champion_version(client, ctx.settings.mlflow)
    if version is None or not version.run_id:
        return None
    tags = client.get_run(version.run_id).data.tags
    if "trainyard.train_first_day" not in tags:
        return None
    return (
        date.fromisoformat(tags["trainyard.train_first_day"]),
        date.fromisoformat(tags["trainyard.train_last_day"]),
    )


def drift_report(ctx: RunContext) -> DriftSummary:
    """Measure drift of D's partitions and store ``reports/drift/date=D/drift.{json,html}``."""
    lake, day, domain = ctx.lake, ctx.logical_date, ctx.domain
    cfg = replace(
        ctx.settings.drift,
        numeric=ctx.settings.drift.numeric or domain.drift_numeric,
        categorical=ctx.settings.drift.categorical or domain.drift_categorical,
    )
    days, source = reference_days(lake, day, cfg, champion_window(ctx), domain.labelled_dataset)
    datasets = {name.split(".")[0] for name in (*cfg.numeric, *cfg.categorical)}
    datasets &= set(ctx.datasets)
    current = {d: lake.path(Lake.partition("validated", d, day), "data.parquet") for d in datasets}
    reference = {
        d: [
            lake.path(Lake.partition("validated", d, r), "data.parquet")
            for r in days
            if lake.exists(Lake.partition("validated", d, r), MANIFEST)
        ]
        for d in datasets
    }
    measured = measure(lake, reference, current, cfg)
    report = {
        "logical_date": day.isoformat(),
        "reference": {"source": source, "days": [d.isoformat() for d in days]},
        **measured,
    }
    folder = f"reports/drift/date={day.isoformat()}"
    lake.write_json(report, folder, "drift.json")
    lake.write_bytes(report_html(report).encode(), folder, "drift.html")
    if report["drift_detected"]:
        log.warning("drift on %s: %s", day, ", ".join(report["crossed"]))
    return DriftSummary(
        drift_detected=report["drift_detected"],
        crossed=report["crossed"],
        reference=source,
        values={n: f["value"] for n, f in report["features"].items()},
        report=lake.path(folder, "drift.html"),
    )
