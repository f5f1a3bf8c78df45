"""Drift of a window of days against a reference, with thresholds calibrated on the reference.

One day compared with a month always differs: in the shipped binary example a day holds ~1,000
labelled rows but only 3 airports x 24 hourly weather readings, and weather and delays move together
within a day. A fixed PSI threshold therefore fires on almost every day. Here the unit of sampling
is the day:

- the current window is ``current_days`` days ending at D, the reference the days before it;
- each statistic's null distribution comes from resampling the reference itself: windows of
  ``current_days`` reference days are drawn and compared with the remaining reference days, so the
  threshold reflects how far an ordinary window of that size strays (its sample size and the
  day-to-day variation), not an arbitrary constant;
- a signal crosses when its value exceeds both the ``calibration_quantile`` of that null and an
  effect-size floor (``min_psi``, ``min_js``, ``min_rate_change``): significant but tiny shifts do
  not retrain a model;
- signals: every model feature (PSI over reference-quantile bins plus a missing bin, or the
  Jensen-Shannon distance), the champion's score distribution (prediction drift, PSI) and the
  delay rate (label drift, absolute change). Input features count as triggers only when the
  champion is sensitive to them (``min_importance`` of its permutation sensitivity).

Everything works on per-day count matrices, so a resample costs a sum of rows, not a pass over
the data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from typing import Any, Protocol

import numpy as np
import pandas as pd

from pipeline_steps.core.domain import MISSING_CATEGORY as MISSING
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.manifests import DriftSignal, SignalKind, StatisticName
from pipeline_steps.core.settings import DriftSettings
from pipeline_steps.core.tasks import task_spec

EPS = 1e-4  # floor of a bin's share, so an empty bin does not make PSI infinite
PREDICTION = "prediction"
LABEL = "label"
INPUTS = "inputs"
"""The importance-weighted input drift: the one input signal that may trigger."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """Every signal of a window and whether drift crossed the thresholds of a trigger signal."""

    signals: list[DriftSignal]
    triggers: tuple[str, ...]

    @property
    def crossed(self) -> list[DriftSignal]:
        """Trigger signals above their thresholds (``label``, ``prediction``, ``inputs``),
        strongest evidence first."""
        hits = [s for s in self.signals if s.crossed and self.may_trigger(s)]
        return sorted(hits, key=lambda s: (s.p_value, -s.value / max(s.threshold, EPS)))

    def may_trigger(self, signal: DriftSignal) -> bool:
        """Only the weighted ``inputs`` signal speaks for the input features."""
        if signal.kind == "input":
            return signal.name == INPUTS and "input" in self.triggers
        return signal.kind in self.triggers

    @property
    def features_crossed(self) -> list[DriftSignal]:
        """Single input features above their own thresholds (evidence, not triggers)."""
        return [s for s in self.signals if s.crossed and s.kind == "input" and s.name != INPUTS]

    @property
    def drift_detected(self) -> bool:
        return bool(self.crossed)


def split_windows(
    day: date, validated: Sequence[date], champion_days: Sequence[date] | None, cfg: DriftSettings
) -> tuple[list[date], list[date], str]:
    """The current window (``current_days`` validated days ending at ``day``) and the reference:
    the champion's training days before the window when at least ``min_reference_days`` of them
    are, else the ``reference_days`` validated days before the window.

    Raises ``StepError`` naming the setting when ``day`` is not validated or the reference is too
    short to calibrate.
    """
    days = sorted(set(validated))
    if day not in days:
        raise StepError(f"{day} has no validated partition; run ingest and validate first")
    current = [d for d in days if d <= day][-cfg.current_days :]
    start = current[0]
    reference, source = [], ""
    if champion_days:
        reference = sorted(d for d in champion_days if d < start and d in set(days))
        source = "champion training window"
    if len(reference) < cfg.min_reference_days:
        reference = [d for d in days if d < start][-cfg.reference_days :]
        source = f"trailing {cfg.reference_days} validated days"
    if len(reference) < cfg.min_reference_days:
        raise StepError(
            f"only {len(reference)} validated day(s) before the current window {start}..{day}; "
            f"drift.min_reference_days={cfg.min_reference_days} are needed to calibrate the "
            f"thresholds (seed history, e.g. `trainyard seed --start "
            f"{start - timedelta(days=cfg.reference_days)} --end {start - timedelta(days=1)}`)"
        )
    return reference, current, source


# -- per-day counts ---------------------------------------------------------------------------


def _day_index(frame: pd.DataFrame, day_column: str, days: Sequence[date]) -> np.ndarray:
    position = {d.isoformat(): i for i, d in enumerate(days)}
    index = frame[day_column].astype(str).map(position)
    if index.isna().any():
        stray = sorted(set(frame.loc[index.isna(), day_column].astype(str)))[:3]
        raise StepError(f"rows of day(s) {stray} are outside the window's days")
    return index.to_numpy(dtype=np.int64)


def numeric_edges(present: np.ndarray, bins: int) -> np.ndarray:
    """The inner edges of ``bins`` quantile bins of the present (non-NaN) reference values,
    deduplicated (``[0.0]`` when there are none)."""
    if not present.size:
        return np.array([0.0])
    return np.unique(np.quantile(present, np.linspace(0, 1, bins + 1)[1:-1]))


def numeric_bins(edges: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each value's bin over ``edges`` (the number of edges at or below it); a missing value
    the last bin, ``len(edges) + 1``."""
    out = np.searchsorted(edges, values, side="right")
    out[np.isnan(values)] = len(edges) + 1
    return out


def numeric_counts(
    reference: np.ndarray, ref_days: np.ndarray, current: np.ndarray, n_days: int, bins: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per-reference-day counts (days x bins) over reference-quantile bins plus a missing bin,
    and the current window's counts over the same bins."""
    edges = numeric_edges(reference[~np.isnan(reference)], bins)
    width = len(edges) + 2  # bins between edges, then the missing bin
    per_day = np.zeros((n_days, width), dtype=np.int64)
    np.add.at(per_day, (ref_days, numeric_bins(edges, reference)), 1)
    cur = np.bincount(numeric_bins(edges, current), minlength=width)
    return per_day, cur


def category_labels(values: np.ndarray | pd.Series) -> pd.Series:
    """Each value's category: the value as a string, a missing one ``MISSING``."""
    labels = pd.Series(values, dtype=object)
    return labels.where(labels.notna(), MISSING).astype(str)


def categorical_counts(
    reference: np.ndarray, ref_days: np.ndarray, current: np.ndarray, n_days: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per-reference-day counts per category (missing is a category) and the current counts."""
    labels = category_labels(np.concatenate([reference, current]))
    codes, categories = pd.factorize(labels, sort=True)
    ref_codes, cur_codes = codes[: len(reference)], codes[len(reference) :]
    per_day = np.zeros((n_days, len(categories)), dtype=np.int64)
    np.add.at(per_day, (ref_days, ref_codes), 1)
    cur = np.bincount(cur_codes, minlength=len(categories))
    return per_day, cur


# -- statistics over count matrices (rows: compared pairs) ------------------------------------


def psi_rows(reference: np.ndarray, current: np.ndarray) -> np.ndarray:
    """PSI of each row pair of two count matrices over the same bins."""
    r = np.maximum(reference / np.maximum(reference.sum(axis=1, keepdims=True), 1), EPS)
    c = np.maximum(current / np.maximum(current.sum(axis=1, keepdims=True), 1), EPS)
    return np.asarray(np.sum((c - r) * np.log(c / r), axis=1))


def js_rows(reference: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Jensen-Shannon distance (base 2) of each row pair of two count matrices."""
    p = reference / np.maximum(reference.sum(axis=1, keepdims=True), 1)
    q = current / np.maximum(current.sum(axis=1, keepdims=True), 1)
    m = (p + q) / 2

    def kl(a: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(a > 0, a * np.log2(a / np.where(m > 0, m, 1)), 0.0)
        return np.asarray(terms.sum(axis=1))

    return np.sqrt(np.maximum((kl(p) + kl(q)) / 2, 0.0))


def rate_change_rows(reference: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Absolute change of the positive rate; rows are (negatives, positives) counts."""
    r = reference[:, 1] / np.maximum(reference.sum(axis=1), 1)
    c = current[:, 1] / np.maximum(current.sum(axis=1), 1)
    return np.asarray(np.abs(c - r))


Statistic = Callable[[np.ndarray, np.ndarray], np.ndarray]


def resampled_windows(
    n_days: int, size: int, samples: int, block_days: int, seed: int
) -> np.ndarray:
    """``samples`` windows of ``size`` distinct reference days, as a 0/1 matrix (samples x days).

    Days are drawn in runs of ``block_days`` consecutive days (a moving-block bootstrap): weather
    and delays last several days, so a window of consecutive days varies more than as many
    scattered days, and the null must have that structure. Without replacement, so a window is
    compared with reference days it does not contain.
    """
    rng = np.random.default_rng(seed)
    size = min(size, n_days - 1)
    block = max(1, min(block_days, size))
    mask = np.zeros((samples, n_days), dtype=np.int64)
    for row in mask:
        while row.sum() < size:
            start = int(rng.integers(0, n_days - block + 1))
            free = np.flatnonzero(row[start : start + block] == 0)[: size - int(row.sum())]
            row[start + free] = 1
    return mask


def calibrate(
    per_day: np.ndarray, current: np.ndarray, statistic: Statistic, windows: np.ndarray
) -> tuple[float, np.ndarray]:
    """The current window's statistic against the whole reference, and its null distribution:
    the statistic of each resampled window against the rest of the reference."""
    total = per_day.sum(axis=0)
    value = float(statistic(total[None, :], current[None, :])[0])
    drawn = windows @ per_day
    return value, statistic(total[None, :] - drawn, drawn)


def p_value(value: float, null: np.ndarray) -> float:
    """Share of the null at least as large as ``value`` (with the observed window counted)."""
    return (1 + int(np.sum(null >= value))) / (len(null) + 1)


class WindowCounts(Protocol):
    """The per-day counts the drift statistics are computed from, whoever counted them: the
    reference window's counts per day (days x bins) and the current window's (bins), over the
    bins :func:`numeric_counts` and :func:`categorical_counts` define."""

    def columns(self) -> set[str]:
        """The columns both windows have."""
        ...

    def numeric(self, column: str, bins: int) -> tuple[np.ndarray, np.ndarray]:
        """Counts over the reference's quantile bins plus a missing bin."""
        ...

    def categorical(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        """Counts per category (missing is one), categories sorted."""
        ...

    def binary(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        """Counts of a 0/1 column's zeros and ones."""
        ...

    def means(self, column: str) -> tuple[float, float]:
        """The column's mean in the reference and in the current window."""
        ...


@dataclass(frozen=True)
class FrameCounts:
    """:class:`WindowCounts` of two pandas frames (the local engine)."""

    reference: pd.DataFrame
    current: pd.DataFrame
    ref_days: np.ndarray
    n_days: int

    def columns(self) -> set[str]:
        return set(self.reference.columns) & set(self.current.columns)

    def numeric(self, column: str, bins: int) -> tuple[np.ndarray, np.ndarray]:
        ref = self.reference[column].to_numpy().astype(np.float64)
        cur = self.current[column].to_numpy().astype(np.float64)
        return numeric_counts(ref, self.ref_days, cur, self.n_days, bins)

    def categorical(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        ref, cur = self.reference[column].to_numpy(), self.current[column].to_numpy()
        return categorical_counts(ref, self.ref_days, cur, self.n_days)

    def binary(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        ref = self.reference[column].to_numpy().astype(np.int64)
        cur = self.current[column].to_numpy().astype(np.int64)
        per_day = np.zeros((self.n_days, 2), dtype=np.int64)
        np.add.at(per_day, (self.ref_days, ref), 1)
        return per_day, np.bincount(cur, minlength=2)

    def means(self, column: str) -> tuple[float, float]:
        return (
            float(np.mean(self.reference[column].to_numpy().astype(np.float64))),
            float(np.mean(self.current[column].to_numpy().astype(np.float64))),
        )


def measure_window(
    reference: pd.DataFrame,
    current: pd.DataFrame,
    *,
    reference_days: Sequence[date],
    day_column: str,
    numeric: Sequence[str],
    categorical: Sequence[str],
    label: str | None,
    importance: dict[str, float] | None,
    cfg: DriftSettings,
    seed: int = 0,
    task: str = "binary",
) -> Verdict:
    """Every signal of ``current`` (rows of the current window) against ``reference`` (rows of
    ``reference_days``). ``prediction`` is measured when both frames have that column, the label
    when ``label`` is given, each as ``task`` makes sense of it: binary the probability's PSI and
    the positive rate's change; regression the PSI of the predicted values and of the label;
    multiclass the Jensen-Shannon distance of the predicted classes and of the label's classes.

    Input features are judged one by one (each against its own calibrated threshold, reported)
    and together: ``inputs`` is the importance-weighted mean of each feature's statistic over its
    own null quantile, calibrated on the same resampled windows. Only ``inputs`` may trigger, so
    twenty features tested at once do not multiply the false alarms. ``importance`` (feature →
    share of the champion's sensitivity) sets the weights; features below ``min_importance`` get
    none; None weighs every feature equally.
    """
    if reference.empty or current.empty:
        which = "reference" if reference.empty else "current"
        raise StepError(f"the {which} window has no rows to measure drift on")
    days = list(reference_days)
    counts = FrameCounts(reference, current, _day_index(reference, day_column, days), len(days))
    return measure_counts(
        counts,
        reference_days=days,
        numeric=numeric,
        categorical=categorical,
        label=label,
        importance=importance,
        cfg=cfg,
        seed=seed,
        task=task,
    )


def measure_counts(
    counts: WindowCounts,
    *,
    reference_days: Sequence[date],
    numeric: Sequence[str],
    categorical: Sequence[str],
    label: str | None,
    importance: dict[str, float] | None,
    cfg: DriftSettings,
    seed: int = 0,
    task: str = "binary",
) -> Verdict:
    """:func:`measure_window` from the windows' counts (:class:`WindowCounts`), so that the
    engine holding the rows counts them."""
    days = list(reference_days)
    spec = task_spec(task)
    present = counts.columns()
    windows = resampled_windows(
        len(days), cfg.current_days, cfg.calibration_samples, cfg.block_days, seed
    )
    q = cfg.calibration_quantile
    signals: list[DriftSignal] = []

    def column(name: str, kind: str) -> str:
        if name not in present:
            raise StepError(f"drift: the {kind} column {name!r} is missing from the window's rows")
        return name

    def signal(
        name: str,
        kind: SignalKind,
        statistic: StatisticName,
        value: float,
        null: np.ndarray,
        floor: float,
        share: float | None = None,
        **extra: Any,
    ) -> DriftSignal:
        null_q = float(np.quantile(null, q))
        threshold = max(null_q, floor)
        return DriftSignal(
            name=name,
            kind=kind,
            statistic=statistic,
            value=round(value, 6),
            threshold=round(threshold, 6),
            null_quantile=round(null_q, 6),
            p_value=round(p_value(value, null), 6),
            importance=None if share is None else round(share, 4),
            crossed=bool(value > threshold),
            **extra,
        )

    weighted_value, weighted_null, weight_sum = 0.0, np.zeros(len(windows)), 0.0
    for name, kind in [
        *((n, "numeric") for n in numeric),
        *((n, "categorical") for n in categorical),
    ]:
        column(name, kind)
        if kind == "numeric":
            value, null = calibrate(*counts.numeric(name, cfg.bins), psi_rows, windows)
            judged = signal(name, "input", "psi", value, null, cfg.min_psi)
        else:
            value, null = calibrate(*counts.categorical(name), js_rows, windows)
            judged = signal(name, "input", "js_distance", value, null, cfg.min_js)
        share = None if importance is None else importance.get(name, 0.0)
        weight = 1.0 if share is None else (share if share >= cfg.min_importance else 0.0)
        scale = max(judged.threshold, EPS)
        weighted_value += weight * value / scale
        weighted_null += weight * null / scale
        weight_sum += weight
        signals.append(replace(judged, importance=None if share is None else round(share, 4)))
    if weight_sum > 0:
        signals.append(
            signal(
                INPUTS,
                "input",
                "weighted_ratio",
                weighted_value / weight_sum,
                weighted_null / weight_sum,
                cfg.min_weighted_ratio,
            )
        )
    if PREDICTION in present:
        if spec.drifts_on_names:  # the predicted class
            value, null = calibrate(*counts.categorical(PREDICTION), js_rows, windows)
            signals.append(signal(PREDICTION, "prediction", "js_distance", value, null, cfg.min_js))
        else:  # the probability, or the predicted value
            value, null = calibrate(*counts.numeric(PREDICTION, cfg.bins), psi_rows, windows)
            signals.append(signal(PREDICTION, "prediction", "psi", value, null, cfg.min_psi))
    if label is not None and spec.counts_positives:
        per_day, cur = counts.binary(column(label, "label"))
        value, null = calibrate(per_day, cur, rate_change_rows, windows)
        ref_mean, cur_mean = counts.means(label)
        signals.append(
            signal(
                LABEL,
                "label",
                "rate_change",
                value,
                null,
                cfg.min_rate_change,
                reference=round(ref_mean, 4),
                current=round(cur_mean, 4),
            )
        )
    elif label is not None:
        column(label, "label")
        if spec.has_classes:  # the class distribution
            value, null = calibrate(*counts.categorical(label), js_rows, windows)
            statistic, floor = "js_distance", cfg.min_js
        else:  # the label's distribution
            value, null = calibrate(*counts.numeric(label, cfg.bins), psi_rows, windows)
            statistic, floor = "psi", cfg.min_psi
        ref_mean, cur_mean = counts.means(label)
        signals.append(
            signal(
                LABEL,
                "label",
                statistic,  # type: ignore[arg-type]
                value,
                null,
                floor,
                reference=round(ref_mean, 4),
                current=round(cur_mean, 4),
            )
        )
    return Verdict(signals=signals, triggers=tuple(cfg.triggers))


def sensitivity(
    predict: Callable[[pd.DataFrame], np.ndarray],
    rows: pd.DataFrame,
    features: Sequence[str],
    seed: int = 0,
) -> dict[str, float]:
    """Each feature's share of the model's permutation sensitivity on ``rows``: the mean absolute
    change of the predicted probability when that column alone is shuffled, normalised to sum 1.
    """
    rng = np.random.default_rng(seed)
    base = np.asarray(predict(rows), dtype=np.float64)
    moved: dict[str, float] = {}
    for name in features:
        shuffled = rows.copy()
        shuffled[name] = rows[name].to_numpy()[rng.permutation(len(rows))]
        moved[name] = float(np.mean(np.abs(np.asarray(predict(shuffled)) - base)))
    total = sum(moved.values()) or 1.0
    return {name: value / total for name, value in moved.items()}


# -- cooldown and the event's evidence ---------------------------------------------------------


def cooldown_reason(
    logical_time: datetime, last_event_time: datetime | None, cooldown_hours: float
) -> str | None:
    """Why no event may be emitted now, or None: the last drift event's logical time is less than
    ``cooldown_hours`` away (either side, so a re-run or a backfill of a drifting week emits once).
    """
    if last_event_time is None or cooldown_hours <= 0:
        return None
    apart = abs(logical_time - last_event_time)
    if apart < timedelta(hours=cooldown_hours):
        hours = apart.total_seconds() / 3600
        return (
            f"within the cooldown: the last drift event was for {last_event_time.isoformat()}, "
            f"{hours:g} h from {logical_time.isoformat()} (drift.cooldown_hours={cooldown_hours:g})"
        )
    return None
