"""The compose profile wires Airflow, Postgres and MLflow to the same settings the code reads."""

import yaml

from pipeline_steps.settings import load_settings
from tests.conftest import ROOT


def test_compose_services_and_settings() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
    services = compose["services"]
    assert {
        "postgres",
        "mlflow",
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
        "airflow-init",
    } <= set(services)
    scheduler = services["airflow-scheduler"]
    env = {k: str(v) for k, v in scheduler["environment"].items() if k.startswith("TRAINYARD_")}
    settings = load_settings(environ=env)  # every TRAINYARD_ variable is a valid setting
    assert settings.mlflow.tracking_uri == "http://mlflow:5000"
    assert settings.mlflow.artifact_root == ""  # the MLflow server serves artifacts
    assert scheduler["environment"]["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/trainyard/dags"
    for name, spec in services.items():
        build = spec.get("build")
        if build:
            assert (ROOT / build["dockerfile"]).is_file(), name
