"""The model registry: one declaration per model, read by settings, the search space and the
packaged model; every mistake named by its setting."""

import pytest
import torch

from pipeline_steps.core.models import (
    BatchShape,
    Hyperparameter,
    ModelError,
    code_paths,
    model,
    resolve,
)
from pipeline_steps.core.settings import SettingsError, load_settings, without_retired
from pipeline_steps.steps.train.heads import Head
from pipeline_steps.steps.train.models import build, rebuild

SHAPE = BatchShape(cardinalities=[5, 3], numeric_width=4)


def test_built_in_models_declare_their_hyperparameters() -> None:
    mlp, ft = resolve("mlp"), resolve("ft_transformer")
    assert mlp.defaults == {"hidden_dims": (128, 64), "embedding_dim": 8, "dropout": 0.1}
    assert ft.defaults == {
        "token_dim": 32,
        "transformer_layers": 2,
        "attention_heads": 4,
        "dropout": 0.1,
    }
    with pytest.raises(ModelError, match=r"attention_heads \(3\) must divide.*token_dim \(32\)"):
        ft.values({"attention_heads": 3})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.model=tabnet"], "train.model 'tabnet' is unknown; registered: mlp"),
        (["train.model=nowhere.module:net"], r"module nowhere\.module cannot be imported"),
        (["train.model=pipeline_steps.core.models:BatchShape"], "not a model declared"),
        (["train.embedding_dim=0"], r"train\.embedding_dim must be at least 1, got 0"),
        (["train.hidden_dims=[64, 0]"], r"train\.hidden_dims must be at least 1"),
        (["train.dropout=1.0"], r"train\.dropout must be below 1"),
        (["train.embedding_dim=wide"], r"train\.embedding_dim expects int, got 'wide'"),
        (["train.token_dim=16"], r"train\.token_dim.*hyperparameters of model mlp"),
    ],
)
def test_a_bad_model_setting_is_named(overrides, message) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(overrides=overrides, environ={})


def test_settings_recorded_before_the_registry_load_with_their_model() -> None:
    recorded = {
        "train": {
            "model": "ft_transformer",
            "hidden_dims": [128, 64],
            "embedding_dim": 8,
            "token_dim": 16,
            "transformer_layers": 1,
            "attention_heads": 2,
            "dropout": 0.2,
        }
    }
    cleaned = without_retired(recorded)["train"]
    assert "hidden_dims" not in cleaned and "embedding_dim" not in cleaned
    assert cleaned["token_dim"] == 16 and cleaned["dropout"] == 0.2


def test_a_declared_model_is_built_for_each_task_and_rebuilt_from_its_record() -> None:
    @model(hyperparameters=[Hyperparameter("width", int, 8, low=1)])
    def linear(shape: BatchShape, *, width: int) -> torch.nn.Module:
        return torch.nn.Linear(shape.numeric_width, shape.outputs)

    assert linear.values({"width": "12"}) == {"width": 12}
    with pytest.raises(ModelError, match="not a hyperparameter of model"):
        linear.values({"depth": 2})
    assert linear.build_model(
        BatchShape(cardinalities=[], numeric_width=3, outputs=4), {"width": 1}
    )

    settings = load_settings(overrides=["train.hidden_dims=[16]"], environ={})
    for outputs in (1, 3):
        shape = BatchShape(cardinalities=[5, 3], numeric_width=4, outputs=outputs)
        net, config = build(settings.train, shape)
        codes, numeric = torch.zeros(7, 2, dtype=torch.long), torch.zeros(7, 4)
        assert net(codes, numeric).shape == (7, outputs)
        again = rebuild("mlp", config)
        again.load_state_dict(net.state_dict())


def test_a_model_recorded_before_the_registry_is_rebuilt() -> None:
    legacy = {"cardinalities": [5, 3], "numeric_width": 4, "token_dim": 8, "layers": 1}
    legacy |= {"heads": 2, "dropout": 0.0}
    net = rebuild("ft_transformer", legacy)
    out = net(torch.zeros(2, 2, dtype=torch.long), torch.zeros(2, 4))
    assert Head().predict(out).shape == (2,)


def test_only_a_users_model_ships_its_package() -> None:
    assert code_paths("mlp") == []
    assert code_paths("pipeline_steps.core.builtin_models:MLP")[0].endswith("pipeline_steps")
