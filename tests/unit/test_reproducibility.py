"""The pieces behind reproducible backfills and replays: the champion as of a date, a backfill's
decision, a pinned view of the lake, per-run Feast folders, what lineage records."""

from __future__ import annotations

from dataclasses import replace
from datetime import date

import mlflow
import pytest
from mlflow import MlflowClient

from pipeline_steps.commands.replay import pins_of
from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.lake import MANIFEST, Lake
from pipeline_steps.core.manifests import PartitionRef, ScoredChampion, load_record, to_json
from pipeline_steps.core.provenance import Lineage, raw_versions
from pipeline_steps.core.settings import SettingsError
from pipeline_steps.core.tracking import (
    DATE_TAG,
    DECISION_TAG,
    KIND_TAG,
    champion_as_of,
    connect,
    reference_champion,
)
from pipeline_steps.core.trigger import Trigger
from pipeline_steps.steps.features import feast_dir
from pipeline_steps.steps.promote import promote
from tests.conftest import HISTORY
from tests.manifests import features_manifest, ingest_manifest, lineage, scored
from tests.registry import logged_model
from tests.unit.test_promote import _prepare


def _version(settings, decision: str, day: str, kind: str = "scheduled") -> str:
    """A registered version whose promote step recorded ``decision`` for ``day``."""
    client = connect(settings.mlflow)
    version = mlflow.register_model(logged_model(settings)[1], settings.mlflow.registered_model)
    for key, value in {DECISION_TAG: decision, DATE_TAG: day, KIND_TAG: kind}.items():
        client.set_model_version_tag("flight_delay", version.version, key, value)
    return str(version.version)


def test_the_champion_as_of_a_date_is_the_last_promotion_before_it(make_settings) -> None:
    settings = make_settings()
    client = connect(settings.mlflow)
    v1 = _version(settings, "promoted", "2013-06-01")
    _version(settings, "rejected", "2013-06-02")
    v3 = _version(settings, "forced", "2013-06-03")
    _version(settings, "passed", "2013-06-04", kind="backfill")
    _version(settings, "promoted", "2013-06-10")  # a later date: not known on 06-05
    as_of = lambda day: champion_as_of(client, settings.mlflow, day)  # noqa: E731
    assert as_of(date(2013, 6, 1)) is None
    assert str(as_of(date(2013, 6, 2)).version) == v1
    assert str(as_of(date(2013, 6, 5)).version) == v3
    # a backfill uses it whatever the live alias says; other runs use the alias
    client.set_registered_model_alias("flight_delay", "champion", v1)
    backfill, scheduled = Trigger(kind="backfill"), Trigger(kind="scheduled")
    day = date(2013, 6, 5)
    assert str(reference_champion(client, settings.mlflow, backfill, day).version) == v3
    assert str(reference_champion(client, settings.mlflow, scheduled, day).version) == v1
    replayed = Trigger(kind="replay", evidence={"replays": "r", "champion": None})
    assert reference_champion(client, settings.mlflow, replayed, day) is None


def test_a_backfill_that_passes_the_gate_leaves_the_alias(make_settings) -> None:
    settings = make_settings("gate.min_auc=0.6", "gate.max_auc_drop=0.0")
    promote(_prepare(settings, "run-1", auc=0.7, champion=None))
    ctx = _prepare(
        settings,
        "backfill-run",
        auc=0.9,
        champion=ScoredChampion(
            version="1", model_uri="models:/flight_delay/1", metrics=scored(0.7)
        ),
    )
    ctx = replace(ctx, trigger=Trigger(kind="backfill"))
    decision = promote(ctx)
    assert decision.decision == "passed" and decision.champion_after == "1"
    assert "never moves the live alias" in decision.reasons[-1]
    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    assert str(client.get_model_version_by_alias("flight_delay", "champion").version) == "1"
    tags = client.get_model_version("flight_delay", decision.version).tags
    assert tags[DECISION_TAG] == "passed" and tags[KIND_TAG] == "backfill"


def test_lineage_records_what_a_replay_needs(make_settings) -> None:
    settings = make_settings("gate.min_auc=0.6")
    ctx = _prepare(settings, "run-1", auc=0.7, champion=None)
    promote(ctx)
    where = ctx.lake.path(ctx.run_dir, "lineage.json")
    lineage = load_record(Lineage, ctx.lake.read_json(ctx.run_dir, "lineage.json"), where)
    assert lineage.settings == to_json(settings.to_dict())
    assert lineage.code is not None and lineage.code.package
    assert lineage.packages["torch"] and len(lineage.packages_sha256) == 64
    assert lineage.raw_versions["flights"]["2013-06-04"] == PartitionRef(version=1, sha256="a")
    assert lineage.challenger is not None and lineage.challenger.auc == 0.7


def test_raw_versions_join_the_days_ingest_and_the_window() -> None:
    window = replace(
        features_manifest(),
        partitions={"weather": {"2013-06-03": PartitionRef(version=2, sha256="w")}},
    )
    refs = raw_versions(ingest_manifest("f"), window)
    assert pins_of(refs) == {"flights/2013-06-04": "1", "weather/2013-06-03": "2"}


def test_a_pinned_lake_reads_the_pinned_version_even_after_a_newer_one_is_validated(
    lake_home, make_settings
) -> None:
    day = HISTORY[-1]
    lake = Lake(str(lake_home / "lake" / "flight_delay"))
    first = Lake.raw_version("weather", day, 1)
    second = Lake.raw_version("weather", day, 2)
    lake.fs.copy(lake.path(first), lake.path(second), recursive=True)
    manifest = replace(lake.partition_manifest(first), version=2, sha256="newer")
    lake.write_json(to_json(manifest), second, MANIFEST)
    lake.publish(second, "validated", "weather", day, "report.json")

    assert lake.validated_partition("weather", day) == Lake.partition("validated", "weather", day)
    pinned = Lake(lake.root, {f"weather/{day}": "1"})
    assert pinned.validated_partition("weather", day) == first
    assert pinned.validated_dates("weather") == [day]
    assert pinned.validated_partition("flights", day) is None  # not pinned: not known
    with pytest.raises(StepError, match="version 7"):
        Lake(lake.root, {f"weather/{day}": "7"}).validated_partition("weather", day)


def test_pins_are_checked_when_settings_load(make_settings) -> None:
    assert make_settings('ingest.pins={"flights/2013-06-04": 2}').ingest.pins == {
        "flights/2013-06-04": "2"
    }
    with pytest.raises(SettingsError, match=r"ingest\.pins"):
        make_settings('ingest.pins={"flights": 2}')


def test_every_run_has_its_own_feast_folder(make_settings) -> None:
    assert feast_dir("manual__2013-06-01T00:00:00+00:00") != feast_dir(
        "manual__2013-06-02T00:00:00+00:00"
    )
    assert feast_dir("backfill__2013-06-03").startswith("features/runs/")
    ctx = RunContext(run_id="r", logical_date=date(2013, 6, 4), settings=make_settings())
    assert ctx.lake.pins == {}


def test_a_replay_of_a_run_recorded_with_retired_settings_leaves_them_out(
    make_settings, tmp_path
) -> None:
    """Runs recorded while validate still measured drift carry its ``drift.*`` settings."""
    from pipeline_steps.commands.replay import diff, replay_settings

    settings = make_settings()
    recorded = to_json(settings.to_dict())
    recorded["drift"] |= {"psi_threshold": 0.2, "numeric": [], "batch_rows": 65_536}
    original = lineage(
        run_id="r1", model_uri="runs:/m/model", decision="rejected", settings=recorded
    )
    replayed_settings = replay_settings(original, False, [], tmp_path / "replay.yaml")
    assert replayed_settings.drift == settings.drift
    replayed = replace(original, settings=to_json(replayed_settings.to_dict()))
    lines = diff(original, replayed, Lake(settings.lake_root))
    settings_line = next(line for line in lines if line.item == "settings")
    assert settings_line.identical, settings_line.detail
