"""The Feast adapter: a store sees its folder while open and leaves the environment as it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.feature_store import FEAST_DIR, FEAST_PROJECT, open_store
from pipeline_steps.core.settings import FeatureSettings
from pipeline_steps.domain.flights import DOMAIN


def test_a_store_leaves_the_environment_as_it_found_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(FEAST_DIR, "/somewhere/else")
    monkeypatch.delenv(FEAST_PROJECT, raising=False)
    with open_store(FeatureSettings(), str(tmp_path), project="trainyard_0123") as store:
        assert os.environ[FEAST_DIR] == str(tmp_path)
        assert os.environ[FEAST_PROJECT] == "trainyard_0123"
        assert store.get_feature_service(DOMAIN.feature_service).name == DOMAIN.feature_service
    assert (tmp_path / "registry.db").is_file()
    assert os.environ[FEAST_DIR] == "/somewhere/else"
    assert FEAST_PROJECT not in os.environ


def test_a_failing_block_restores_the_environment_too(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(FEAST_DIR, raising=False)
    with pytest.raises(RuntimeError), open_store(FeatureSettings(), str(tmp_path)):
        raise RuntimeError("the caller failed")
    assert FEAST_DIR not in os.environ


def test_a_missing_config_names_the_setting(tmp_path: Path) -> None:
    with (
        pytest.raises(StepError, match=r"features.store_config: .* has no absent.yaml"),
        open_store(FeatureSettings(), str(tmp_path), config="absent.yaml"),
    ):
        pass
