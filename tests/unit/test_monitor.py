"""The calibrated drift signal, the cooldown, the drift event's evidence and the monitor step."""

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.settings import DriftSettings, SettingsError
from pipeline_steps.quality.calibration import (
    INPUTS,
    cooldown_reason,
    measure_window,
    resampled_windows,
    split_windows,
)

DAYS = [date(2013, 3, 1) + timedelta(days=n) for n in range(35)]
CFG = DriftSettings(current_days=7, reference_days=28, calibration_samples=300)


def _rows(days: list[date], rate: float, shift: float, seed: int) -> pd.DataFrame:
    """Flights-like rows: ~900 a day, a weather reading shared by the day's hours, a carrier."""
    rng = np.random.default_rng(seed)
    frames = []
    for day in days:
        n = 900
        daily = rng.normal(shift, 1.0)  # one weather system per day: rows within it move together
        frames.append(
            pd.DataFrame(
                {
                    "flight_date": day.isoformat(),
                    "humid": daily + rng.normal(0, 0.5, n),
                    "carrier": rng.choice(["AA", "B6", "UA"], n, p=[0.3, 0.3, 0.4]),
                    "delayed": (rng.random(n) < rng.normal(rate, 0.03)).astype(int),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def _verdict(current: pd.DataFrame, reference: pd.DataFrame, cfg: DriftSettings = CFG):
    return measure_window(
        reference,
        current,
        reference_days=DAYS[:28],
        day_column="flight_date",
        numeric=["humid"],
        categorical=["carrier"],
        label="delayed",
        importance={"humid": 0.7, "carrier": 0.3},
        cfg=cfg,
    )


def test_ordinary_windows_stay_quiet_where_a_fixed_threshold_always_fires() -> None:
    """Each day's rows share a weather reading: a fixed PSI of 0.2 fires on every window of the
    same distribution, the calibrated threshold on few."""
    from pipeline_steps.quality.calibration import numeric_counts, psi_rows

    alarms, fixed = 0, 0
    for seed in range(20):
        reference = _rows(DAYS[:28], 0.2, 0.0, seed)
        current = _rows(DAYS[28:], 0.2, 0.0, 100 + seed)
        verdict = _verdict(current, reference)
        alarms += verdict.drift_detected
        day_index = np.array([DAYS.index(date.fromisoformat(d)) for d in reference.flight_date])
        per_day, cur = numeric_counts(
            reference.humid.to_numpy(), day_index, current.humid.to_numpy(), 28, 10
        )
        fixed += psi_rows(per_day.sum(axis=0)[None, :], cur[None, :])[0] > 0.2
    assert alarms <= 2, alarms
    assert fixed >= 10, fixed


def test_a_real_shift_crosses_and_names_its_signals() -> None:
    reference = _rows(DAYS[:28], 0.2, 0.0, 1)
    delays_up = _verdict(_rows(DAYS[28:], 0.35, 0.0, 2), reference)
    assert delays_up.drift_detected
    assert [s.name for s in delays_up.crossed] == ["label"]
    label = delays_up.crossed[0]
    assert label.reference == pytest.approx(0.2, abs=0.02) and label.current > 0.3
    assert label.value > label.threshold >= CFG.min_rate_change and label.p_value < 0.01

    humid = _verdict(_rows(DAYS[28:], 0.2, 3.0, 2), reference)
    assert [s.name for s in humid.crossed] == [INPUTS]
    assert [s.name for s in humid.features_crossed] == ["humid"]


def test_features_the_champion_does_not_use_never_trigger() -> None:
    reference = _rows(DAYS[:28], 0.2, 0.0, 1)
    current = _rows(DAYS[28:], 0.2, 3.0, 2)
    verdict = measure_window(
        reference,
        current,
        reference_days=DAYS[:28],
        day_column="flight_date",
        numeric=["humid"],
        categorical=["carrier"],
        label="delayed",
        importance={"humid": 0.01, "carrier": 0.99},
        cfg=CFG,
    )
    assert not verdict.drift_detected
    assert [s.name for s in verdict.features_crossed] == ["humid"]  # reported, no trigger


def test_resampled_windows_hold_distinct_days_in_blocks() -> None:
    windows = resampled_windows(28, 7, 50, 3, seed=0)
    assert windows.shape == (50, 28) and set(windows.sum(axis=1)) == {7}
    assert windows.max() == 1


def test_windows_and_their_errors() -> None:
    reference, current, source = split_windows(DAYS[-1], DAYS, None, CFG)
    assert current == DAYS[28:] and reference == DAYS[:28] and "trailing 28" in source
    champion = DAYS[10:30]
    reference, _, source = split_windows(
        DAYS[-1], DAYS, champion, replace(CFG, min_reference_days=5)
    )
    assert reference == DAYS[10:28] and source == "champion training window"
    with pytest.raises(StepError, match=r"drift\.min_reference_days=14"):
        split_windows(DAYS[10], DAYS, None, CFG)
    with pytest.raises(StepError, match="2013-05-01 has no validated partition"):
        split_windows(date(2013, 5, 1), DAYS, None, CFG)


def test_cooldown_holds_back_a_second_event_and_lets_a_later_one_through() -> None:
    first = datetime(2013, 12, 6, tzinfo=UTC)
    assert cooldown_reason(first, None, 72) is None
    reason = cooldown_reason(first + timedelta(days=1), first, 72)
    assert reason and "drift.cooldown_hours=72" in reason and "24 h" in reason
    assert cooldown_reason(first + timedelta(days=3), first, 72) is None
    assert cooldown_reason(first - timedelta(days=1), first, 72)  # a backfill of the same week
    assert cooldown_reason(first, first, 0) is None


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("current_days", "0", "drift.current_days must be at least 1"),
        ("calibration_quantile", "1.5", "drift.calibration_quantile must be above 0 and below 1"),
        ("cooldown_hours", "-1", "drift.cooldown_hours must not be negative"),
        (
            "triggers",
            "[label, weather]",
            r"drift\.triggers must be one of 'label', 'prediction', 'input', got \['weather'\]",
        ),
    ],
)
def test_bad_drift_settings_name_the_key(key: str, value: str, message: str) -> None:
    from pipeline_steps.core.settings import load_settings

    with pytest.raises(SettingsError, match=message):
        load_settings(overrides=[f"drift.{key}={value}"], environ={})


def test_the_event_extra_carries_the_contract(lake_home: Path, make_settings) -> None:
    """The monitor step on the seeded lake, then the evidence the asset event would carry."""
    import json

    from pipeline_steps.core.context import RunContext
    from pipeline_steps.core.manifests import MonitorManifest, load_manifest
    from pipeline_steps.orchestration.assets import drift_event_extra
    from pipeline_steps.steps.monitor import monitor
    from tests.conftest import HISTORY

    settings = make_settings(
        "drift.current_days=1",
        "drift.min_reference_days=2",
        "drift.min_rate_change=0",
        "drift.min_psi=0",
        "drift.min_js=0",
        "drift.calibration_quantile=0.01",
        home=lake_home,
    )
    day = HISTORY[-1]
    ctx = RunContext(run_id="monitor-test", logical_date=day, settings=settings)
    printed = monitor(ctx)
    recorded = ctx.upstream(MonitorManifest)
    assert recorded.drift_detected == printed.drift_detected
    assert printed.current_days == [day.isoformat()]
    assert printed.reference_days == [d.isoformat() for d in HISTORY[:-1]]
    assert printed.champion is None  # no champion yet: no prediction signal
    assert {s.name for s in printed.signals} >= {"label", INPUTS, "carrier", "temp"}
    assert Path(printed.report).is_file()

    extra = drift_event_extra(printed, "scheduled__2013-06-03")
    assert json.loads(json.dumps(extra)) == extra
    assert extra["logical_date"] == day.isoformat()
    assert extra["report"] == printed.report and extra["monitor_run_id"] == "scheduled__2013-06-03"
    assert [f["name"] for f in extra["features"] if f["trigger"]] == printed.crossed
    assert all({"statistic", "value", "threshold"} <= set(f) for f in extra["features"])
    payload = load_manifest(MonitorManifest, printed.to_json(), "printed line")
    assert payload == printed


def test_the_champions_training_window_is_what_its_run_recorded() -> None:
    from types import SimpleNamespace

    from pipeline_steps.steps.monitor import training_window

    runs = {
        "trained": {
            "trainyard.train_first_day": "2013-05-03",
            "trainyard.train_last_day": "2013-05-31",
        },
        "older": {"mlflow.runName": "trained before the window was tagged"},
    }
    client = SimpleNamespace(
        get_run=lambda run_id: SimpleNamespace(data=SimpleNamespace(tags=runs[run_id]))
    )
    assert training_window(client, "trained") == (date(2013, 5, 3), date(2013, 5, 31))
    assert training_window(client, "older") is None
    assert training_window(client, None) is None and training_window(client, "") is None
