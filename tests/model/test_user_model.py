"""A model from the team's own package (``tests/model/user_package``, which nothing in
``pipeline_steps`` names) is a setting away: validated, offered in the trigger form, tuned,
trained, evaluated, promoted and served, and its registered version loads without the package
installed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from pipeline_steps.commands.serving import PROBABILITY, predict
from pipeline_steps.core.manifests import FeaturesManifest
from pipeline_steps.core.settings import SettingsError, load_settings
from pipeline_steps.orchestration.params import training_params
from pipeline_steps.steps.evaluate import evaluate
from pipeline_steps.steps.promote import promote
from pipeline_steps.steps.train import train
from pipeline_steps.tuning import trials
from pipeline_steps.tuning.results import finish, prepare
from pipeline_steps.tuning.space import SpaceError, load_space
from tests.conftest import FIRST_DAY
from tests.model.test_tuning import as_trial, claim

PACKAGE = Path(__file__).with_name("user_package")
MODEL = "rider_models.residual:residual_mlp"


@pytest.fixture
def user_package(monkeypatch):
    """The package on the path, as a team's ``PYTHONPATH`` (or install) would put it."""
    monkeypatch.syspath_prepend(str(PACKAGE))
    paths = [str(PACKAGE), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    yield MODEL
    for name in [m for m in sys.modules if m.startswith("rider_models")]:
        del sys.modules[name]


def test_its_declaration_checks_settings_and_feeds_the_form(user_package, tmp_path) -> None:
    settings = load_settings(overrides=[f"train.model={MODEL}", "train.width=48"], environ={})
    assert settings.train.hyperparameters == {"width": 48, "blocks": 2, "dropout": 0.0}
    assert training_params(settings)["model"].schema["enum"] == ["mlp", "ft_transformer", MODEL]

    with pytest.raises(SettingsError, match=r"train\.width must be at most 512, got 4096"):
        load_settings(overrides=[f"train.model={MODEL}", "train.width=4096"], environ={})
    with pytest.raises(SettingsError, match=r"train\.hidden_dims.*hyperparameters of model"):
        load_settings(overrides=[f"train.model={MODEL}", "train.hidden_dims=[8]"], environ={})
    with pytest.raises(SettingsError, match=r"module rider_models\.missing cannot be imported"):
        load_settings(overrides=["train.model=rider_models.missing:net"], environ={})
    # the file's model and its widths give way to the form's choice of another model
    config = tmp_path / "settings.yaml"
    config.write_text(yaml.safe_dump({"train": {"model": "mlp", "hidden_dims": [16]}}))
    chosen = load_settings(config, overrides=[f"train.model={MODEL}"], environ={})
    assert chosen.train.model == MODEL and "hidden_dims" not in chosen.train.hyperparameters

    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({"architectures": {MODEL: {"width": {"low": 8, "high": 999}}}}))
    with pytest.raises(SpaceError, match=r"architectures\.rider_models.*'width'.*at most 512"):
        load_space(space)


@pytest.mark.slow
def test_it_is_tuned_trained_evaluated_promoted_and_served(
    user_package, prepare_run, tmp_path, ready_lake_home, monkeypatch
) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(
        yaml.safe_dump(
            {
                "parameters": {"learning_rate": {"low": 1e-3, "high": 1e-2, "log": True}},
                "architectures": {
                    MODEL: {"width": {"choices": [16, 32]}, "blocks": {"low": 1, "high": 2}}
                },
            }
        )
    )
    common = (f"train.model={MODEL}", "train.epochs=2", "features.row_group_rows=256")
    # a three-day window decides little: the gate's verdict is recorded, the promotion forced
    forced = ("promotion.force=true", "promotion.reason=the user model test needs a champion")
    tuning = (f"tuning.search_space={space}", "tuning.trials=2", "tuning.pruner=none")
    ctx = prepare_run("user_model", *common, *tuning, *forced, "train.params_from=tuning")
    plan = prepare(ctx)
    for slot in (0, 1):
        trial = claim(ctx, plan.study, slot=slot)
        assert trial.settings["model"] == MODEL and trial.settings["width"] in (16, 32)
        trials.conclude(ctx.settings, trial, train(as_trial(ctx, trial)))
    best = finish(ctx, plan.study)
    assert best.trials_complete == 2

    trained = train(ctx)  # the daily training, with the best trial's parameters
    assert trained.tuned_from is not None and trained.tuned_from.trial == best.trial
    evaluation = evaluate(ctx)
    assert evaluation.challenger.metrics.auc > 0.6  # it learned something real
    monkeypatch.setenv("TRAINYARD_HOME", str(ready_lake_home))
    decision = promote(ctx)
    assert (decision.decision, decision.champion_after) == ("forced", "1"), decision.reasons

    served = predict(ctx.settings, FIRST_DAY)
    assert served.rows[PROBABILITY].between(0, 1).all() and served.rows[PROBABILITY].std() > 0.01

    # the registered model carries the package: it loads where the package is not installed
    features = ctx.upstream(FeaturesManifest)
    rows = pd.read_parquet(features.sets.holdout.path)[features.feature_columns].head(20)
    request = tmp_path / "rows.parquet"
    rows.to_parquet(request)
    script = (
        "import json, sys, mlflow, pandas as pd;"
        "import importlib.util as u; assert u.find_spec('rider_models') is None;"
        f"mlflow.set_tracking_uri({ctx.settings.mlflow.tracking_uri!r});"
        f"m = mlflow.pyfunc.load_model('models:/{ctx.settings.mlflow.registered_model}/1');"
        f"print(json.dumps(list(m.predict(pd.read_parquet({str(request)!r})))))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(loaded) == 20 and all(0 < p < 1 for p in loaded)
