"""What the production profile is made of: its processes, the services it uses, its secrets, and
the environment each process gets.

The same names describe ``docker-compose.yaml``: every process here has a compose service of the
same name (``s3`` is MinIO there, moto's server here), and PostgreSQL and Redis are the machine's
own services here and containers there.

Everything the profile needs to know comes from one ``.env`` file (mode 0600) in its home
(``TRAINYARD_PROD_HOME``, default ``./.trainyard-prod``): generated secrets, and the ports,
database prefix and Redis databases, taken from the environment when the file is first written.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from base64 import urlsafe_b64encode
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline_steps.core.settings import PROJECT_ROOT

PROCESSES: tuple[str, ...] = (
    "s3",
    "mlflow",
    "pushgateway",
    "statsd-exporter",
    "prometheus",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker",
)
"""Processes ``trainyard services up`` starts, in start order."""

SPARK_PROCESSES: tuple[str, ...] = ("spark-master", "spark-worker-1", "spark-worker-2")
"""The Spark standalone cluster ``trainyard services up --spark`` starts besides, after S3."""

SERVICES: tuple[str, ...] = ("postgres", "redis")
"""Services the profile uses and does not start (the machine's own; containers in compose)."""

SECRETS: tuple[str, ...] = (
    "TRAINYARD_DB_PASSWORD",
    "AIRFLOW_ADMIN_PASSWORD",
    "AIRFLOW_JWT_SECRET",
    "AIRFLOW_API_SECRET_KEY",
    "AIRFLOW_FERNET_KEY",
    "MLFLOW_ADMIN_PASSWORD",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_FLASK_SERVER_SECRET_KEY",
    "S3_SECRET_ACCESS_KEY",
    "REDIS_PASSWORD",  # docker-compose's Redis; the machine's own Redis here has none
)
"""Generated secrets in ``.env``; none of them may appear in logs, manifests, lineage or MLflow."""

DEFAULTS: dict[str, str] = {
    "TRAINYARD_DB_USER": "trainyard",
    "TRAINYARD_DB_PREFIX": "trainyard",
    "TRAINYARD_PG_HOST": "127.0.0.1",
    "TRAINYARD_PG_PORT": "5432",
    "TRAINYARD_PG_ADMIN_URL": "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres",
    "TRAINYARD_REDIS_HOST": "127.0.0.1",
    "TRAINYARD_REDIS_PORT": "6379",
    "TRAINYARD_REDIS_BROKER_DB": "1",
    "TRAINYARD_REDIS_FEAST_DB": "2",
    "AIRFLOW_ADMIN_USER": "admin",
    "AIRFLOW_PORT": "8080",
    "AIRFLOW_WORKER_LOG_PORT": "8793",
    "AIRFLOW_WORKER_CONCURRENCY": "4",
    "MLFLOW_PORT": "5000",
    "MLFLOW_ADMIN_USER": "admin",
    "MLFLOW_TRACKING_USERNAME": "trainyard",
    "S3_PORT": "9000",
    "PUSHGATEWAY_PORT": "9091",
    "STATSD_PORT": "8125",  # UDP: Airflow's StatsD metrics, into the statsd-exporter
    "STATSD_EXPORTER_PORT": "9102",
    "PROMETHEUS_PORT": "9090",
    "PROMETHEUS_SCRAPE_S": "15",
    "S3_BUCKET": "trainyard",
    "S3_ACCESS_KEY_ID": "trainyard",  # moto's server replaces it with the key it issues
    # the Spark standalone cluster (`up --spark` sets SPARK_WORKERS; 0: the local engine)
    "SPARK_WORKERS": "0",
    "SPARK_MASTER_PORT": "7077",
    "SPARK_WEBUI_PORT": "8090",  # the master's; its workers' the ports after it
    "SPARK_WORKER_CORES": "1",
    "SPARK_WORKER_MEMORY": "2g",
}
"""Plain settings of the profile and their defaults (an environment variable of the same name
wins when ``.env`` is first written)."""

TEAM_PASSWORD = re.compile(r"MLFLOW_TEAM_[A-Z0-9_]+_PASSWORD")
"""A team's MLflow password in ``.env`` (generated for the teams of the deployment's domains,
:func:`pipeline_steps.services.lifecycle.prepare_team_users`)."""

DATABASES = ("airflow", "mlflow", "mlflow_auth", "optuna", "feast")
"""One PostgreSQL database per component, ``<TRAINYARD_DB_PREFIX>_<name>``."""


def home(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get("TRAINYARD_PROD_HOME", PROJECT_ROOT / ".trainyard-prod")).resolve()


def _new_secret(name: str) -> str:
    if name == "AIRFLOW_FERNET_KEY":
        return urlsafe_b64encode(secrets.token_bytes(32)).decode()
    return secrets.token_urlsafe(24)


def read_env_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{path}:{number}: expected KEY=value, got {line!r}")
        values[key.strip()] = value.strip()
    return values


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (0600 from the start, never wider)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, stat.S_IRUSR | stat.S_IWUSR)
    os.replace(tmp, path)


def write_env_file(path: Path, values: Mapping[str, str]) -> None:
    lines = [
        "# The production profile's settings and secrets, written by `trainyard services up`.",
        "# Mode 0600. Never commit it. docker compose reads the same names (.env.example).",
    ]
    lines += [f"{key}={value}" for key, value in values.items()]
    write_private(path, "\n".join(lines) + "\n")


def ensure_env(
    path: Path, environ: Mapping[str, str] | None = None, **updates: str
) -> dict[str, str]:
    """The profile's ``.env``: created with fresh secrets when missing, completed when a key is
    missing, ``updates`` written over it; never loosened from 0600."""
    environ = os.environ if environ is None else environ
    values = read_env_file(path) if path.exists() else {}
    changed = not path.exists() or bool(updates)
    for key, default in DEFAULTS.items():
        if key not in values:
            values[key] = environ.get(key, default)
            changed = True
    for key in SECRETS:
        if key not in values:
            values[key] = _new_secret(key)
            changed = True
    values.update(updates)
    if changed:
        write_env_file(path, values)
    return values


@dataclass(frozen=True)
class Profile:
    """The profile's values (from ``.env``) and what each process needs from them."""

    home: Path
    values: Mapping[str, str]

    def __getitem__(self, key: str) -> str:
        return self.values[key]

    @property
    def env_file(self) -> Path:
        return self.home / ".env"

    def database(self, name: str) -> str:
        return f"{self['TRAINYARD_DB_PREFIX']}_{name}"

    def database_url(self, name: str, driver: str = "postgresql+psycopg2") -> str:
        """A URL without password: libpq takes it from ``PGPASSWORD``."""
        return (
            f"{driver}://{self['TRAINYARD_DB_USER']}@{self['TRAINYARD_PG_HOST']}:"
            f"{self['TRAINYARD_PG_PORT']}/{self.database(name)}"
        )

    def redis_url(self, db_key: str) -> str:
        return (
            f"redis://{self['TRAINYARD_REDIS_HOST']}:{self['TRAINYARD_REDIS_PORT']}/{self[db_key]}"
        )

    @property
    def airflow_url(self) -> str:
        return f"http://127.0.0.1:{self['AIRFLOW_PORT']}"

    @property
    def mlflow_url(self) -> str:
        return f"http://127.0.0.1:{self['MLFLOW_PORT']}"

    @property
    def s3_url(self) -> str:
        return f"http://127.0.0.1:{self['S3_PORT']}"

    @property
    def pushgateway_url(self) -> str:
        return f"http://127.0.0.1:{self['PUSHGATEWAY_PORT']}"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self['PROMETHEUS_PORT']}"

    @property
    def prometheus_home(self) -> Path:
        """Prometheus' config, database and the Pushgateway's persistence file."""
        return self.home / "prometheus"

    @property
    def mlflow_metrics_dir(self) -> Path:
        """Where MLflow's workers keep their Prometheus metrics (``--expose-prometheus``)."""
        return self.home / "mlflow-metrics"

    @property
    def airflow_home(self) -> Path:
        return self.home / "airflow"

    @property
    def passwords_file(self) -> Path:
        return self.airflow_home / "passwords.json"

    @property
    def mlflow_auth_config(self) -> Path:
        return self.home / "mlflow-auth.ini"

    @property
    def spark_workers(self) -> int:
        return int(self.values.get("SPARK_WORKERS", "0") or 0)

    @property
    def spark_master_url(self) -> str:
        return f"spark://127.0.0.1:{self['SPARK_MASTER_PORT']}"

    def spark_env(self) -> dict[str, str]:
        """The steps' engine: the profile's Spark cluster, its scratch folder on S3."""
        if not self.spark_workers:
            return {}
        return {
            "TRAINYARD_ENGINE__NAME": "spark",
            "TRAINYARD_ENGINE__SPARK_MASTER": self.spark_master_url,
            "TRAINYARD_ENGINE__SPARK_DIR": f"s3://{self['S3_BUCKET']}/spark",
        }

    def s3_env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.s3_url,
            "AWS_ACCESS_KEY_ID": self.values.get("S3_ACCESS_KEY_ID", ""),
            "AWS_SECRET_ACCESS_KEY": self.values.get("S3_SECRET_ACCESS_KEY", ""),
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def pipeline_env(self) -> dict[str, str]:
        """What every step needs: the lake on S3, the authenticated MLflow server, Optuna,
        Feast and the promotion lock on PostgreSQL."""
        return {
            **self.s3_env(),
            "PGPASSWORD": self["TRAINYARD_DB_PASSWORD"],
            "TRAINYARD_HOME": str(self.home / "state"),
            "TRAINYARD_LAKE__ROOT": f"s3://{self['S3_BUCKET']}/lake",
            "TRAINYARD_MLFLOW__TRACKING_URI": self.mlflow_url,
            "MLFLOW_TRACKING_USERNAME": self["MLFLOW_TRACKING_USERNAME"],
            "MLFLOW_TRACKING_PASSWORD": self["MLFLOW_TRACKING_PASSWORD"],
            # Artifacts come through the server: moto answers some of the ranged requests of a
            # presigned multipart download with 500.
            "MLFLOW_ENABLE_PROXY_MULTIPART_DOWNLOAD": "false",
            "TRAINYARD_TUNING__STORAGE": self.database_url("optuna"),
            "TRAINYARD_FEATURES__STORE_CONFIG": "feature_store.production.yaml",
            "TRAINYARD_FEAST_REGISTRY": self.database_url("feast"),
            "TRAINYARD_FEAST_REDIS": (
                f"{self['TRAINYARD_REDIS_HOST']}:{self['TRAINYARD_REDIS_PORT']},"
                f"db={self['TRAINYARD_REDIS_FEAST_DB']}"
            ),
            "TRAINYARD_PROMOTION__LOCK": self.database_url("airflow"),
            # the steps' gauges (training progress and stalls, failures, refusals, drift)
            "TRAINYARD_MONITORING__PUSHGATEWAY_URL": self.pushgateway_url,
            **self.spark_env(),
        }

    def airflow_env(self) -> dict[str, str]:
        """Airflow 3 with the CeleryExecutor: Redis broker, PostgreSQL metadata and results."""
        return {
            **self.pipeline_env(),
            "AIRFLOW_HOME": str(self.airflow_home),
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__FERNET_KEY": self["AIRFLOW_FERNET_KEY"],
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.airflow_url}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{self['AIRFLOW_ADMIN_USER']}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.passwords_file),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.database_url("airflow"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": self.database_url(
                "airflow", "postgresql+psycopg"
            ),
            "AIRFLOW__CELERY__BROKER_URL": self.redis_url("TRAINYARD_REDIS_BROKER_DB"),
            "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + self.database_url("airflow", "postgresql"),
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": self["AIRFLOW_WORKER_CONCURRENCY"],
            "AIRFLOW__API__PORT": self["AIRFLOW_PORT"],
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__WORKERS": "2",
            "AIRFLOW__API__SECRET_KEY": self["AIRFLOW_API_SECRET_KEY"],
            "AIRFLOW__API_AUTH__JWT_SECRET": self["AIRFLOW_JWT_SECRET"],
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": self["AIRFLOW_WORKER_LOG_PORT"],
            # Airflow's metrics over StatsD into the statsd-exporter Prometheus scrapes; tags
            # (dag_id, task_id, state, pool...) become labels
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": self["STATSD_PORT"],
            "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
            # each team's tasks on its own workers (airflow-worker-<team>), with its password
            "TRAINYARD_ORCHESTRATION__TEAM_QUEUES": "true",
        }

    def mlflow_env(self) -> dict[str, str]:
        return {
            **self.s3_env(),
            "MLFLOW_S3_ENDPOINT_URL": self.s3_url,
            "PGPASSWORD": self["TRAINYARD_DB_PASSWORD"],
            "MLFLOW_AUTH_CONFIG_PATH": str(self.mlflow_auth_config),
            "MLFLOW_FLASK_SERVER_SECRET_KEY": self["MLFLOW_FLASK_SERVER_SECRET_KEY"],
            # The server's background job runner (GenAI evaluation jobs) serves no use here and
            # costs seven processes.
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        }


def load_profile(environ: Mapping[str, str] | None = None) -> Profile:
    """The profile in ``TRAINYARD_PROD_HOME``, its ``.env`` written when missing."""
    where = home(environ)
    return Profile(home=where, values=ensure_env(where / ".env", environ))
