import re
from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline_steps.core.lake import Discard, Lake, safe_run_key, table_sha256


def test_staged_dir_replaces_whole_or_not_at_all(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path))
    with lake.staged_dir("raw/x/date=2013-01-01") as tmp:
        Path(tmp, "data.txt").write_text("v1")
    with pytest.raises(RuntimeError), lake.staged_dir("raw/x/date=2013-01-01") as tmp:
        Path(tmp, "data.txt").write_text("half-written v2")
        raise RuntimeError("writer died")
    assert (tmp_path / "raw/x/date=2013-01-01/data.txt").read_text() == "v1"
    assert [p.name for p in (tmp_path / "raw/x").iterdir()] == ["date=2013-01-01"]


def test_a_staged_folder_that_came_to_nothing_leaves_no_empty_parent(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path))
    with pytest.raises(RuntimeError), lake.staged_dir("raw/x/date=2013-01-02/version=0001"):
        raise RuntimeError("no rows")
    with lake.staged_dir("raw/x/date=2013-01-03/version=0001"):
        raise Discard
    assert [p.name for p in (tmp_path / "raw/x").iterdir()] == []
    # a parent that was there before stays, and so does another writer's folder in it
    (tmp_path / "raw/x/date=2013-01-04/version=0001").mkdir(parents=True)
    with pytest.raises(RuntimeError), lake.staged_dir("raw/x/date=2013-01-04/version=0002"):
        raise RuntimeError("writer died")
    assert [p.name for p in (tmp_path / "raw/x/date=2013-01-04").iterdir()] == ["version=0001"]


def test_table_hash_depends_on_content_not_metadata() -> None:
    table = pa.table({"a": [1, 2], "b": ["x", "y"]})
    same = table.replace_schema_metadata({"pandas": "ignored"})
    assert table_sha256(table) == table_sha256(same)
    assert table_sha256(table) != table_sha256(pa.table({"a": [1, 3], "b": ["x", "y"]}))


def test_run_keys_are_path_safe() -> None:
    key = safe_run_key("manual__2013-06-01T00:00:00+00:00")
    assert key.startswith("manual__2013-06-01T00_00_00_00_00-h") and len(key) == 51
    assert safe_run_key("seed__2013-05-03") == "seed__2013-05-03"  # plain ids are their own key


@pytest.mark.parametrize(
    "run_id",
    [".", "..", "../..", "a/b", "/abs", "a\\b", "ü", "日本", "x" * 5000, "", " ", "-", ".hidden"],
)
def test_every_run_id_stays_inside_its_folder(tmp_path: Path, run_id: str) -> None:
    key = safe_run_key(run_id)
    assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]*", key) and len(key) <= 100, key
    assert key not in {".", ".."}
    lake = Lake(str(tmp_path))
    written = Path(lake.write_json({"step": "ingest"}, Lake.run_dir(run_id), "ingest.json"))
    assert written.parent.parent == tmp_path / "runs"
    assert Path(lake.path(Lake.training_set_dir(run_id))).parent == tmp_path / "training_sets"


def test_different_run_ids_never_share_a_key() -> None:
    ids = [
        "a:b",
        "a+b",
        "a_b",
        "a b",
        "a/b",
        "a__b",
        ".",
        "..",
        "run",
        "",
        "x" * 200,
        "x" * 201,
        "manual__2013-06-01T00:00:00+00:00",
        "manual__2013-06-01T00_00_00_00_00",
    ]
    lookalike = safe_run_key("a:b")  # a plain id spelled like another id's key
    ids.append(lookalike)
    keys = [safe_run_key(i) for i in ids]
    assert len(set(keys)) == len(ids), sorted(zip(keys, ids, strict=True))


def test_two_writers_of_one_partition_take_turns(tmp_path) -> None:
    """Two processes writing the same day's partition (the monitor's run and the training
    run): the second holds the lock only after the first let go."""
    import subprocess
    import sys

    code = (
        "import sys, time\n"
        "from pipeline_steps.core.lake import Lake\n"
        "lake = Lake(sys.argv[1])\n"
        "with lake.writer_lock('raw', 'flights', 'date=2013-06-03'):\n"
        "    print('in', time.monotonic(), flush=True); time.sleep(0.5)\n"
        "    print('out', time.monotonic(), flush=True)\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE)
        for _ in range(2)
    ]
    spans = []
    for proc in procs:
        out = proc.communicate(timeout=30)[0].decode().split()
        spans.append((float(out[1]), float(out[3])))
    first, second = sorted(spans)
    assert second[0] >= first[1], f"the two writers overlapped: {spans}"
    assert Lake(str(tmp_path)).partition_dates("raw", "flights") == []


def test_an_object_store_moves_a_folder_in_with_its_manifest_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import uuid

    lake = Lake(f"memory://lake-{uuid.uuid4().hex}")
    assert not lake.is_local
    moved: list[str] = []
    real_mv = lake.fs.mv
    monkeypatch.setattr(lake.fs, "mv", lambda a, b, **kw: (moved.append(b), real_mv(a, b, **kw)))
    folder = "validated/flights/date=2013-06-01"
    for version in ("v1", "v2"):
        with lake.staged_dir(folder) as tmp:
            lake.fs.pipe_file(f"{tmp}/data.parquet", version.encode())
            lake.fs.pipe_file(f"{tmp}/_manifest.json", b"{}")
        assert lake.fs.cat_file(lake.path(folder, "data.parquet")) == version.encode()
        assert moved[-1].endswith("/_manifest.json")  # readers see the folder complete or not
    with pytest.raises(RuntimeError), lake.staged_dir(folder) as tmp:
        lake.fs.pipe_file(f"{tmp}/data.parquet", b"half-written v3")
        raise RuntimeError("writer died")
    assert lake.fs.cat_file(lake.path(folder, "data.parquet")) == b"v2"
    assert lake.partition_dates("validated", "flights") == [date(2013, 6, 1)]
    assert lake.write_bytes(b"x", "runs", "r", "a.json").endswith("runs/r/a.json")
    assert not [p for p in lake.fs.find(lake.path()) if ".tmp-" in p]
