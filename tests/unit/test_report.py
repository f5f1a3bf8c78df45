from dataclasses import replace

from pipeline_steps.commands.report import RecordedRun, summarise
from pipeline_steps.core.manifests import (
    DriftSummary,
    PromoteManifest,
    ScoredChampion,
)
from tests.manifests import (
    evaluate_manifest,
    features_manifest,
    ingest_manifest,
    scored,
    train_manifest,
    validate_manifest,
)


def test_summary_says_what_each_step_decided() -> None:
    day = "2013-06-02"
    champion = ScoredChampion(version="1", model_uri="models:/flight_delay/1", metrics=scored(0.72))
    run = RecordedRun(
        ingest=replace(ingest_manifest(), run_id="r1", logical_date=day, rows=911),
        validate=validate_manifest(logical_date=day),
        features=features_manifest(),
        train=replace(
            train_manifest("abc", "runs:/abc/model"), metrics={"val_auc": 0.7, "val_loss": 0.4}
        ),
        evaluate=evaluate_manifest("abc", "runs:/abc/model", 0.7, champion),
        promote=PromoteManifest(
            logical_date=day,
            registered_model="flight_delay",
            version="2",
            decision="rejected",
            reasons=["challenger AUC 0.7000 < floor"],
            champion_before="1",
            champion_after="1",
        ),
    )
    text = "\n".join(summarise(run))
    assert "rows ingested        911 flights" in text
    assert "validation           passed (53 expectations)" in text
    assert "drift" not in text  # drift is the monitor's: a run's section shows none
    assert "champion             v1: auc 0.7200" in text
    assert "REJECTED: challenger AUC 0.7000 < floor" in text
    assert "flight_delay version 2; champion is now version 1" in text
    # the differences from the champion, with their intervals (evaluate_manifest: ±0.01)
    assert "  challenger minus     (90% intervals)" in text
    assert "    champion          auc -0.0200 [-0.0300, -0.0100], log_loss +0.0000" in text


def test_an_earlier_runs_drift_reading_is_not_shown() -> None:
    """Validate manifests recorded before drift became the monitor's alone carry a drift
    reading; the run's section leaves it out."""
    reading = DriftSummary(
        drift_detected=True,
        crossed=["weather.temp"],
        reference="champion training window",
        values={"weather.temp": 0.3},
        report="d.html",
    )
    validated = validate_manifest("cached", evaluated=0, drift=reading)
    text = "\n".join(summarise(RecordedRun(ingest=ingest_manifest(), validate=validated)))
    assert "validation           passed (cached" in text
    assert "drift" not in text and "weather.temp" not in text
