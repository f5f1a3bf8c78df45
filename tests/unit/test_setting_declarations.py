"""A setting is declared once: its checks, the trigger forms' Params, the train step's runtime
set and docs/configuration.md all come from that declaration and agree with each other."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from pipeline_steps.core import settings_docs
from pipeline_steps.core.setting_spec import declared, runtime_settings, undeclared
from pipeline_steps.core.settings import Settings, SettingsError, TrainSettings, load_settings
from tests.conftest import ROOT

SECTIONS = typing.get_type_hints(Settings)


@pytest.mark.parametrize("section", [f.name for f in dataclasses.fields(Settings)])
def test_every_setting_is_declared_with_a_doc(section: str) -> None:
    cls = SECTIONS[section]
    assert undeclared(cls) == []
    for d in declared(cls):
        assert len(d.spec.doc) > 10, f"{section}.{d.name} has no doc"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("features.window_days=4000", r"features\.window_days must be at least 2 and at most 3660"),
        ("train.epochs=0", r"train\.epochs must be at least 1 and at most 1000, got 0"),
        ("train.learning_rate=0", r"train\.learning_rate must be above 0 and at most 1, got 0\.0"),
        ("train.warmup_fraction=1", r"train\.warmup_fraction must be at least 0 and below 1"),
        ("orchestration.retries=-1", r"orchestration\.retries must not be negative, got -1"),
        ("drift.min_psi=.nan", r"drift\.min_psi must be a finite number, got nan"),
        ("promotion.reason=" + "x" * 501, r"promotion\.reason must be at most 500 characters"),
        ("kubernetes.rendezvous_port=70000", r"kubernetes\.rendezvous_port must be .*65535"),
    ],
)
def test_a_value_outside_its_declared_bounds_is_refused_naming_the_key(
    override: str, message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(overrides=[override], environ={})


def test_the_declared_bounds_themselves_are_accepted() -> None:
    settings = load_settings(
        overrides=["features.window_days=3660", "train.epochs=1000", "train.learning_rate=1"],
        environ={},
    )
    assert settings.features.window_days == 3660 and settings.train.epochs == 1000


def test_each_form_field_takes_its_type_and_bounds_from_the_setting() -> None:
    from jsonschema import Draft202012Validator

    from pipeline_steps.orchestration.params import FORM, TUNING_FORM

    for name, f in {**FORM, **TUNING_FORM}.items():
        section, _, key = f.setting.partition(".")
        d = next(d for d in declared(SECTIONS[section]) if d.name == key)
        validator = Draft202012Validator(f.schema)
        for bound, step in ((d.spec.minimum, -1), (d.spec.maximum, 1)):
            if bound is None:
                continue
            value = d.type(bound)
            assert validator.is_valid(value), f"form {name} refuses {value}, the setting's bound"
            load_settings(overrides=[f"{f.setting}={value}"], environ={})
            outside = d.type(bound + step)
            assert not validator.is_valid(outside), f"form {name} accepts {outside}"
            with pytest.raises(SettingsError, match=f.setting.replace(".", r"\.")):
                load_settings(overrides=[f"{f.setting}={outside}"], environ={})
        if d.spec.choices:
            assert f.schema["enum"] == list(d.spec.choices)


def test_the_runtime_set_is_what_changes_how_a_training_runs_not_its_result() -> None:
    """The train step's config hash leaves these out: a finished training stays valid when
    only they change. A setting that changes the weights must never be among them."""
    assert runtime_settings(TrainSettings) == {
        "nproc_per_node",
        "max_restarts",
        "collective_timeout_s",
        "preemption_grace_s",
        "keep_checkpoints",
        "prefetch",
        "data_workers",
        "log_every",
        "log_every_s",
        "system_metrics_s",
        "stall_timeout_s",
        "stall_allowance_s",
        # how a pipeline cuts the model and its batches: the same rows and steps, only the
        # summation order differs (as on another number of processes)
        "pipeline_stages",
        "pipeline_microbatches",
        "pipeline_schedule",
    }
    from pipeline_steps.steps.train.loop import _RUNTIME

    assert runtime_settings(TrainSettings) == _RUNTIME


def test_the_configuration_page_is_generated_from_the_declarations() -> None:
    page = ROOT / "docs" / "configuration.md"
    text = page.read_text()
    assert settings_docs.render(text) == text, (
        "docs/configuration.md is stale: run python -m pipeline_steps.core.settings_docs"
    )


def test_a_changed_declaration_makes_the_page_stale(monkeypatch) -> None:
    from pipeline_steps.core import setting_spec
    from pipeline_steps.core.settings import FeatureSettings

    text = (ROOT / "docs" / "configuration.md").read_text()
    window = next(d for d in declared(FeatureSettings) if d.name == "window_days")
    changed = dataclasses.replace(window, spec=dataclasses.replace(window.spec, maximum=999))
    others = tuple(changed if d.name == "window_days" else d for d in declared(FeatureSettings))
    monkeypatch.setitem(setting_spec._DECLARED, FeatureSettings, others)
    rendered = settings_docs.render(text)
    assert rendered != text and "At least 2 and at most 999." in rendered
