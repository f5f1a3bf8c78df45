"""docker-compose.yaml is the production profile on a Docker engine: the services that
``trainyard services up`` starts, a valid Compose file, secrets only from ``.env``, every
long-running service checked, limited and non-root, and settings the pipeline can load."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import re
import typing
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from pipeline_steps.core.settings import ENV_PREFIX, Settings, load_settings
from pipeline_steps.services.profile import PROCESSES, SECRETS, SERVICES
from tests.conftest import ROOT

COMPOSE_FILE = ROOT / "docker-compose.yaml"
ENV_EXAMPLE = ROOT / ".env.example"

ONE_SHOT = {"volume-init", "airflow-init"}
"""Services that do their work and exit; every other one runs for good."""
RUNS_AS_ROOT = {"volume-init"}
"""Gives fresh volumes (created by Docker as root's) to the services' users, and exits."""
AIRFLOW_SERVICES = {name for name in (*PROCESSES, "airflow-init") if name.startswith("airflow-")}
COMPOSE_SECRETS = (*SECRETS, "MLFLOW_TEAM_REVENUE_PASSWORD")
"""What compose needs secret: the profile's generated secrets (the Redis password among them),
and the MLflow password of the shipped hotel example's team, revenue."""


_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


class InterpolationError(ValueError):
    """A ``${VAR:?message}`` whose variable is missing: compose refuses to start with it."""


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """``value`` (loaded YAML) with ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``,
    ``${VAR:?error}``, ``${VAR?error}``, ``${VAR:+alt}`` and ``$$`` resolved as compose does."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def resolve(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name = match["braced"] or match["bare"]
        op, arg = match["op"], match["arg"] or ""
        found = env.get(name)
        missing = found is None or (bool(op) and op.startswith(":") and found == "")
        if op in (":-", "-"):
            return arg if missing else str(found)
        if op in (":?", "?"):
            if missing:
                raise InterpolationError(f"{name}: {arg}")
            return str(found)
        if op in (":+", "+"):
            return "" if missing else arg
        return found or ""

    return _VARIABLE.sub(resolve, value)


def variables_used(text: str) -> set[str]:
    return {m["braced"] or m["bare"] for m in _VARIABLE.finditer(text) if not m["escaped"]}


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=value`` lines of a compose env file; comments and blank lines skipped."""
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: {line!r} is not KEY=value"
        values[key.strip()] = value.strip()
    return values


def filled_env() -> dict[str, str]:
    """.env.example's values, each empty secret given a stand-in as an operator would."""
    env = read_env_file(ENV_EXAMPLE)
    return {key: value or f"stand-in-{key.lower()}" for key, value in env.items()}


def raw_compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def compose() -> dict[str, Any]:
    """The compose file as ``docker compose`` sees it with a filled-in ``.env``."""
    resolved = interpolate(raw_compose(), filled_env())
    assert isinstance(resolved, dict)
    return resolved


def compose_schema() -> dict[str, Any]:
    """The Compose Specification's JSON schema, as the ``check-jsonschema`` package ships it."""
    try:
        dist = metadata.distribution("check-jsonschema")
    except metadata.PackageNotFoundError:
        pytest.fail(
            "check-jsonschema (dev extra) ships the Compose schema: pip install -e '.[dev]'"
        )
    path = Path(str(dist.locate_file("check_jsonschema/builtin_schemas/vendor/compose-spec.json")))
    schema = json.loads(path.read_text())
    assert isinstance(schema, dict)
    return schema


def schema_errors(document: Mapping[str, Any]) -> list[str]:
    schema = compose_schema()
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator = validator_class(schema)
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(document)
    ]


def test_every_piece_of_the_profile_is_a_compose_service() -> None:
    services = compose()["services"]
    missing = [name for name in (*PROCESSES, *SERVICES) if name not in services]
    assert not missing, f"the production profile's {missing} have no compose service"


def test_compose_file_follows_the_compose_specification() -> None:
    assert schema_errors(compose()) == []


def _unknown_service_key(doc: dict[str, Any]) -> None:
    doc["services"]["redis"]["restart_policy"] = "always"


def _ports_not_a_list(doc: dict[str, Any]) -> None:
    doc["services"]["mlflow"]["ports"] = "5000:5000"


def _unknown_dependency_condition(doc: dict[str, Any]) -> None:
    doc["services"]["airflow-scheduler"]["depends_on"]["postgres"]["condition"] = "service_ready"


@pytest.mark.parametrize(
    "break_it", [_unknown_service_key, _ports_not_a_list, _unknown_dependency_condition]
)
def test_schema_rejects_a_broken_compose_file(break_it: Any) -> None:
    broken = copy.deepcopy(compose())
    break_it(broken)
    assert schema_errors(broken), f"{break_it.__name__} passed the Compose schema"


def test_env_example_lists_every_variable_and_secret() -> None:
    listed = set(read_env_file(ENV_EXAMPLE))
    used = variables_used(COMPOSE_FILE.read_text())
    assert used - listed == set(), "used in docker-compose.yaml, missing in .env.example"
    assert set(COMPOSE_SECRETS) - listed == set(), "secrets missing in .env.example"
    assert set(COMPOSE_SECRETS) <= used


def test_env_example_leaves_every_secret_empty_and_compose_refuses_it() -> None:
    example = read_env_file(ENV_EXAMPLE)
    assert {key: example[key] for key in COMPOSE_SECRETS if example[key]} == {}
    with pytest.raises(InterpolationError, match=r"set \w+ in \.env \(see \.env\.example\)"):
        interpolate(raw_compose(), example)


def _required(name: str) -> str:
    return f"${{{name}:?set {name} in .env (see .env.example)}}"


_SECRET_KEY = re.compile(r"PASSWORD|SECRET|TOKEN|FERNET|_KEY$|^REDISCLI_AUTH$")
_URL_PASSWORD = re.compile(r"://[^/@\s:]*:(?P<password>[^@\s/]+)@")


def test_secrets_come_only_from_env() -> None:
    text = COMPOSE_FILE.read_text()
    for name in COMPOSE_SECRETS:
        for match in re.finditer(r"\$\{" + name + r"\b[^}]*\}", text):
            assert match[0] == _required(name), f"{match[0]}: secrets are required, no default"
    for weak in ("change-me", "changeme", "password1234", "minioadmin", "password: airflow"):
        assert weak not in text.lower(), f"{weak!r} in docker-compose.yaml"
    for url_password in _URL_PASSWORD.finditer(text):
        assert url_password["password"].startswith("${"), f"a literal password in {url_password[0]}"

    secret_references = {_required(name) for name in COMPOSE_SECRETS}
    for name, service in raw_compose()["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if _SECRET_KEY.search(key) and not key.endswith(("_FILE", "_PATH")):
                assert value in secret_references, f"{name}: {key} is not read from .env"
        command = service.get("command") or []
        for flag, value in itertools.pairwise(command if isinstance(command, list) else []):
            if isinstance(flag, str) and re.search(r"pass|secret", flag):
                assert value in secret_references, f"{name}: {flag} is not read from .env"


def test_long_running_services_are_checked_limited_and_non_root() -> None:
    services = compose()["services"]
    assert {name for name, s in services.items() if s.get("restart") == "no"} == ONE_SHOT
    for name, service in services.items():
        uid = str(service.get("user", "")).partition(":")[0]
        assert uid not in ("", "0", "root") or name in RUNS_AS_ROOT, f"{name} runs as root"
        if name in ONE_SHOT:
            continue
        assert service.get("restart") == "unless-stopped", name
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        limits = service.get("deploy", {}).get("resources", {}).get("limits", {})
        assert limits.get("cpus") and limits.get("memory"), f"{name} has no resource limits"


def _seconds(duration: str) -> float:
    """A compose duration (``300s``, ``1m30s``, ``5s``) in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, f"not a duration: {duration}"
    return sum(float(n) * units[u] for n, u in parts)


def test_each_service_has_minutes_to_start_and_is_seen_ready_soon() -> None:
    """A busy two-core machine started MLflow's server in 130 s where the old 60 s start period
    and 5 retries gave it 110 s; a check passing within the start period makes a service healthy
    at once, so checks every 15 s at most keep an idle start prompt. ``start_interval`` would
    check more often while starting, but Compose refuses it on engines before 25 (Debian
    bookworm's, which scripts/container-engine.sh installs)."""
    for name, service in compose()["services"].items():
        if name in ONE_SHOT:
            continue
        check = service["healthcheck"]
        assert _seconds(check["start_period"]) >= 300, f"{name}: start_period too short"
        assert _seconds(check["interval"]) <= 15, f"{name}: not checked often enough"
        assert "start_interval" not in check, f"{name}: start_interval needs Docker Engine 25"


def test_mlflow_workers_are_not_killed_while_they_start_as_in_the_profile(tmp_path: Path) -> None:
    """The supervisor of MLflow's uvicorn workers waits as long for a starting worker's answer
    in compose as in the profile of processes, and the installed uvicorn takes the option."""
    import shlex

    from uvicorn.main import main as uvicorn_cli

    from pipeline_steps.services import processes
    from pipeline_steps.services.profile import load_profile

    in_compose = compose()["services"]["mlflow"]["command"]
    opts = in_compose[in_compose.index("--uvicorn-opts") + 1]
    profile = load_profile({"TRAINYARD_PROD_HOME": str(tmp_path)})
    in_profile = processes.command(profile, "mlflow")
    assert in_profile[in_profile.index("--uvicorn-opts") + 1] == opts
    parsed = uvicorn_cli.make_context("uvicorn", [*shlex.split(opts), "app:app"])
    assert parsed.params["timeout_worker_healthcheck"] == processes.MLFLOW_WORKER_HEALTHCHECK_S
    assert processes.MLFLOW_WORKER_HEALTHCHECK_S >= 60  # uvicorn's 5 s killed them under load


def test_workers_scale() -> None:
    services = compose()["services"]
    assert not [name for name, service in services.items() if "container_name" in service]
    worker = services["airflow-worker"]
    assert "ports" not in worker
    assert worker["command"] == ["airflow", "celery", "worker"]
    assert "$${HOSTNAME}" in COMPOSE_FILE.read_text()  # each replica pings its own node


def test_airflow_runs_celery_on_redis_and_postgres() -> None:
    services = compose()["services"]
    for name in AIRFLOW_SERVICES:
        env = services[name]["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
        assert env["AIRFLOW__CELERY__BROKER_URL"].endswith("@redis:6379/0"), name
        assert env["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("db+postgresql://trainyard:")
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].endswith("@postgres/airflow"), name
        assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/trainyard/dags", name
        assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == (
            "http://airflow-apiserver:8080/execution/"
        )
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy", name


def _known_settings() -> set[str]:
    """``section.key`` of every setting ``load_settings`` knows."""
    sections = typing.get_type_hints(Settings)
    return {f"{name}.{f.name}" for name, cls in sections.items() for f in dataclasses.fields(cls)}


def _setting(key: str) -> str | None:
    """``lake.root`` for ``TRAINYARD_LAKE__ROOT``; None for a variable that is no setting."""
    section, sep, name = key.removeprefix(ENV_PREFIX).partition("__")
    return f"{section.lower()}.{name.lower()}" if sep else None


def test_pipeline_settings_load_from_what_compose_sets() -> None:
    services = compose()["services"]
    envs = {
        name: {
            k: str(v)
            for k, v in services[name]["environment"].items()
            if k.startswith("TRAINYARD_")
        }
        for name in AIRFLOW_SERVICES
    }
    worker = envs["airflow-worker"]
    assert all(env == worker for env in envs.values()), "Airflow services disagree on settings"

    known = _known_settings()
    settings_keys = {key: _setting(key) for key in worker}
    unknown = {setting for setting in settings_keys.values() if setting and setting not in known}
    assert not unknown, f"not settings: {sorted(unknown)}"

    settings = load_settings(environ=worker)
    assert settings.lake.root == "s3://trainyard/lake"
    assert settings.mlflow.tracking_uri == "http://mlflow:5000"
    assert settings.mlflow.artifact_root == ""  # the MLflow server stores artifacts in s3
    assert settings.tuning.storage == "postgresql+psycopg2://trainyard@postgres/optuna"
    for key, value in worker.items():
        if value.startswith("postgresql"):  # no password: libpq reads PGPASSWORD
            assert value.split("://", 1)[1].split("@", 1)[0] == "trainyard", key


def test_worker_reaches_the_services_the_settings_name() -> None:
    worker = compose()["services"]["airflow-worker"]["environment"]
    assert worker["AWS_ENDPOINT_URL"] == "http://s3:9000"
    assert worker["MLFLOW_TRACKING_USERNAME"] == "trainyard"
    assert worker["PGPASSWORD"] == filled_env()["TRAINYARD_DB_PASSWORD"]
    assert worker["TRAINYARD_FEAST_REDIS"].startswith("redis:6379,password=")


def test_mlflow_server_has_auth_and_object_store() -> None:
    mlflow = compose()["services"]["mlflow"]
    command = mlflow["command"]
    assert command[command.index("--app-name") + 1] == "basic-auth"
    assert command[command.index("--artifacts-destination") + 1] == "s3://trainyard/mlflow"
    assert mlflow["environment"]["MLFLOW_AUTH_ADMIN_PASSWORD"]
    mount = next(v for v in mlflow["volumes"] if v.endswith(":ro") and "mlflow-auth.ini" in v)
    assert mount.split(":")[1] == mlflow["environment"]["MLFLOW_AUTH_CONFIG_PATH"]


def test_built_images_and_mounted_files_exist() -> None:
    for name, service in compose()["services"].items():
        if build := service.get("build"):
            assert (ROOT / build["dockerfile"]).is_file(), name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).is_file(), f"{name} mounts {source}, which is missing"


def test_env_file_stays_out_of_git_and_images() -> None:
    for ignore_file in (".gitignore", ".dockerignore"):
        lines = (ROOT / ignore_file).read_text().splitlines()
        assert ".env" in lines, f".env is not in {ignore_file}"


def test_images_run_as_a_non_root_user() -> None:
    for dockerfile in sorted((ROOT / "containers").glob("*Dockerfile")):
        users = re.findall(r"^USER\s+(\S+)", dockerfile.read_text(), flags=re.MULTILINE)
        assert users, f"{dockerfile.name} never sets USER"
        assert users[-1].partition(":")[0] not in ("0", "root"), f"{dockerfile.name} ends as root"


def test_prometheus_scrapes_what_the_profile_scrapes_on_the_compose_network() -> None:
    from pipeline_steps.services import prometheus

    service = compose()["services"]["prometheus"]
    mounts = dict(v.rsplit(":", 2)[:2] for v in service["volumes"] if v.startswith("./"))
    config_file, rules_file = (
        "./containers/prometheus/prometheus.yml",
        "./containers/prometheus/alerts.yml",
    )
    assert f"--config.file={mounts[config_file]}" in service["command"]
    admin = re.search(r"admin_username = (\S+)", (ROOT / "containers/mlflow-auth.ini").read_text())
    assert admin, "containers/mlflow-auth.ini names no admin"
    expected = prometheus.config(
        "pushgateway:9091",
        "mlflow:5000",
        rules=mounts[rules_file],
        mlflow_auth=(admin[1], "/run/secrets/mlflow_admin_password"),
        airflow="statsd-exporter:9102",
    )
    assert yaml.safe_load((ROOT / config_file).read_text()) == yaml.safe_load(expected)
    assert service["secrets"] == ["mlflow_admin_password"]
    assert raw_compose()["secrets"]["mlflow_admin_password"] == {
        "environment": "MLFLOW_ADMIN_PASSWORD"
    }
    # where the steps push and Airflow sends, and that MLflow serves its /metrics
    services = compose()["services"]
    worker = services["airflow-worker"]["environment"]
    assert worker["TRAINYARD_MONITORING__PUSHGATEWAY_URL"] == "http://pushgateway:9091"
    assert (worker["AIRFLOW__METRICS__STATSD_HOST"], worker["AIRFLOW__METRICS__STATSD_PORT"]) == (
        "statsd-exporter",
        "8125",
    )
    assert "--expose-prometheus" in services["mlflow"]["command"]


@pytest.mark.parametrize("deployment", ["compose", "profile"])
def test_mlflow_checks_a_password_once_a_minute_not_on_every_request(
    deployment: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLflow's basic auth verifies a scrypt hash (a tenth of a second of CPU) per request
    unless its credential cache is on; a training run makes hundreds of requests. Both
    deployments' auth configs turn it on, as MLflow itself reads them."""
    from mlflow.server.auth.config import read_auth_config

    from pipeline_steps.services.processes import write_mlflow_auth_config
    from pipeline_steps.services.profile import load_profile

    if deployment == "compose":
        path = ROOT / "containers/mlflow-auth.ini"
    else:
        profile = load_profile({"TRAINYARD_PROD_HOME": str(tmp_path)})
        write_mlflow_auth_config(profile)
        path = profile.mlflow_auth_config
    monkeypatch.setenv("MLFLOW_AUTH_CONFIG_PATH", str(path))
    monkeypatch.setenv("MLFLOW_AUTH_ADMIN_PASSWORD", "not-used-here-1")
    config = read_auth_config()
    assert config.auth_cache_ttl_seconds == 60, path
    assert config.default_permission == "READ", path
