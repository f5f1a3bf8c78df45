from pathlib import Path

import pyarrow as pa
import pytest

from pipeline_steps.lake import Lake, safe_run_key, table_sha256


def test_staged_dir_replaces_whole_or_not_at_all(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path))
    with lake.staged_dir("raw/x/date=2013-01-01") as tmp:
        Path(tmp, "data.txt").write_text("v1")
    with pytest.raises(RuntimeError), lake.staged_dir("raw/x/date=2013-01-01") as tmp:
        Path(tmp, "data.txt").write_text("half-written v2")
        raise RuntimeError("writer died")
    assert (tmp_path / "raw/x/date=2013-01-01/data.txt").read_text() == "v1"
    assert [p.name for p in (tmp_path / "raw/x").iterdir()] == ["date=2013-01-01"]


def test_table_hash_depends_on_content_not_metadata() -> None:
    table = pa.table({"a": [1, 2], "b": ["x", "y"]})
    same = table.replace_schema_metadata({"pandas": "ignored"})
    assert table_sha256(table) == table_sha256(same)
    assert table_sha256(table) != table_sha256(pa.table({"a": [1, 3], "b": ["x", "y"]}))


def test_run_keys_are_path_safe() -> None:
    assert safe_run_key("manual__2013-06-01T00:00:00+00:00") == "manual__2013-06-01T00_00_00_00_00"
