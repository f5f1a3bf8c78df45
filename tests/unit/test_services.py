"""The production profile's settings and secrets (no process started here; the integration test
tests/integration/test_production_profile.py starts them)."""

import os
import stat
from pathlib import Path

import pytest

from pipeline_steps.core.settings import load_settings
from pipeline_steps.services.profile import DATABASES, SECRETS, ensure_env, load_profile


def test_env_file_is_private_complete_and_kept(tmp_path: Path) -> None:
    env_file = tmp_path / "prod" / ".env"
    first = ensure_env(env_file, environ={"AIRFLOW_PORT": "18080"})
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert set(SECRETS) <= set(first)
    assert all(len(first[key]) >= 32 for key in SECRETS), "secrets are long and random"
    assert first["AIRFLOW_PORT"] == "18080"  # the environment wins when the file is written
    again = ensure_env(env_file, environ={"AIRFLOW_PORT": "9999"})
    assert again == first  # a second start keeps every secret and setting
    other = ensure_env(tmp_path / "other" / ".env", environ={})
    assert all(other[key] != first[key] for key in SECRETS)


def test_a_hand_edited_env_file_error_names_the_line(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("# comment\nAIRFLOW_PORT=8080\nnot a setting\n")
    with pytest.raises(ValueError, match=r"\.env:3: expected KEY=value"):
        ensure_env(env_file, environ={})


def test_urls_and_settings_carry_no_secret(tmp_path: Path) -> None:
    profile = load_profile({"TRAINYARD_PROD_HOME": str(tmp_path)})
    secrets = [profile[key] for key in SECRETS]
    passwords_allowed = {
        "PGPASSWORD",
        "MLFLOW_TRACKING_PASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "AIRFLOW__CORE__FERNET_KEY",
        "AIRFLOW__API__SECRET_KEY",
        "AIRFLOW__API_AUTH__JWT_SECRET",
    }
    for key, value in profile.airflow_env().items():
        if key not in passwords_allowed:
            assert not any(secret in value for secret in secrets), key
    pipeline = profile.pipeline_env()
    settings = load_settings(
        environ={k: v for k, v in pipeline.items() if k.startswith("TRAINYARD_")}
    )
    assert settings.lake.root == "s3://trainyard/lake"
    assert settings.features.store_config == "feature_store.production.yaml"
    assert settings.tuning.storage == profile.database_url("optuna")
    assert settings.monitoring.pushgateway_url == profile.pushgateway_url


def test_prometheus_scrapes_the_profile_and_logs_in_to_mlflow_from_a_private_file(
    tmp_path: Path,
) -> None:
    import yaml

    from pipeline_steps.services import processes as proc

    profile = load_profile({"TRAINYARD_PROD_HOME": str(tmp_path), "STATSD_EXPORTER_PORT": "19102"})
    proc.write_prometheus_config(profile)
    text = (profile.prometheus_home / "prometheus.yml").read_text()
    assert profile["MLFLOW_ADMIN_PASSWORD"] not in text
    jobs = {job["job_name"]: job for job in yaml.safe_load(text)["scrape_configs"]}
    assert jobs["airflow"]["static_configs"] == [{"targets": ["127.0.0.1:19102"]}]
    login = jobs["mlflow"]["basic_auth"]
    password_file = Path(login["password_file"])
    assert login["username"] == profile["MLFLOW_ADMIN_USER"]
    assert password_file.read_text() == profile["MLFLOW_ADMIN_PASSWORD"]
    assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
    # Airflow sends its metrics where the exporter takes them; MLflow serves /metrics
    env = profile.airflow_env()
    assert env["AIRFLOW__METRICS__STATSD_PORT"] == profile["STATSD_PORT"]
    assert proc.command(profile, "statsd-exporter")[-3:] == [
        f"127.0.0.1:{profile['STATSD_PORT']}",
        "--listen",
        "127.0.0.1:19102",
    ]
    assert "--expose-prometheus" in proc.command(profile, "mlflow")
    assert {profile.database(name) for name in DATABASES} == {
        f"trainyard_{name}" for name in DATABASES
    }


def test_the_production_feast_config_reads_its_connections_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from feast.repo_config import load_repo_config

    from pipeline_steps.core.settings import PROJECT_ROOT

    monkeypatch.setenv("TRAINYARD_FEAST_PROJECT", "trainyard_0123456789ab")
    monkeypatch.setenv("TRAINYARD_FEAST_REGISTRY", "postgresql+psycopg2://u@h:5432/feast")
    monkeypatch.setenv("TRAINYARD_FEAST_REDIS", "h:6379,db=2")
    repo = PROJECT_ROOT / "examples" / "flight_delay" / "feature_repo"
    config = load_repo_config(repo, repo / "feature_store.production.yaml")
    assert config.project == "trainyard_0123456789ab"
    assert config.registry.registry_type == "sql"
    assert config.registry.path == "postgresql+psycopg2://u@h:5432/feast"
    assert config.online_store.type == "redis"
    assert config.online_store.connection_string == "h:6379,db=2"


def test_a_spark_cluster_in_the_profile_runs_the_steps_data_work(tmp_path: Path) -> None:
    from pipeline_steps.services import processes

    profile = load_profile({"TRAINYARD_PROD_HOME": str(tmp_path)})
    assert profile.spark_workers == 0
    assert "TRAINYARD_ENGINE__NAME" not in profile.pipeline_env()
    values = ensure_env(profile.env_file, SPARK_WORKERS="2")
    profile = load_profile({"TRAINYARD_PROD_HOME": str(tmp_path)})
    assert values["SPARK_WORKERS"] == "2" and profile.spark_workers == 2
    env = profile.airflow_env()
    assert env["TRAINYARD_ENGINE__NAME"] == "spark"
    assert env["TRAINYARD_ENGINE__SPARK_MASTER"] == "spark://127.0.0.1:7077"
    assert env["TRAINYARD_ENGINE__SPARK_DIR"] == "s3://trainyard/spark"
    master = processes.command(profile, "spark-master")
    assert "org.apache.spark.deploy.master.Master" in master and "7077" in master
    worker = processes.command(profile, "spark-worker-2")
    assert worker[-1] == "spark://127.0.0.1:7077" and "8092" in worker
    work_dir = worker[worker.index("--work-dir") + 1]
    assert work_dir == processes.spark_worker_dir(profile, 2)
    assert processes.environment(profile, "spark-worker-2")["SPARK_LOCAL_DIRS"] == (
        f"{work_dir}/local"
    )
    # the S3 stand-in checks the signatures of Hadoop's connector too
    assert processes.command(profile, "s3")[1:3] == ["-m", "pipeline_steps.services.s3_server"]


def test_the_cluster_does_not_inherit_the_folders_of_the_process_that_started_it(
    tmp_path: Path,
) -> None:
    """Feast sets PROMETHEUS_MULTIPROC(ESS)_DIR to a temporary folder of its own on import: a
    worker started from such a process handed its executors a folder they could not open."""
    from pipeline_steps.services import spark_cluster

    starter = {
        "PATH": "/usr/bin",
        "PROMETHEUS_MULTIPROC_DIR": "/tmp/feast_metrics_x",
        "PROMETHEUS_MULTIPROCESS_DIR": "/tmp/feast_metrics_x",
        "SPARK_HOME": "/elsewhere",
    }
    for env in (
        spark_cluster.worker_environment(str(tmp_path), starter),
        spark_cluster.master_environment(starter, str(tmp_path)),
    ):
        assert env["PATH"] == "/usr/bin"
        assert not set(spark_cluster.STARTERS_OWN) & env.keys()
        assert env["SPARK_HOME"] == str(spark_cluster.spark_home())


@pytest.fixture
def root_with_unshare(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Root on Linux with ``unshare``, and ``can_isolate`` (answered once per process) asked
    again here and forgotten after; the module, for the test to patch further."""
    from pipeline_steps.services import spark_cluster as sc

    monkeypatch.setattr(sc.sys, "platform", "linux")
    monkeypatch.setattr(sc.os, "geteuid", lambda: 0)
    monkeypatch.setattr(sc.shutil, "which", lambda name: f"/usr/bin/{name}")
    sc.can_isolate.cache_clear()
    yield sc
    sc.can_isolate.cache_clear()


@pytest.mark.parametrize("under_tmp", ["spark", "python"])
def test_workers_share_tmp_when_spark_or_python_lies_under_it(
    root_with_unshare, monkeypatch: pytest.MonkeyPatch, under_tmp: str
) -> None:
    """A checkout cloned under /tmp: a worker's own empty /tmp would hide the Spark launcher or
    the executors' Python, so the workers keep the machine's /tmp."""
    sc = root_with_unshare
    outside = Path("/opt/venv")
    inside = Path("/tmp/ci/clone/.venv")
    monkeypatch.setattr(sc, "spark_home", lambda: inside if under_tmp == "spark" else outside)
    monkeypatch.setattr(sc.sys, "prefix", str(inside if under_tmp == "python" else outside))
    probes: list[list[str]] = []
    monkeypatch.setattr(sc.subprocess, "run", lambda argv, **_: probes.append(argv))
    assert sc.can_isolate() is False
    assert probes == []  # decided before any namespace is tried


def test_workers_get_their_own_tmp_where_they_can(
    root_with_unshare, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    sc = root_with_unshare
    monkeypatch.setattr(sc, "spark_home", lambda: Path("/opt/venv/pyspark"))
    monkeypatch.setattr(sc.sys, "prefix", "/opt/venv")
    monkeypatch.setattr(
        sc.subprocess, "run", lambda argv, **_: subprocess.CompletedProcess(argv, 0)
    )
    assert sc.can_isolate() is True


def _deployment_of_two_teams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A profile under ``tmp_path`` whose deployment has two teams: the hotel example's
    ``revenue`` and ``pricing``, whose domain ``rooms`` a domains folder holds."""
    from tests.conftest import ROOT

    domains = tmp_path / "domains"
    domains.mkdir()
    hotel = ROOT / "examples" / "hotel_rates"
    (domains / "rooms.yaml").write_text(
        "domain:\n  module: hotel_rates.domain\n  name: rooms\n  team: pricing\n"
        f"features:\n  feature_repo: {hotel}/feature_repo\n  project: hotel_rates\n"
        f"validation:\n  expectations_dir: {hotel}/expectations\n"
    )
    monkeypatch.setenv("TRAINYARD_PROD_HOME", str(tmp_path / "prod"))
    monkeypatch.setenv("TRAINYARD_ORCHESTRATION__DOMAINS_DIR", str(domains))


def test_init_writes_every_team_s_mlflow_password_and_keeps_it(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """``services init`` alone (nothing started) already holds the password of each team of
    the deployment's domains: the hotel example's ``revenue`` and a domains folder's
    ``pricing``; a second init changes none."""
    from pipeline_steps.services.cli import main
    from pipeline_steps.services.profile import read_env_file

    _deployment_of_two_teams(tmp_path, monkeypatch)
    assert main(["init"]) == 0
    assert "MLflow passwords of teams pricing, revenue" in capsys.readouterr().out
    first = read_env_file(tmp_path / "prod" / ".env")
    assert len(first["MLFLOW_TEAM_PRICING_PASSWORD"]) >= 24
    assert len(first["MLFLOW_TEAM_REVENUE_PASSWORD"]) >= 24
    assert main(["init"]) == 0
    assert read_env_file(tmp_path / "prod" / ".env") == first


def test_each_team_has_a_worker_of_its_own_holding_its_password_alone(
    tmp_path: Path, monkeypatch
) -> None:
    """With two teams (the hotel example's ``revenue``, a domains folder's ``pricing``) the
    profile runs a Celery worker per team on the team's queue, each holding that team's MLflow
    password and no other's; the shared worker (the default queue) and the other Airflow
    processes hold none; each domain's tasks go to its team's queue."""
    from pipeline_steps.core.deployment import domain_settings_files
    from pipeline_steps.orchestration.domains import default_args
    from pipeline_steps.services import processes
    from pipeline_steps.services.cli import main
    from pipeline_steps.services.profile import load_profile

    _deployment_of_two_teams(tmp_path, monkeypatch)
    assert main(["init"]) == 0
    profile = load_profile()
    workers = processes.team_workers(profile)
    assert workers == ["airflow-worker-pricing", "airflow-worker-revenue"]
    command = processes.command(profile, "airflow-worker-revenue")
    assert command[-4:] == ["--queues", "team-revenue", "--celery-hostname", "revenue@%h"]
    assert processes.command(profile, "airflow-worker")[-2:] == ["--queues", "default"]
    ports = set()
    for name, own in (("airflow-worker-pricing", "PRICING"), ("airflow-worker-revenue", "REVENUE")):
        env = processes.environment(profile, name)
        held = sorted(k for k in env if k.startswith("MLFLOW_TEAM_"))
        assert held == [f"MLFLOW_TEAM_{own}_PASSWORD"], (name, held)
        assert env[held[0]] == profile[held[0]] == env["MLFLOW_TRACKING_PASSWORD"]
        assert env["MLFLOW_TRACKING_USERNAME"] == f"team-{own.lower()}"
        assert profile["MLFLOW_TRACKING_PASSWORD"] not in env.values()  # not the deployment's
        ports.add(env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"])
    for name in ("airflow-worker", "airflow-scheduler", "airflow-apiserver"):
        env = processes.environment(profile, name)
        assert not [k for k in env if k.startswith("MLFLOW_TEAM_")], name
        ports.add(env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"])
    assert len(ports) == 3  # the shared worker's and one more per team: no two on one port
    # the DAGs the profile's scheduler parses send each team's tasks to its queue
    scheduler = processes.environment(profile, "airflow-scheduler")
    queues = {
        d.name: default_args(d.settings).get("queue")
        for d in domain_settings_files(scheduler, refused=[])
    }
    assert queues == {"flight_delay": None, "hotel_rate": "team-revenue", "rooms": "team-pricing"}


def test_services_env_prints_the_profile_s_exports_a_shell_reads_back(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    import json
    import subprocess

    from pipeline_steps.services.cli import main

    monkeypatch.setenv("TRAINYARD_PROD_HOME", str(tmp_path / "prod home"))
    assert main(["env"]) == 0
    printed = capsys.readouterr().out
    expected = load_profile({**os.environ}).airflow_env()
    code = 'eval "$EXPORTS"; python3 -c "import json, os; print(json.dumps(dict(os.environ)))"'
    read = subprocess.run(
        ["bash", "-c", code],
        env={"EXPORTS": printed, "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    )
    environ = json.loads(read.stdout)
    assert {key: environ[key] for key in expected} == expected
