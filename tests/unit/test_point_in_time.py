"""The point-in-time join in DuckDB: Feast's answer on real days, Feast's rules on edge cases, and
memory that holds a day at a time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from flight_delay.domain import DOMAIN

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.domain import (
    Domain,
    FeatureColumns,
    ValidatedPartitions,
    cast_features,
    feature_columns,
    read_validated,
)
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.feature_store import join_features, scratch_store, write_sources
from pipeline_steps.core.point_in_time import ViewJoin, joined_batches
from tests.conftest import HISTORY


def test_the_join_equals_feasts_own_on_real_days(lake_home: Path, make_settings) -> None:
    """Every flight of the seeded days gets from DuckDB exactly the weather and plane specs
    Feast's own historical retrieval gives it (the types training uses, ordered by the key)."""
    settings = make_settings(home=lake_home)
    lake = RunContext(run_id="join", logical_date=HISTORY[-1], settings=settings).lake
    labelled, _ = read_validated(lake, DOMAIN.labelled_dataset, HISTORY)
    sources, _ = DOMAIN.feature_sources(lake, HISTORY)
    with scratch_store(settings.features, sources) as store:
        service = store.get_feature_service(DOMAIN.feature_service)
        columns = feature_columns(DOMAIN, service)
        entity_rows = DOMAIN.entity_rows(labelled, settings.features)
        feast = store.get_historical_features(entity_df=entity_rows, features=service).to_df()
    feast = cast_features(feast, columns).sort_values(DOMAIN.key).reset_index(drop=True)
    parts = ValidatedPartitions(lake, DOMAIN.labelled_dataset, HISTORY).by_day()
    ours, ours_columns = join_features(DOMAIN, settings.features, parts, sources)
    assert ours_columns == columns
    assert len(ours) == len(feast) > 2000
    wanted = [*columns.categorical, *columns.numeric, DOMAIN.label]
    pd.testing.assert_frame_equal(
        ours[[DOMAIN.key, *wanted]], feast[[DOMAIN.key, *wanted]], check_dtype=False
    )
    assert ours["temp"].notna().mean() > 0.95 and (ours["manufacturer"] == "<missing>").any()


@dataclass(frozen=True, kw_only=True)
class Tiny(Domain):
    def entity_rows(self, labelled: pd.DataFrame, settings) -> pd.DataFrame:
        return labelled

    def feature_sources(self, lake, days):
        raise NotImplementedError


TINY = Tiny(
    name="tiny",
    datasets=("rows",),
    labelled_dataset="rows",
    schemas={},
    feature_service="s",
    key="id",
    date_column="day",
    label="y",
    row_features=FeatureColumns(categorical=[], numeric=[]),
)
T0 = datetime(2024, 1, 1, 12, tzinfo=UTC)


def _join(tmp_path: Path, entities: pd.DataFrame, source: pd.DataFrame, ttl, created: bool):
    entity_file = tmp_path / "entities.parquet"
    pq.write_table(pa.Table.from_pandas(entities, preserve_index=False), entity_file)
    write_sources(tmp_path, {"v": source})
    join = ViewJoin(
        name="v",
        path=str(tmp_path / "sources" / "v.parquet"),
        join_keys={"station": "station"},
        timestamp_field="event_timestamp",
        created_timestamp_field="created" if created else "",
        ttl=ttl,
        features={"reading": "reading", "label_text": "label_text"},
    )
    columns = FeatureColumns(categorical=["label_text"], numeric=["reading"])
    with joined_batches(
        TINY, [str(entity_file)], [join], columns, scratch=str(tmp_path), memory_limit="64MB"
    ) as reader:
        return reader.read_all().to_pandas().set_index("id")


def test_feasts_rules_ttl_created_timestamp_and_missing_rows(tmp_path: Path) -> None:
    hour = timedelta(hours=1)
    entities = pd.DataFrame(
        {
            "id": ["a", "b", "c", "d", "e"],
            "day": ["2024-01-01"] * 5,
            "event_timestamp": [T0, T0 + 3 * hour, T0 + 3 * hour + timedelta(seconds=1), T0, T0],
            "station": ["s1", "s1", "s1", "s2", "s3"],
            "y": [1, 0, 1, 0, 1],
        }
    )
    source = pd.DataFrame(
        {
            "station": ["s1", "s1", "s1", "s2", "s2"],
            "event_timestamp": [T0 - hour, T0, T0, T0 + hour, T0 - 2 * hour],
            "created": [T0, T0, T0 + hour, T0, T0],
            "reading": [1.0, 2.0, 3.0, 4.0, None],
            "label_text": ["old", "first", "corrected", "future", None],
        }
    )
    rows = _join(tmp_path, entities, source, ttl=3 * hour, created=True)
    # the latest row at or before the event; of two at the same time, the later created
    assert rows.loc["a", "reading"] == 3.0 and rows.loc["a", "label_text"] == "corrected"
    # exactly ttl old is still served (Feast: expiry >= event), a second more is not
    assert rows.loc["b", "reading"] == 3.0
    assert pd.isna(rows.loc["c", "reading"]) and rows.loc["c", "label_text"] == "<missing>"
    # a row after the event is never used; a null value stays missing
    assert pd.isna(rows.loc["d", "reading"]) and rows.loc["d", "label_text"] == "<missing>"
    # no row for the key at all
    assert pd.isna(rows.loc["e", "reading"])
    assert list(rows.index) == sorted(rows.index)
    # without ttl (Feast's zero ttl) a value never expires
    forever = _join(tmp_path, entities, source, ttl=None, created=True)
    assert forever.loc["c", "reading"] == 3.0


def test_a_source_day_with_other_columns_is_refused_by_name(tmp_path: Path) -> None:
    first = pd.DataFrame({"station": ["s1"], "reading": [1.0]})
    other = pd.DataFrame({"station": ["s1"], "reading": ["high"]})
    with pytest.raises(StepError, match=r"offline source v: column 'reading' is string"):
        write_sources(tmp_path, {"v": iter([first, other])})
    renamed = pd.DataFrame({"station": ["s1"], "value": [1.0]})
    with pytest.raises(StepError, match=r"offline source v: a day's rows have columns"):
        write_sources(tmp_path, {"v": iter([first, renamed])})
