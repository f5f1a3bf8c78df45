from pathlib import Path

import pytest

from pipeline_steps.core.settings import SettingsError, load_settings


def test_precedence_defaults_yaml_env_set(tmp_path: Path) -> None:
    config = tmp_path / "trainyard.yaml"
    config.write_text("train:\n  epochs: 3\n  batch_size: 128\ngate:\n  min_auc: 0.55\n")
    environ = {
        "TRAINYARD_HOME": str(tmp_path),
        "TRAINYARD_TRAIN__BATCH_SIZE": "64",
        "TRAINYARD_TRAIN__NPROC_PER_NODE": "2",
    }
    settings = load_settings(config, ["gate.min_auc=0.7"], environ=environ)
    assert settings.train.epochs == 3  # YAML over default
    assert settings.train.batch_size == 64  # env over YAML
    assert settings.train.nproc_per_node == 2
    assert settings.gate.min_auc == 0.7  # --set over YAML
    assert settings.train.learning_rate == 2e-3  # default kept


def test_defaults_live_under_trainyard_home(tmp_path: Path) -> None:
    settings = load_settings(environ={"TRAINYARD_HOME": str(tmp_path)})
    assert settings.lake.root == str(tmp_path / "lake")
    assert settings.mlflow.tracking_uri == f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_list_and_mapping_settings_parse_from_env(tmp_path: Path) -> None:
    environ = {
        "TRAINYARD_HOME": str(tmp_path),
        "TRAINYARD_TRAIN__HIDDEN_DIMS": "[32, 16]",
        "TRAINYARD_KUBERNETES__NODE_SELECTOR": "{gpu: a100}",
    }
    settings = load_settings(environ=environ)
    assert settings.train.hyperparameters["hidden_dims"] == (32, 16)
    assert settings.kubernetes.node_selector == {"gpu": "a100"}


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("train.epochz=3", "train.epochz"),
        ("train.epochs=abc", "train.epochs"),
        ("train.epochs=0", "train.epochs"),
        ("orchestration.runtime=docker", "orchestration.runtime"),
        ("features.window_days=1", "features.window_days"),
        ("nosuch.key=1", "nosuch"),
        ("gate.min_auc=1.5", "gate.min_auc"),
    ],
)
def test_bad_settings_name_the_key(tmp_path: Path, override: str, named: str) -> None:
    with pytest.raises(SettingsError, match=named.replace(".", r"\.")):
        load_settings(overrides=[override], environ={"TRAINYARD_HOME": str(tmp_path)})


def test_bad_config_file_is_named(tmp_path: Path) -> None:
    config = tmp_path / "broken.yaml"
    config.write_text("train: [1, 2\n")
    with pytest.raises(SettingsError, match=r"broken\.yaml"):
        load_settings(config, environ={})
    with pytest.raises(SettingsError, match=r"missing\.yaml"):
        load_settings(tmp_path / "missing.yaml", environ={})


def test_fingerprint_tracks_settings(tmp_path: Path) -> None:
    environ = {"TRAINYARD_HOME": str(tmp_path)}
    a = load_settings(environ=environ)
    assert a.fingerprint() == load_settings(environ=environ).fingerprint()
    assert (
        a.fingerprint() != load_settings(overrides=["train.seed=1"], environ=environ).fingerprint()
    )


def test_every_setting_is_documented_in_its_section() -> None:
    import dataclasses

    from pipeline_steps.core.settings import Settings
    from tests.conftest import ROOT

    text = (ROOT / "docs" / "configuration.md").read_text()
    sections = {part.split("`", 1)[0]: part for part in text.split("\n## `")[1:] if "`" in part}
    for section in dataclasses.fields(Settings):
        assert section.name in sections, f"docs/configuration.md has no section {section.name}"
        for key in dataclasses.fields(section.default_factory()):  # type: ignore[misc]
            assert f"`{key.name}`" in sections[section.name], f"{section.name}.{key.name}"


@pytest.mark.parametrize(
    "key",
    [
        "numeric",
        "categorical",
        "psi_threshold",
        "js_threshold",
        "missing_threshold",
        "sample_size",
        "batch_rows",
    ],
)
def test_a_retired_drift_setting_names_the_key_and_the_monitor(tmp_path: Path, key: str) -> None:
    environ = {"TRAINYARD_HOME": str(tmp_path)}
    said = rf"retired setting\(s\) drift\.{key}: drift is measured by the drift monitor now"
    with pytest.raises(SettingsError, match=said):
        load_settings(overrides=[f"drift.{key}=1"], environ=environ)
    config = tmp_path / "old.yaml"
    config.write_text(f"drift:\n  {key}: 1\n  current_days: 7\n")
    with pytest.raises(SettingsError, match=said):
        load_settings(config, environ=environ)
    with pytest.raises(SettingsError, match=said):
        load_settings(environ={**environ, f"TRAINYARD_DRIFT__{key.upper()}": "1"})


def test_a_recorded_settings_document_loads_without_its_retired_keys(tmp_path: Path) -> None:
    import json

    import yaml

    from pipeline_steps.core.settings import RETIRED_SETTINGS, without_retired

    environ = {"TRAINYARD_HOME": str(tmp_path)}
    document = json.loads(json.dumps(load_settings(environ=environ).to_dict()))
    current = {f"{section}.{key}" for section, values in document.items() for key in values}
    assert not current & set(RETIRED_SETTINGS)  # a retired key is no setting any more
    # as an earlier version recorded it (a lineage's settings, read back by a replay)
    document["drift"] |= {"psi_threshold": 0.2, "numeric": [], "sample_size": 100_000}
    config = tmp_path / "recorded.yaml"
    config.write_text(yaml.safe_dump(without_retired(document)))
    assert (
        load_settings(config, environ=environ).to_dict() == load_settings(environ=environ).to_dict()
    )


def test_the_settings_a_config_changes_travel_through_the_environment(tmp_path: Path) -> None:
    """What a pod gets: each changed setting as TRAINYARD_<SECTION>__<KEY>, and the loader
    reads them back to the same settings (numbers, booleans, strings that look like numbers,
    lists, mappings)."""
    from pipeline_steps.core.settings import settings_environment

    config = tmp_path / "settings.yaml"
    config.write_text(
        "train:\n  epochs: 7\n  model: ft_transformer\n  device: cpu\n"
        "validation:\n  data_docs: false\n"
        "kubernetes:\n  namespace: '0123'\n  node_selector: {pool: gpu}\n"
        "  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]\n"
    )
    home = {"TRAINYARD_HOME": str(tmp_path / "home")}
    baseline = load_settings(environ=home)
    settings = load_settings(config, environ=home)
    env = settings_environment(settings, baseline)
    assert env["TRAINYARD_TRAIN__EPOCHS"] == "7"
    assert env["TRAINYARD_KUBERNETES__NAMESPACE"] == '"0123"'  # digits, a string
    assert "TRAINYARD_LAKE__ROOT" not in env  # the same home: nothing of it differs
    assert load_settings(environ={**home, **env}) == settings
    assert settings_environment(baseline, baseline) == {}
    # a file of this machine's is no setting to hand a pod: its image holds the domain's file
    suites = load_settings(config, ["validation.expectations_dir=/srv/suites"], environ=home)
    assert settings_environment(suites, baseline)["TRAINYARD_VALIDATION__EXPECTATIONS_DIR"]
    assert "TRAINYARD_VALIDATION__EXPECTATIONS_DIR" not in settings_environment(
        suites, baseline, paths=False
    )


def test_a_settings_file_reads_its_relative_paths_from_its_own_folder(
    tmp_path: Path, monkeypatch
) -> None:
    """A domain's file works from any working directory (a Celery worker's home, an image's):
    its relative files and folders are read from the file's folder; absolute paths and URLs
    stay; relative values from the environment or ``--set`` are read from the working
    directory."""
    folder = tmp_path / "domains" / "rooms"
    folder.mkdir(parents=True)
    config = folder / "settings.yaml"
    config.write_text(
        "validation:\n  expectations_dir: expectations\n"
        "features:\n  feature_repo: /srv/rooms/feature_repo\n"
        "tuning:\n  search_space: ../shared/tuning.yaml\n"
        "ingest:\n  path: s3://lake/{dataset}/date={date}/*.parquet\n"
    )
    monkeypatch.chdir(tmp_path)
    settings = load_settings(config, environ={"TRAINYARD_HOME": str(tmp_path)})
    assert settings.validation.expectations_dir == str(folder / "expectations")
    assert settings.features.feature_repo == "/srv/rooms/feature_repo"
    assert settings.tuning.search_space == str(folder / "../shared/tuning.yaml")
    assert settings.ingest.path == "s3://lake/{dataset}/date={date}/*.parquet"
    overridden = load_settings(
        config,
        ["validation.expectations_dir=suites"],
        environ={"TRAINYARD_HOME": str(tmp_path), "TRAINYARD_FEATURES__FEATURE_REPO": "repo"},
    )
    # read from the working directory, and held absolute so a recorded run means the same files
    assert overridden.validation.expectations_dir == str(tmp_path / "suites")
    assert overridden.features.feature_repo == str(tmp_path / "repo")
