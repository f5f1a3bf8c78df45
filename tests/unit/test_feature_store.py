"""The Feast adapter: a store sees its folder while open and leaves the environment as it was;
an engine's materialisation engine loads only an online store its workers can reach."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from flight_delay.domain import DOMAIN

from pipeline_steps.core.errors import StepError
from pipeline_steps.core.feature_store import (
    FEAST_DIR,
    FEAST_PROJECT,
    online_reachable,
    open_store,
)
from pipeline_steps.core.settings import FeatureSettings, load_settings


def test_a_store_leaves_the_environment_as_it_found_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(FEAST_DIR, "/somewhere/else")
    monkeypatch.delenv(FEAST_PROJECT, raising=False)
    with open_store(load_settings().features, str(tmp_path), project="trainyard_0123") as store:
        assert os.environ[FEAST_DIR] == str(tmp_path)
        assert os.environ[FEAST_PROJECT] == "trainyard_0123"
        assert store.get_feature_service(DOMAIN.feature_service).name == DOMAIN.feature_service
    assert (tmp_path / "registry.db").is_file()
    assert os.environ[FEAST_DIR] == "/somewhere/else"
    assert FEAST_PROJECT not in os.environ


def test_a_failing_block_restores_the_environment_too(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(FEAST_DIR, raising=False)
    with pytest.raises(RuntimeError), open_store(load_settings().features, str(tmp_path)):
        raise RuntimeError("the caller failed")
    assert FEAST_DIR not in os.environ


def test_a_missing_config_names_the_setting(tmp_path: Path) -> None:
    with (
        pytest.raises(StepError, match=r"features.store_config: .* has no absent.yaml"),
        open_store(load_settings().features, str(tmp_path), config="absent.yaml"),
    ):
        pass


def test_the_online_stores_the_workers_reach_are_services_not_files() -> None:
    assert not online_reachable({})  # Feast's default: SQLite
    assert not online_reachable({"online_store": "sqlite"})
    assert not online_reachable({"online_store": {"type": "sqlite", "path": "/tmp/o.db"}})
    assert online_reachable({"online_store": {"type": "redis", "connection_string": "r:6379"}})
    assert online_reachable({"online_store": {"type": "postgres"}})


def _repo_with(tmp_path: Path, online: str) -> FeatureSettings:
    repo = tmp_path / "repo"
    shutil.copytree(load_settings().features.feature_repo, repo)
    (repo / "feature_store.yaml").write_text(
        "project: trainyard\nprovider: local\nregistry: ${TRAINYARD_FEAST_DIR}/registry.db\n"
        f"online_store: {online}\noffline_store: {{type: duckdb}}\n"
        "entity_key_serialization_version: 3\n"
    )
    return FeatureSettings(feature_repo=str(repo))


@pytest.mark.parametrize(
    ("online", "engine"),
    [
        ("{type: sqlite, path: ${TRAINYARD_FEAST_DIR}/online.db}", "local"),
        ("{type: redis, connection_string: '127.0.0.1:1'}", "spark.engine"),
    ],
)
def test_an_engines_materialisation_engine_loads_only_an_online_store_it_reaches(
    tmp_path: Path, online: str, engine: str
) -> None:
    settings = _repo_with(tmp_path, online)
    wanted = {"type": "spark.engine"}
    with open_store(settings, str(tmp_path / "run"), materialization=wanted) as store:
        assert store.config.batch_engine.type == engine
    with open_store(settings, str(tmp_path / "run")) as store:
        assert store.config.batch_engine.type == "local"
