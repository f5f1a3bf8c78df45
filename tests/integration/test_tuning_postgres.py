"""A study on PostgreSQL: claims from several processes at once, two trials training at once."""

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import optuna
import pytest

from tests.conftest import FIRST_DAY, WINDOW

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture
def optuna_database(new_database):
    """A fresh database for the study storage, dropped afterwards."""
    return new_database


def _overrides(storage: str) -> list[str]:
    return [
        f"features.window_days={WINDOW}",
        "validation.data_docs=false",
        "train.epochs=2",
        "train.patience=0",
        "tuning.pruner=none",
        f"tuning.storage={storage}",
    ]


def _claim(home: str, storage: str, study: str, run_id: str, slot: int) -> object:
    """One trial task's claim, in a process of its own."""
    from pipeline_steps.core.settings import load_settings
    from pipeline_steps.tuning import trials
    from pipeline_steps.tuning.space import load_space

    settings = load_settings(
        overrides=_overrides(storage),
        environ={"TRAINYARD_HOME": home, "TRAINYARD_CONFIG": os.environ["TRAINYARD_CONFIG"]},
    )
    space = load_space(settings.tuning.search_space, settings.train.model)
    try:
        claim = trials.claim(settings, study, space, run_id, slot, parallel=2)
    except trials.LaneBusy:
        return None
    return claim.number, claim.settings


def test_trials_claim_and_train_at_once_on_postgres(lake_home, optuna_database) -> None:
    from pipeline_steps.core.context import RunContext
    from pipeline_steps.core.manifests import TrainManifest, load_manifest
    from pipeline_steps.core.settings import load_settings
    from pipeline_steps.steps.features import build_features
    from pipeline_steps.steps.ingest import ingest
    from pipeline_steps.steps.validate import validate
    from pipeline_steps.tuning import trials
    from pipeline_steps.tuning.results import finish, prepare
    from pipeline_steps.tuning.study import open_study

    home = str(lake_home)
    settings = load_settings(
        overrides=_overrides(optuna_database),
        environ={"TRAINYARD_HOME": home, "TRAINYARD_CONFIG": os.environ["TRAINYARD_CONFIG"]},
    )
    ctx = RunContext(run_id="tune_pg", logical_date=FIRST_DAY, settings=settings)
    for step in (ingest, validate, build_features):
        step(ctx)
    plan = prepare(ctx)

    # four trial tasks claim at the same instant; the run may train two at once
    with ProcessPoolExecutor(4, mp_context=get_context("spawn")) as pool:
        claimed = list(
            pool.map(
                _claim,
                [home] * 4,
                [optuna_database] * 4,
                [plan.study] * 4,
                [ctx.run_id] * 4,
                range(4),
            )
        )
    granted = [c for c in claimed if c is not None]
    assert len(granted) == 2, claimed
    assert len({number for number, _ in granted}) == 2

    # the two trials train in two processes at the same time, reporting to the same study
    env = {
        **os.environ,
        "TRAINYARD_HOME": home,
        "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
    }
    processes = []
    for number, drawn in granted:
        argv = [
            "trainyard",
            "step",
            "train",
            "--run-id",
            ctx.run_id,
            "--logical-date",
            str(FIRST_DAY),
        ]
        argv += ["--study", plan.study, "--trial", str(number)]
        for setting in _overrides(optuna_database):
            argv += ["--set", setting]
        for key, value in drawn.items():
            argv += ["--set", f"train.{key}={json.dumps(value)}"]
        processes.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True))
        time.sleep(0.5)
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    assert [p.returncode for p in processes] == [0, 0]
    study = open_study(settings, plan.study)
    for (number, drawn), output in zip(granted, outputs, strict=True):
        manifest = load_manifest(TrainManifest, json.loads(output.strip().splitlines()[-1]), "out")
        assert manifest.trial.number == number and manifest.epochs == 2
        claim = trials.Claim(study=plan.study, number=number, settings=drawn, resumed=False)
        assert trials.conclude(settings, claim, manifest) == "COMPLETE"
        assert sorted(study.trials[number].intermediate_values) == [1, 2]

    best = finish(ctx, plan.study)
    assert best.trials_complete == 2
    assert study.trials[best.trial].state == optuna.trial.TrialState.COMPLETE
