"""``trainyard replay`` of a demo date: bit-identical weights; a raw partition that gained a
version since is named in the diff, and the replay still reads the recorded one."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from pipeline_steps.commands.cli import main
from pipeline_steps.commands.replay import ReplayOutcome, replay, run_steps
from pipeline_steps.core.lake import MANIFEST, Lake, table_sha256
from pipeline_steps.core.manifests import to_json
from pipeline_steps.core.step_registry import STEPS
from tests.conftest import FIRST_DAY, HISTORY
from tests.pipeline_runs import demo_settings, run_context

pytestmark = pytest.mark.slow


def _new_raw_version(lake: Lake, dataset: str, day) -> int:
    """The source changed: a new raw version of the partition without its last row, validated
    (published to validated/) as a later run would leave it."""
    latest = lake.raw_versions(dataset, day)[-1]
    folder = Lake.raw_version(dataset, day, latest)
    table = lake.read_table(folder, "data.parquet")
    table = table.slice(0, table.num_rows - 1)
    version = latest + 1
    target = Lake.raw_version(dataset, day, version)
    lake.write_table(table, target, "data.parquet")
    manifest = replace(
        lake.partition_manifest(folder),
        version=version,
        rows=table.num_rows,
        sha256=table_sha256(table),
    )
    lake.write_json(to_json(manifest), target, MANIFEST)
    lake.publish(target, "validated", dataset, day, lake.path(target, "report.json"))
    return version


def _lines(outcome: ReplayOutcome) -> dict[str, str]:
    return {line.item: line.render() for line in outcome.diff}


def test_replay_gives_identical_weights_and_names_a_changed_partition(
    lake_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = demo_settings(lake_home)
    original = run_context(settings, "scheduled__original", FIRST_DAY, "scheduled")
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "settings.yaml"
        config.write_text(yaml.safe_dump(settings.to_dict()))
        run_steps(original, list(STEPS), config)

    first = replay(settings, logical_date=FIRST_DAY)
    assert first.replayed.run_id == "replay__scheduled__original__1"
    assert first.replayed.weights_sha256 == first.original.weights_sha256 != ""
    assert all(line.identical for line in first.diff), first.render()
    assert first.replayed.trigger.kind == "replay"
    assert first.replayed.registered_version is None  # nothing registered, alias untouched

    changed_day = HISTORY[-1]
    version = _new_raw_version(original.lake, "weather", changed_day)

    monkeypatch.setenv("TRAINYARD_HOME", str(lake_home))  # where the command finds the lake
    code = main(["replay", "--run-id", "scheduled__original"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    printed = captured.out
    assert f"raw weather {changed_day}" in printed
    assert f"the lake now has version {version}" in printed
    second = replay(settings, run_id="scheduled__original")
    lines = _lines(second)
    assert second.replayed.run_id == "replay__scheduled__original__3"
    assert lines["final weights"].endswith("identical")
    assert lines["training set"].endswith("identical")
    assert f"version {version}" in lines[f"raw weather {changed_day}"]
    assert [item for item, text in lines.items() if not text.endswith("identical")] == [
        f"raw weather {changed_day}"
    ]
    assert isinstance(second.original.raw_versions["weather"][str(changed_day)].version, int)
