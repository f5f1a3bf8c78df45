"""Tuning trials as the trial tasks run them: claimed, trained by the real train step, told."""

import dataclasses
import time
from pathlib import Path

import mlflow
import optuna
import pytest
from mlflow import MlflowClient

from pipeline_steps.commands.replay import read_lineage, replay_settings
from pipeline_steps.commands.report import print_report
from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.manifests import TrialRef
from pipeline_steps.steps.evaluate import evaluate
from pipeline_steps.steps.promote import promote
from pipeline_steps.steps.train import checkpoint, train
from pipeline_steps.tuning import trials
from pipeline_steps.tuning.report import describe_study
from pipeline_steps.tuning.results import finish, prepare
from pipeline_steps.tuning.space import load_space
from pipeline_steps.tuning.study import open_study

pytestmark = pytest.mark.slow
States = optuna.trial.TrialState


def as_trial(ctx: RunContext, claim: trials.Claim) -> RunContext:
    """The train step's context in the trial's process: the drawn settings, the trial."""
    trial = TrialRef(study=claim.study, number=claim.number)
    return dataclasses.replace(ctx, settings=ctx.settings.with_train(claim.settings), trial=trial)


def claim(ctx: RunContext, study: str, slot: int, parallel: int = 2) -> trials.Claim:
    space = load_space(ctx.settings.tuning.search_space, ctx.settings.train.model)
    return trials.claim(ctx.settings, study, space, ctx.run_id, slot, parallel)


def client(ctx: RunContext) -> MlflowClient:
    uri = ctx.settings.mlflow.tracking_uri
    return MlflowClient(uri, uri)


def test_a_trial_worse_than_the_median_is_pruned_and_tagged(prepare_run) -> None:
    ctx = prepare_run(
        "tune_prune", "train.epochs=3", "train.patience=0", "tuning.pruner=median",
        "tuning.startup_trials=1",
    )  # fmt: skip
    plan = prepare(ctx)
    study = open_study(ctx.settings, plan.study)
    # an earlier trial whose validation loss was tiny at every epoch: the median to beat
    study.add_trial(
        optuna.trial.create_trial(value=0.01, intermediate_values={1: 0.01, 2: 0.01, 3: 0.01})
    )
    trial = claim(ctx, plan.study, slot=0)
    manifest = train(as_trial(ctx, trial))

    assert manifest.status == "pruned" and manifest.pruned_at_epoch == 0
    assert manifest.epochs == 1  # stopped after the first report
    assert trials.conclude(ctx.settings, trial, manifest) == "PRUNED"
    frozen = open_study(ctx.settings, plan.study).trials[trial.number]
    assert frozen.state == States.PRUNED and list(frozen.intermediate_values) == [1]
    run = client(ctx).get_run(manifest.mlflow_run_id)
    assert run.data.tags["trainyard.trial_state"] == "PRUNED"
    assert run.data.tags["trainyard.pruned_at_epoch"] == "0"
    assert run.data.tags["mlflow.parentRunId"] == plan.parent_run_id
    assert run.data.params["train.model"] == trial.settings["model"]
    assert "val_loss" in run.data.metrics
    assert manifest.model_uri == ""  # a trial packages no model


def test_a_retried_trial_takes_its_trial_back_and_resumes_from_its_checkpoint(
    prepare_run, monkeypatch
) -> None:
    ctx = prepare_run("tune_retry", "train.epochs=2", "train.patience=0", "tuning.pruner=none")
    plan = prepare(ctx)
    first = claim(ctx, plan.study, slot=0, parallel=1)
    written = checkpoint.Checkpoints.write

    def killed_after_first_checkpoint(self, fit, at, layout_world_size):  # type: ignore[no-untyped-def]
        path = written(self, fit, at, layout_world_size)
        if at.epoch == 1 and at.epoch_batches == 0:  # the first epoch's checkpoint
            raise RuntimeError("worker killed")
        return path

    monkeypatch.setattr(checkpoint.Checkpoints, "write", killed_after_first_checkpoint)
    with pytest.raises(RuntimeError, match="worker killed"):
        train(as_trial(ctx, first))
    mlflow.end_run(status="KILLED")
    monkeypatch.setattr(checkpoint.Checkpoints, "write", written)

    # while the trial waits for its retry it holds the run's only lane
    with pytest.raises(trials.LaneBusy):
        claim(ctx, plan.study, slot=1, parallel=1)
    again = claim(ctx, plan.study, slot=0, parallel=1)
    assert (again.number, again.settings, again.resumed) == (first.number, first.settings, True)
    manifest = train(as_trial(ctx, again))
    assert manifest.resumed_from is not None and manifest.resumed_from.epoch == 1
    assert manifest.epochs == 2
    assert trials.conclude(ctx.settings, again, manifest) == "COMPLETE"
    assert open_study(ctx.settings, plan.study).best_value == manifest.best_val_loss


def test_an_interrupted_study_continues_where_it_stopped(prepare_run) -> None:
    settings = ("tuning.trials=3", "tuning.heartbeat_s=1", "tuning.stale_after_s=2")
    ctx = prepare_run("tune_killed", *settings)
    plan = prepare(ctx)
    assert plan.slots == [0, 1, 2] and plan.finished == 0
    done = claim(ctx, plan.study, slot=0)
    open_study(ctx.settings, plan.study).tell(done.number, 0.5)
    lost = claim(ctx, plan.study, slot=1)  # its worker dies with the DAG run: no more heartbeats
    time.sleep(3)

    again = prepare_run("tune_killed_again", *settings)
    replan = prepare(again)
    assert replan.study == plan.study  # same model, space and training set: the same study
    assert replan.finished == 1 and replan.slots == [0, 1]
    assert replan.parent_run_id == plan.parent_run_id
    frozen = open_study(ctx.settings, plan.study).trials[lost.number]
    assert frozen.state == States.FAIL  # stale: failed, not counted, not blocking


def test_the_best_trial_feeds_training_with_params_from_tuning(
    prepare_run, tmp_path, capsys
) -> None:
    ctx = prepare_run("tune_best", "train.epochs=1", "tuning.pruner=none")
    plan = prepare(ctx)
    values = {}
    for slot in (0, 1):
        trial = claim(ctx, plan.study, slot=slot)
        manifest = train(as_trial(ctx, trial))
        trials.conclude(ctx.settings, trial, manifest)
        values[trial.number] = (manifest.best_val_loss, trial.settings)
    orphan = claim(ctx, plan.study, slot=2)  # its task ended without telling the study

    best = finish(ctx, plan.study)
    number = min(values, key=lambda n: values[n][0])
    assert (best.trial, best.value, best.params) == (number, *values[number])
    assert (best.trials_complete, best.trials_failed) == (2, 1)
    assert open_study(ctx.settings, plan.study).trials[orphan.number].state == States.FAIL
    recorded = ctx.lake.read_json("tuning", "best", "flight_delay.json")
    assert recorded["study"] == plan.study and recorded["trial"] == number
    summary = describe_study(ctx.settings)
    assert f"study {plan.study}" in summary and "2 complete, 1 fail" in summary
    assert f"best    trial {number}: validation loss" in summary
    artifacts = {a.path for a in client(ctx).list_artifacts(plan.parent_run_id)}
    assert {"best_trial.json", "optimization_history.png", "trials.csv"} <= artifacts
    assert Path(ctx.settings.tuning.search_space).name in artifacts
    assert client(ctx).get_run(plan.parent_run_id).info.status == "FINISHED"
    experiment = client(ctx).get_experiment_by_name(ctx.settings.tuning.experiment)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # runs view

    daily = prepare_run("daily_tuned", "train.epochs=1", "train.params_from=tuning")
    trained = train(daily)
    assert trained.tuned_from is not None and trained.tuned_from.trial == number
    run = client(ctx).get_run(trained.mlflow_run_id)
    assert run.data.params["train.learning_rate"] == str(best.params["learning_rate"])
    assert run.data.params["train.params_from"] == "tuning"
    assert run.data.tags["trainyard.tuned_trial"] == str(number)
    assert run.data.tags["trainyard.tuned_study"] == plan.study

    # a tuned challenger passes the gate like any other, and its lineage names the trial
    for step in (evaluate, promote):
        step(daily)
    print_report(daily.settings, daily.logical_date)
    assert f"tuned parameters     trial {number} of study {plan.study}" in capsys.readouterr().out
    lineage = read_lineage(daily.lake, daily.run_id)
    assert lineage.tuned_from is not None and lineage.tuned_from.trial == number
    assert lineage.settings["train"]["learning_rate"] == best.params["learning_rate"]
    assert lineage.decision in ("promoted", "rejected")
    # a replay trains with the recorded values, not with a newer study's
    replayed = replay_settings(lineage, False, [], tmp_path / "replay.yaml")
    assert replayed.train.params_from == "settings"
    assert replayed.train.learning_rate == best.params["learning_rate"]


def test_params_from_tuning_without_a_study_is_a_clear_error(make_settings) -> None:
    from datetime import date

    settings = make_settings("train.params_from=tuning")
    ctx = RunContext(run_id="no_study", logical_date=date(2013, 6, 4), settings=settings)
    with pytest.raises(StepError, match="run flight_delay_tuning first"):
        train(ctx)
