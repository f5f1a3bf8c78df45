"""What the production profile is made of: its processes, the services it uses, its secrets.

The same names describe ``docker-compose.yaml``: every process here has a compose service of the
same name (``s3`` is MinIO there, moto's server here), and PostgreSQL and Redis are the machine's
own services here and containers there.
"""

from __future__ import annotations

PROCESSES: tuple[str, ...] = (
    "s3",
    "mlflow",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker",
)
"""Processes ``trainyard services up`` starts, in start order."""

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
)
"""Generated secrets in ``.env``; none of them may appear in logs, manifests, lineage or MLflow."""
