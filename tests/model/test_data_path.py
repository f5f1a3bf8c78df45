"""The streamed data path: arrow and pandas preprocessing agree, ranks split rows exactly."""

from pathlib import Path

import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from pipeline_steps.steps.train.data import OOV, Preprocessor, TrainingTable, epoch_batches

CATEGORICAL, NUMERIC = ["carrier", "origin"], ["distance", "temp"]


def _frame(rows: int = 3000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    temp = rng.normal(60, 10, rows)
    temp[rng.random(rows) < 0.1] = np.nan
    return pd.DataFrame(
        {
            "carrier": rng.choice(["UA", "AA", "B6", "DL"], rows).astype(object),
            "origin": rng.choice(["EWR", "JFK", "LGA"], rows).astype(object),
            "distance": rng.integers(80, 5000, rows).astype(float),
            "temp": temp,
            "delayed": rng.integers(0, 2, rows),
        }
    )


def _table(tmp_path: Path, frame: pd.DataFrame, group_rows: int = 256) -> TrainingTable:
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pandas(frame), path, row_group_size=group_rows)
    columns = [*CATEGORICAL, *NUMERIC, "delayed"]
    return TrainingTable(str(path), fsspec.filesystem("file"), columns, 13, 0.1)


def test_arrow_and_pandas_preprocessing_agree_with_unknowns_and_missing() -> None:
    pre = Preprocessor.fit(_frame(), CATEGORICAL, NUMERIC)
    rows = pd.DataFrame(
        {
            "carrier": ["UA", "ZZ", None, "DL"],  # unknown and missing → out of vocabulary
            "origin": ["JFK", "JFK", "EWR", "XXX"],
            "distance": [100.0, None, 2500.0, 4000.0],
            "temp": [50.0, 70.0, None, 10.0],
        }
    )
    codes, numeric = pre.transform(rows)
    chunked = pa.concat_tables(
        [pa.Table.from_pandas(rows.iloc[:2]), pa.Table.from_pandas(rows.iloc[2:])]
    )
    arrow_codes, arrow_numeric = pre.transform_arrow(chunked)
    assert torch.equal(codes, arrow_codes) and torch.allclose(numeric, arrow_numeric)
    assert codes[1, 0] == OOV and codes[2, 0] == OOV and codes[3, 1] == OOV
    assert numeric[1, 0] == 0 and numeric[1, len(NUMERIC)] == 1  # missing: 0 and its flag


def test_streamed_fit_equals_a_fit_on_the_whole_frame(tmp_path: Path) -> None:
    frame = _frame()
    table = _table(tmp_path, frame)
    groups = list(range(len(table.group_rows)))
    streamed = Preprocessor.fit(table.frames(groups, validation=False), CATEGORICAL, NUMERIC)
    fitting = pa.concat_tables(table.frames(groups, validation=False)).to_pandas()
    whole = Preprocessor.fit(fitting, CATEGORICAL, NUMERIC)
    assert streamed.vocabularies == whole.vocabularies
    for c in NUMERIC:
        assert np.isclose(streamed.means[c], fitting[c].mean())
        assert np.isclose(streamed.stds[c], fitting[c].std(ddof=0))
        assert np.isclose(streamed.stds[c], whole.stds[c])


def test_ranks_read_disjoint_shards_that_cover_an_epoch(tmp_path: Path) -> None:
    frame = _frame()
    frame["distance"] = np.arange(len(frame), dtype=float)  # a row id that survives scaling
    table = _table(tmp_path, frame)
    pre = Preprocessor(
        categorical=CATEGORICAL,
        numeric=NUMERIC,
        vocabularies={"carrier": ["AA"], "origin": ["EWR"]},
        means={"distance": 0.0, "temp": 0.0},
        stds={"distance": 1.0, "temp": 1.0},
    )

    def rows(rank: int, world: int, epoch: int) -> list[int]:
        batches = epoch_batches(
            table,
            pre,
            "delayed",
            batch_size=32,
            epoch=epoch,
            rank=rank,
            world_size=world,
            shuffle_buffer=512,
        )
        return [int(v) for b in batches for v in b.numeric[:, 0]]

    fitting = sum(table.fit_rows)
    one = rows(0, 1, 0)
    assert len(one) == fitting // 32 * 32 and len(set(one)) == len(one)
    first, second = rows(0, 2, 0), rows(1, 2, 0)
    assert len(first) == len(second) == table.steps_per_epoch(0, 32, 2) * 32
    # each rank's own rows are distinct; the shards overlap only where a rank tops up
    assert len(set(first) & set(second)) <= 32 * 2
    assert len(set(first) | set(second)) >= fitting - 64
    assert rows(0, 1, 1) != one  # a new order each epoch
    assert rows(0, 1, 0) == one  # the same order for the same epoch and seed
    # a resumed epoch continues exactly: skipping k batches yields the rest
    skipped = epoch_batches(
        table, pre, "delayed", batch_size=32, epoch=0, skip=5, shuffle_buffer=512
    )
    assert [int(v) for b in skipped for v in b.numeric[:, 0]] == one[5 * 32 :]


def test_a_rank_dealt_a_small_row_group_tops_up_until_the_ranks_agree(tmp_path: Path) -> None:
    frame = _frame(2100)
    frame["distance"] = np.arange(len(frame), dtype=float)
    table = _table(tmp_path, frame, group_rows=1000)  # row groups of 1000, 1000 and 100 rows
    pre = Preprocessor(
        categorical=CATEGORICAL,
        numeric=NUMERIC,
        vocabularies={"carrier": ["AA"], "origin": ["EWR"]},
        means={"distance": 0.0, "temp": 0.0},
        stds={"distance": 1.0, "temp": 1.0},
    )
    epoch = next(e for e in range(100) if table.epoch_groups(e, 1, 2) == [2])
    steps = table.steps_per_epoch(epoch, 32, 2)
    small = [
        int(v)
        for b in epoch_batches(
            table, pre, "delayed", batch_size=32, epoch=epoch, rank=1, world_size=2
        )
        for v in b.numeric[:, 0]
    ]
    assert steps * 32 > 10 * table.fit_rows[2]  # far more than two passes over the shard
    assert len(small) == steps * 32  # in step with rank 0
    assert set(small) == set(range(2000, 2100)) - {
        2000 + i for i in np.flatnonzero(table.is_validation(2))
    }
