"""Promotion against a real local MLflow registry: idempotent, never over an unseen champion."""

from datetime import date

import pytest
from mlflow import MlflowClient

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.manifests import ScoredChampion, TrainManifest
from pipeline_steps.steps.promote import promote
from tests.manifests import (
    scored,
)
from tests.registry import logged_model, record_evaluated

DAY = date(2013, 6, 4)


def _prepare(settings, run_id: str, auc: float, champion: ScoredChampion | None) -> RunContext:
    """A run whose earlier steps are recorded: a logged model and its evaluation."""
    ctx = RunContext(run_id=run_id, logical_date=DAY, settings=settings)
    return record_evaluated(ctx, *logged_model(settings), auc, champion)


@pytest.fixture
def settings(make_settings):
    return make_settings("gate.min_auc=0.6", "gate.max_auc_drop=0.0")


def _champion(settings) -> str:
    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    return str(client.get_model_version_by_alias("flight_delay", "champion").version)


def test_first_passing_model_becomes_champion_and_a_retry_changes_nothing(settings) -> None:
    ctx = _prepare(settings, "run-1", auc=0.7, champion=None)
    first = promote(ctx)
    assert first.decision == "promoted" and first.version == "1"
    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    recorded = client.get_model_version("flight_delay", "1")
    again = promote(ctx)  # a retried task
    assert again.version == "1" and again.decision == "promoted"
    assert (again.reasons, again.champion_before) == (first.reasons, first.champion_before)
    retried = client.get_model_version("flight_delay", "1")
    assert (retried.tags, retried.description) == (recorded.tags, recorded.description)
    assert len(client.search_model_versions("name = 'flight_delay'")) == 1
    assert _champion(settings) == "1"
    assert ctx.lake.read_json(ctx.run_dir, "lineage.json")["registered_version"] == "1"


def test_failing_gate_keeps_the_champion_and_records_why(settings) -> None:
    promote(_prepare(settings, "run-1", auc=0.7, champion=None))
    worse = _prepare(
        settings,
        "run-2",
        auc=0.65,
        champion=ScoredChampion(
            version="1", model_uri="models:/flight_delay/1", metrics=scored(0.7)
        ),
    )
    decision = promote(worse)
    assert decision.decision == "rejected" and decision.version == "2"
    assert _champion(settings) == "1"
    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    tags = client.get_model_version("flight_delay", "2").tags
    assert tags["trainyard.decision"] == "rejected"
    assert "AUC challenger - champion -0.0500 [-0.0600, -0.0400]" in tags["trainyard.reasons"]


def test_no_promotion_over_a_champion_the_run_did_not_compare_against(settings) -> None:
    # Run 2 was evaluated while there was no champion; run 1 was promoted meanwhile.
    late = _prepare(settings, "run-2", auc=0.9, champion=None)
    promote(_prepare(settings, "run-1", auc=0.7, champion=None))
    decision = promote(late)
    assert decision.decision == "rejected"
    assert any("champion changed" in reason for reason in decision.reasons)
    assert _champion(settings) == "1"


def _worse_than_champion(make_settings, *overrides: str) -> RunContext:
    from dataclasses import replace

    from pipeline_steps.core.trigger import Trigger

    promote(_prepare(make_settings("gate.min_auc=0.6"), "run-1", auc=0.7, champion=None))
    settings = make_settings("gate.min_auc=0.6", "gate.max_auc_drop=0.0", *overrides)
    champion = ScoredChampion(version="1", model_uri="models:/flight_delay/1", metrics=scored(0.7))
    ctx = _prepare(settings, "run-2", auc=0.65, champion=champion)
    return replace(ctx, trigger=Trigger(kind="manual", user="ada"))


def test_a_forced_promotion_moves_the_champion_and_records_who_and_why(make_settings) -> None:
    ctx = _worse_than_champion(
        make_settings, "promotion.force=true", "promotion.reason=v1 scores a retired carrier"
    )
    decision = promote(ctx)
    assert decision.decision == "forced" and decision.champion_after == "2"
    assert _champion(ctx.settings) == "2"
    client = MlflowClient(ctx.settings.mlflow.tracking_uri, ctx.settings.mlflow.tracking_uri)
    tags = client.get_model_version("flight_delay", "2").tags
    assert tags["trainyard.forced_reason"] == "v1 scores a retired carrier"
    assert tags["trainyard.forced_by"] == "ada"
    assert "gate refused" in tags["trainyard.reasons"]
    lineage = ctx.lake.read_json(ctx.run_dir, "lineage.json")
    assert lineage["decision"] == "forced" and lineage["trigger"]["user"] == "ada"


def test_a_skipped_promotion_registers_but_leaves_the_champion(make_settings) -> None:
    ctx = _worse_than_champion(make_settings, "promotion.skip=true")
    decision = promote(ctx)
    assert decision.decision == "skipped" and decision.version == "2"
    assert decision.champion_after == "1" and _champion(ctx.settings) == "1"


def test_forcing_without_a_reason_is_a_settings_error(make_settings) -> None:
    from pipeline_steps.core.settings import SettingsError

    with pytest.raises(SettingsError, match=r"promotion.force=true needs promotion.reason"):
        make_settings("promotion.force=true")


def test_the_version_page_says_why_and_the_challenger_alias_marks_the_candidate(settings) -> None:
    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    promote(_prepare(settings, "run-1", auc=0.7, champion=None))
    first = client.get_model_version("flight_delay", "1")
    assert first.description.splitlines() == [
        "Decision: **promoted** (run run-1, logical date 2013-06-04)",
        "",
        "Compared with: no champion",
        "",
        "Trigger: cli",
        "",
        "Reasons:",
        "- the logistic regression baseline was not scored on this holdout; not held to it",
        "- no champion yet; challenger AUC 0.7000 >= floor 0.6",
    ]
    assert first.tags["trainyard.moved_from"] == "none" and first.tags["trainyard.moved_at"]
    assert "challenger" in first.aliases and "champion" in first.aliases

    champion = ScoredChampion(version="1", model_uri="models:/flight_delay/1", metrics=scored(0.7))
    promote(_prepare(settings, "run-2", auc=0.65, champion=champion))
    second = client.get_model_version("flight_delay", "2")
    assert second.description.startswith("Decision: **rejected** (run run-2,")
    assert "Compared with: version 1" in second.description
    assert (
        "- AUC challenger - champion -0.0500 [-0.0600, -0.0400]: may be worse" in second.description
    )
    assert "trainyard.moved_at" not in second.tags  # the champion did not move
    assert second.aliases == ["challenger"] and _champion(settings) == "1"


def test_a_backfill_moves_neither_alias(settings) -> None:
    from dataclasses import replace

    from pipeline_steps.core.trigger import Trigger

    promote(_prepare(settings, "run-1", auc=0.7, champion=None))
    champion = ScoredChampion(version="1", model_uri="models:/flight_delay/1", metrics=scored(0.7))
    ctx = _prepare(settings, "backfill-2", auc=0.9, champion=champion)
    decision = promote(replace(ctx, trigger=Trigger(kind="backfill")))
    assert decision.decision == "passed" and decision.version == "2"
    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    assert str(client.get_model_version_by_alias("flight_delay", "challenger").version) == "1"
    assert _champion(settings) == "1"
    assert "Decision: **passed**" in client.get_model_version("flight_delay", "2").description


def test_a_holdout_too_small_to_decide_leaves_the_champion_and_says_so(make_settings) -> None:
    from dataclasses import replace

    from pipeline_steps.core.manifests import EvaluateManifest

    promote(_prepare(make_settings("gate.min_auc=0.6"), "run-1", auc=0.7, champion=None))
    settings = make_settings("gate.min_auc=0.6", "gate.min_positives=100")
    champion = ScoredChampion(version="1", model_uri="models:/flight_delay/1", metrics=scored(0.7))
    ctx = _prepare(settings, "run-2", auc=0.9, champion=champion)  # much better, on 60 positives
    evaluation = ctx.upstream(EvaluateManifest)
    ctx.record(replace(evaluation, holdout=replace(evaluation.holdout, positives=60)))
    decision = promote(ctx)
    assert decision.decision == "undecided" and decision.champion_after == "1"
    assert "60 positive rows, fewer than gate.min_positives=100" in decision.reasons[0]
    assert _champion(settings) == "1"
    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    assert client.get_model_version("flight_delay", "2").tags["trainyard.decision"] == "undecided"


def test_a_run_missing_an_earlier_step_is_refused_before_the_registry_changes(settings) -> None:
    """Promote for a run whose ingest never completed (its lineage would have no partitions):
    refused naming the step, with no version registered and no alias moved."""
    from pipeline_steps.core.errors import StepError
    from pipeline_steps.core.lake import Lake

    ctx = _prepare(settings, "run-1", auc=0.7, champion=None)
    ctx.lake.fs.rm(ctx.lake.path(Lake.run_dir("run-1"), "ingest.json"))
    with pytest.raises(StepError, match="step 'ingest' has not completed for run 'run-1'"):
        promote(ctx)
    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    assert not client.search_model_versions("name = 'flight_delay'")


def _trained_from(ctx: RunContext, fingerprint: str) -> RunContext:
    """The run's train manifest with ``fingerprint`` (what decided its model)."""
    from dataclasses import replace

    ctx.record(replace(ctx.upstream(TrainManifest), fingerprint=fingerprint))
    return ctx


def test_a_challenger_trained_from_what_the_champion_was_is_recorded_not_registered(
    settings,
) -> None:
    first = promote(_trained_from(_prepare(settings, "run-1", 0.7, None), "f" * 64))
    assert first.version == "1"
    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    assert client.get_model_version("flight_delay", "1").tags["trainyard.fingerprint"] == "f" * 64

    # the next day brought no data: the same training set, settings and code
    champion = ScoredChampion(version="1", model_uri="models:/flight_delay/1", metrics=scored(0.7))
    ctx = _trained_from(_prepare(settings, "run-2", 0.7, champion), "f" * 64)
    same = promote(ctx)
    assert (same.decision, same.version) == ("identical", None)
    assert (same.champion_before, same.champion_after) == ("1", "1")
    assert "identical to champion version 1" in same.reasons[0]
    assert len(client.search_model_versions("name = 'flight_delay'")) == 1
    assert _champion(settings) == "1"
    run = client.get_run(ctx.upstream(TrainManifest).mlflow_run_id)
    assert run.data.tags["trainyard.decision"] == "identical"
    assert run.data.tags["trainyard.identical_to"] == "flight_delay/1"
    lineage = ctx.lake.read_json(ctx.run_dir, "lineage.json")
    assert (lineage["decision"], lineage["registered_version"]) == ("identical", None)
    assert promote(ctx).decision == "identical"  # a retried task says the same

    # new data: a new fingerprint is registered and judged as ever
    other = promote(_trained_from(_prepare(settings, "run-3", 0.75, champion), "e" * 64))
    assert (other.version, other.decision) == ("2", "staged")  # release.mode: staged
    # and a twin of the staged candidate is not staged again
    twin = promote(_trained_from(_prepare(settings, "run-4", 0.75, champion), "e" * 64))
    assert (twin.decision, twin.version, twin.staging_after) == ("identical", None, "2")
    assert "identical to staging version 2" in twin.reasons[0]


def test_an_unknown_fingerprint_never_counts_as_identical(settings) -> None:
    promote(_prepare(settings, "run-1", 0.7, None))  # recorded before fingerprints: ""
    champion = ScoredChampion(version="1", model_uri="models:/flight_delay/1", metrics=scored(0.7))
    assert promote(_prepare(settings, "run-2", 0.7, champion)).version == "2"
