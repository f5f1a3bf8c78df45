"""The search space file: what a trial draws, and the errors that name the file and key."""

from pathlib import Path

import optuna
import pytest
import yaml

from pipeline_steps.core.settings import TuningSettings, load_settings
from pipeline_steps.tuning.space import SpaceError, load_space
from pipeline_steps.tuning.study import make_sampler

SHIPPED = load_settings().tuning.search_space


def test_the_shipped_space_draws_settings_train_accepts() -> None:
    space = load_space(SHIPPED)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    models = set()
    for _ in range(40):
        drawn = space.suggest(study.ask())
        models.add(drawn["model"])
        assert 3e-4 <= drawn["learning_rate"] <= 3e-2
        overrides = [f"train.{k}={v}" for k, v in drawn.items()]
        if drawn["model"] == "mlp":
            assert "token_dim" not in drawn and isinstance(drawn["hidden_dims"], list)
        else:
            assert "hidden_dims" not in drawn
        settings = load_settings(overrides=overrides, environ={"TRAINYARD_HOME": "/tmp/x"})
        assert settings.train.model == drawn["model"]
    assert models == {"mlp", "ft_transformer"}


def test_the_grid_sampler_walks_the_grid_values() -> None:
    space = load_space(SHIPPED)
    grid = space.grid()
    assert grid["learning_rate"] == [1e-3, 3e-3, 1e-2]
    assert grid["hidden_dims"] == ["[64, 32]", "[128, 64]", "[256, 128]", "[256, 128, 64]"]
    sampler = make_sampler(TuningSettings(sampler="grid"), space, seed=0)
    study = optuna.create_study(sampler=sampler)
    drawn = space.suggest(study.ask())
    assert drawn["learning_rate"] in (1e-3, 3e-3, 1e-2)


def _write(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"parameters": {"learnig_rate": {"low": 0.1, "high": 1}}}, "'learnig_rate' is not a"),
        ({"parameters": {"epochs": {"low": 1, "high": 9}}}, "'epochs' cannot be tuned"),
        ({"parameters": {"dropout": {"low": 0.5, "high": 0.1}}}, "'low' (0.5) must be below"),
        ({"parameters": {"dropout": {"low": 0.0, "high": 0.3, "log": True}}}, "log-scale"),
        ({"parameters": {"dropout": {"low": 0.0, "hi": 0.3}}}, "unknown key(s) hi"),
        ({"parameters": {"dropout": {"choices": [0.1, 1.5]}}}, "value 1.5 is not valid"),
        ({"parameters": {"batch_size": {"low": 1.5, "high": 8}}}, "must be ints"),
        (
            {
                "parameters": {"hidden_dims": {"choices": [[8]]}},
                "architectures": {"mlp": {}, "ft_transformer": {}},
            },
            "move it under architectures.mlp",
        ),
        ({"architectures": {"mlp": {"token_dim": {"choices": [8]}}}}, "belongs to ft_transformer"),
        ({"architectures": {"tabnet": {}}}, "architectures.tabnet is not a model"),
        ({"paramters": {}}, "unknown top-level key(s) paramters"),
        ({}, "draws nothing"),
    ],
)
def test_a_bad_space_names_the_file_and_the_key(tmp_path: Path, document, message) -> None:
    path = _write(tmp_path, document)
    with pytest.raises(SpaceError) as raised:
        load_space(path)
    assert str(path) in str(raised.value)
    assert message in str(raised.value)


def test_a_missing_or_unparsable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SpaceError, match="does not exist"):
        load_space(tmp_path / "nowhere.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("parameters: {dropout: [")
    with pytest.raises(SpaceError, match=r"broken\.yaml is not valid YAML"):
        load_space(broken)


def test_grid_needs_values_for_every_range(tmp_path: Path) -> None:
    path = _write(tmp_path, {"parameters": {"dropout": {"low": 0.0, "high": 0.3}}})
    with pytest.raises(SpaceError, match="'dropout' needs 'grid'"):
        load_space(path).grid()


def test_optuna_speaks_through_logging_not_stderr(make_settings, tmp_path, capfd, caplog) -> None:
    """A task's log shows stderr as errors: Optuna's "A new study created" is an INFO record."""
    import logging

    from pipeline_steps.tuning.study import create_study

    settings = make_settings(f"tuning.storage=sqlite:///{tmp_path / 'optuna.db'}")
    space = load_space(SHIPPED)
    with caplog.at_level(logging.INFO):
        create_study(settings, "quiet", space)
    assert "A new study created" not in capfd.readouterr().err
    created = [r for r in caplog.records if "A new study created" in r.getMessage()]
    assert created and created[0].levelname == "INFO"
