"""Step manifests: the JSON keeps its shape, and an old or foreign manifest fails clearly."""

import json

import pytest

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.manifests import (
    DriftSummary,
    FeaturesManifest,
    IngestManifest,
    ManifestError,
    TrainManifest,
    ValidateManifest,
    load_manifest,
)
from pipeline_steps.core.step_registry import STEPS
from tests.conftest import FIRST_DAY
from tests.manifests import features_manifest, ingest_manifest, train_manifest, validate_manifest


def test_a_manifest_reads_back_equal_from_its_json() -> None:
    manifest = features_manifest()
    text = json.dumps(manifest.to_json())
    assert load_manifest(FeaturesManifest, json.loads(text), "features.json") == manifest
    payload = manifest.to_json()
    assert payload["step"] == "features"
    assert payload["sets"]["train"]["rows"] == 10  # nested objects, as the steps always wrote
    assert "materialized" not in payload and "run_id" not in payload  # absent, not null


def test_recorded_manifest_carries_the_run_and_the_printed_one_does_not(make_settings) -> None:
    ctx = RunContext(run_id="r1", logical_date=FIRST_DAY, settings=make_settings())
    printed = ctx.record(ingest_manifest())
    assert printed.run_id is None
    stored = ctx.lake.read_json(ctx.run_dir, "ingest.json")
    assert stored["run_id"] == "r1" and stored["recorded_at"]
    assert ctx.upstream(IngestManifest).datasets["flights"].sha256 == "a"


def test_an_old_manifest_names_the_file_and_the_missing_field(make_settings) -> None:
    ctx = RunContext(run_id="r1", logical_date=FIRST_DAY, settings=make_settings())
    old = train_manifest("m", "runs:/m/model").to_json()
    del old["config_hash"]
    old["optimizer"] = "adam"
    ctx.lake.write_json(old, ctx.run_dir, "train.json")
    with pytest.raises(StepError, match=r"train\.json: not a TrainManifest") as error:
        ctx.upstream(TrainManifest)
    assert "missing config_hash" in str(error.value) and "unknown optimizer" in str(error.value)


def test_a_foreign_manifest_or_a_wrong_type_is_refused() -> None:
    with pytest.raises(ManifestError, match="expected the 'train' step's manifest, got step 'x'"):
        load_manifest(TrainManifest, {"step": "x"}, "t.json")
    bad = features_manifest().to_json()
    bad["sets"]["holdout"]["rows"] = "ten"
    with pytest.raises(ManifestError, match=r"sets\.holdout\.rows must be int, got 'ten'"):
        load_manifest(FeaturesManifest, bad, "f.json")
    bad = features_manifest().to_json()
    bad["status"] = "stale"
    with pytest.raises(ManifestError, match=r"status must be one of \['built', 'cached'\]"):
        load_manifest(FeaturesManifest, bad, "f.json")


def test_the_step_order_is_written_once() -> None:
    assert STEPS == ("ingest", "validate", "features", "train", "evaluate", "promote")


def test_undefined_metrics_travel_as_strict_json_and_come_back_as_nan() -> None:
    """A slice with one class has no AUC: the manifest still goes through XCom (strict JSON)."""
    import json
    import math
    from dataclasses import replace

    from pipeline_steps.core.manifests import (
        EvaluateManifest,
        SliceResult,
        SliceScores,
        load_manifest,
    )
    from tests.manifests import evaluate_manifest

    one_class = SliceResult(
        column="carrier",
        value="HA",
        rows=1,
        positives=0,
        challenger=SliceScores(auc=float("nan"), log_loss=0.1),
    )
    evaluation = replace(evaluate_manifest("r", "m", 0.7, None), slices=[one_class])
    line = json.dumps(evaluation.to_json(), allow_nan=False)
    back = load_manifest(EvaluateManifest, json.loads(line), "evaluate.json")
    assert math.isnan(back.slices[0].challenger.auc) and back.slices[0].challenger.log_loss == 0.1


def test_a_validate_manifest_carries_no_drift_and_an_earlier_one_with_drift_still_loads() -> None:
    manifest = validate_manifest()
    payload = manifest.to_json()
    assert "drift" not in payload  # drift is the monitor's; validate writes none, not even null
    assert load_manifest(ValidateManifest, payload, "validate.json") == manifest
    # as the validate step of earlier versions recorded it, with the day's drift reading
    old = {
        **payload,
        "run_id": "scheduled__2013-06-02",
        "drift": {
            "drift_detected": True,
            "crossed": ["weather.temp"],
            "reference": "trailing 14 validated days",
            "values": {"weather.temp": 0.31, "flights.carrier": 0.02},
            "report": "/lake/reports/drift/date=2013-06-02/drift.html",
        },
    }
    loaded = load_manifest(ValidateManifest, json.loads(json.dumps(old)), "validate.json")
    assert loaded.datasets == manifest.datasets and loaded.run_id == "scheduled__2013-06-02"
    assert loaded.drift == DriftSummary(
        drift_detected=True,
        crossed=["weather.temp"],
        reference="trailing 14 validated days",
        values={"weather.temp": 0.31, "flights.carrier": 0.02},
        report="/lake/reports/drift/date=2013-06-02/drift.html",
    )
