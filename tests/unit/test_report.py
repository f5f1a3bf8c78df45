from dataclasses import replace
from datetime import date

import pytest

from pipeline_steps.commands.report import RecordedRun, summarise
from pipeline_steps.core.errors import StepError
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
    text = "\n".join(summarise(run, rows_label="flights"))
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


def _record(lake, run_id: str, dag_id: str | None, *manifests) -> None:
    from pipeline_steps.core.lake import safe_run_key

    for manifest in manifests:
        stored = replace(manifest, run_id=run_id, dag_id=dag_id, recorded_at=manifest.recorded_at)
        lake.write_json(stored.to_json(), "runs", safe_run_key(run_id), f"{manifest.STEP}.json")


def test_a_day_s_runs_are_listed_and_the_training_run_summarised(make_settings, capsys) -> None:
    """A tuning run of the same day, recorded later, does not hide the training's decision;
    ``--run-id`` shows any run."""
    from pipeline_steps.commands.report import print_report
    from pipeline_steps.core.lake import Lake

    settings = make_settings()
    lake = Lake(settings.lake_root)
    day = "2013-06-02"
    ingest = replace(ingest_manifest(), logical_date=day, recorded_at="2026-11-27T01:00:00")
    trained = replace(train_manifest("abc", "runs:/abc/model"), metrics={"val_loss": 0.4})
    promoted = PromoteManifest(
        logical_date=day,
        registered_model="flight_delay",
        version="2",
        decision="promoted",
        reasons=["passed the gate"],
        champion_before="1",
        champion_after="2",
    )
    _record(lake, "scheduled__2013-06-02", "flight_delay_training", ingest, trained, promoted)
    later = replace(ingest, recorded_at="2026-11-27T02:00:00")
    _record(lake, "manual__tune", "flight_delay_tuning", later, features_manifest())

    print_report(settings, date(2013, 6, 2))
    text = capsys.readouterr().out
    assert "2 runs of 2013-06-02, oldest first (the one marked * below):" in text
    rows = [line.split() for line in text.splitlines() if "__" in line and "UTC" in line]
    assert rows[0][:4] == ["*", "scheduled__2013-06-02", "training", "flight_delay_training"]
    assert rows[1][:3] == ["manual__tune", "tuning", "flight_delay_tuning"]
    assert "run scheduled__2013-06-02  (logical date 2013-06-02; training, DAG" in text
    assert "PROMOTED: passed the gate" in text

    print_report(settings, run_id="manual__tune")
    text = capsys.readouterr().out
    assert text.startswith("run manual__tune  (logical date 2013-06-02; tuning, DAG ")
    assert "PROMOTED" not in text
    with pytest.raises(StepError, match="no recorded run 'nope'"):
        print_report(settings, run_id="nope")


def test_the_settings_line_lists_what_the_settings_file_changed(make_settings) -> None:
    from pipeline_steps.commands.report import describe_settings
    from pipeline_steps.core.settings import load_settings
    from tests.conftest import ROOT

    hotel = load_settings(ROOT / "examples" / "hotel_rates" / "settings.yaml", environ={})
    described = describe_settings(hotel.to_dict())
    assert "changed from the defaults" in described
    for change in (
        "domain.module='hotel_rates.domain'",
        "train.epochs=40",
        "release.shadow_days=7",
    ):
        assert change in described
    # names derived from domain.name, and where the deployment keeps its state, are no changes
    for derived in ("mlflow.experiment", "mlflow.registered_model", "lake.root", "tracking_uri"):
        assert derived not in described
    # the tests' own three, besides the flights example's settings file
    tests = describe_settings(make_settings().to_dict())
    assert tests.startswith("9 changed from the defaults: domain.module='flight_delay.domain'")
    for change in ("features.window_days=4", "train.epochs=2", "validation.data_docs=False"):
        assert change in tests
