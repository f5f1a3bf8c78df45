"""Schema changes upstream are classified by column and judged by the validation settings."""

import pyarrow as pa
import pytest

from pipeline_steps.core.settings import SettingsError, load_settings
from pipeline_steps.quality.schema_changes import judge, widens

SCHEMA = pa.schema([("a", pa.int32()), ("b", pa.string()), ("c", pa.float64())])


def test_widening_is_told_from_other_type_changes() -> None:
    assert widens(pa.int32(), pa.int64()) and widens(pa.int32(), pa.float64())
    assert widens(pa.string(), pa.large_string()) and widens(pa.float32(), pa.float64())
    assert not widens(pa.int64(), pa.int32()) and not widens(pa.int32(), pa.string())
    assert not widens(pa.int64(), pa.uint64())


def test_each_change_names_its_column_and_follows_the_settings(tmp_path) -> None:
    partition = pa.schema([("c", pa.float64()), ("a", pa.float64()), ("new", pa.int64())])
    settings = load_settings(environ={"TRAINYARD_HOME": str(tmp_path)}).validation
    changes = {
        (c.column, c.change): c.action for c in judge("d", partition, SCHEMA, None, settings)
    }
    assert changes[("new", "added")] == "dropped"
    assert changes[("b", "removed")] == "failed"
    assert changes[("a", "widened")] == "failed"
    assert changes[("c", "reordered")] == "kept"
    relaxed = load_settings(
        overrides=["validation.schema_policy={d.added_columns: fail, d.widened_types: warn}"],
        environ={"TRAINYARD_HOME": str(tmp_path)},
    ).validation
    changes = {(c.column, c.change): c.action for c in judge("d", partition, SCHEMA, None, relaxed)}
    assert changes[("new", "added")] == "failed" and changes[("a", "widened")] == "warned"


def test_a_bad_schema_policy_names_the_key(tmp_path) -> None:
    with pytest.raises(SettingsError, match=r"schema_policy\['d.added_columns'\] must be one of"):
        load_settings(
            overrides=["validation.schema_policy={d.added_columns: keep}"],
            environ={"TRAINYARD_HOME": str(tmp_path)},
        )
