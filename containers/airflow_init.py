"""What docker-compose.yaml's one-shot ``airflow-init`` service does before Airflow starts.

1. ``airflow db migrate``, then the GPU pool (``airflow pools set`` with
   ``orchestration.gpu_pool`` and ``gpu_pool_slots``, :mod:`pipeline_steps.services.gpu_pool`);
2. the simple auth manager's passwords file (``{"admin": AIRFLOW_ADMIN_PASSWORD}``, mode 0600);
3. the object store's bucket (the one of ``TRAINYARD_LAKE__ROOT``; MLflow's artifacts live there
   too);
4. the pipeline's MLflow user (``MLFLOW_TRACKING_USERNAME``), created through MLflow's auth REST
   API as ``admin``, or given the password in ``.env`` again when it exists; and each team's
   (``team-<team>``, for every ``MLFLOW_TEAM_<TEAM>_PASSWORD`` it is given), the same way.

Every step can run again: compose runs this on each ``docker compose up``. Passwords are read
from the environment and never printed.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

MLFLOW_ADMIN = "admin"
_TEAM_PASSWORD = re.compile(r"MLFLOW_TEAM_(?P<team>[A-Z0-9_]+)_PASSWORD")


class MlflowApiError(RuntimeError):
    """An MLflow REST call answered with an error; ``error_code`` is MLflow's (or the status)."""

    def __init__(self, status: int, error_code: str, message: str) -> None:
        super().__init__(f"MLflow answered {status} {error_code}: {message}")
        self.status = status
        self.error_code = error_code


def write_passwords_file(path: Path, passwords: Mapping[str, str]) -> None:
    """Write ``{user: password}`` as the simple auth manager reads it, readable by its owner only.

    Written to a temporary file beside ``path`` and renamed over it, so Airflow never reads half
    a file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".passwords-")  # created with mode 0600
    try:
        with os.fdopen(fd, "w") as file:
            file.write(json.dumps(dict(passwords)) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def ensure_bucket(bucket: str, endpoint_url: str | None = None) -> bool:
    """Create ``bucket`` in the S3 store at ``endpoint_url`` (default: boto3's); False when it
    already exists. Credentials come from boto3's usual sources (``AWS_ACCESS_KEY_ID`` ...)."""
    import boto3
    from botocore.exceptions import ClientError

    s3 = boto3.client("s3", endpoint_url=endpoint_url)
    try:
        s3.head_bucket(Bucket=bucket)
        return False
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
            raise
    s3.create_bucket(Bucket=bucket)
    return True


def _mlflow_call(
    tracking_uri: str, method: str, path: str, body: Mapping[str, str], admin_password: str
) -> None:
    credentials = base64.b64encode(f"{MLFLOW_ADMIN}:{admin_password}".encode()).decode()
    request = urllib.request.Request(
        tracking_uri.rstrip("/") + path,
        data=json.dumps(dict(body)).encode(),
        method=method,
        headers={"Content-Type": "application/json", "Authorization": f"Basic {credentials}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30):
            return
    except urllib.error.HTTPError as exc:
        raw = exc.read().decode(errors="replace")
        try:
            answer = json.loads(raw)
        except json.JSONDecodeError:
            answer = {"message": raw}
        if not isinstance(answer, dict):
            answer = {"message": raw}
        code = str(answer.get("error_code") or exc.code)
        raise MlflowApiError(exc.code, code, str(answer.get("message", ""))[:500]) from None


def ensure_mlflow_user(
    tracking_uri: str, admin_password: str, username: str, password: str
) -> Literal["created", "updated"]:
    """Create MLflow user ``username`` with ``password`` as ``admin``, or set its password when
    the user exists. Raises ``MlflowApiError`` on any other answer (a wrong admin password gives
    401; a password under MLflow's 12 characters gives 400 INVALID_PARAMETER_VALUE)."""
    body = {"username": username, "password": password}
    try:
        _mlflow_call(tracking_uri, "POST", "/api/2.0/mlflow/users/create", body, admin_password)
        return "created"
    except MlflowApiError as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    _mlflow_call(
        tracking_uri, "PATCH", "/api/2.0/mlflow/users/update-password", body, admin_password
    )
    return "updated"


def main(environ: Mapping[str, str] = os.environ) -> int:
    from pipeline_steps.services.gpu_pool import deployment_pool_commands, multi_team

    subprocess.run(["airflow", "db", "migrate"], check=True)
    if multi_team(environ):  # the bundles' teams, which the teams' pools belong to
        subprocess.run(["airflow", "teams", "sync"], check=True)
    for pool in deployment_pool_commands(environ):
        subprocess.run(pool, check=True)
        print(f"airflow-init: Airflow pool {pool[3]} has {pool[4]} slot(s)")

    passwords_file = Path(environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"])
    write_passwords_file(passwords_file, {"admin": environ["AIRFLOW_ADMIN_PASSWORD"]})
    print(f"airflow-init: Airflow user admin's password written to {passwords_file}")

    lake = urlparse(environ["TRAINYARD_LAKE__ROOT"])
    if lake.scheme == "s3":
        created = ensure_bucket(lake.netloc, environ.get("AWS_ENDPOINT_URL") or None)
        print(f"airflow-init: bucket {lake.netloc} {'created' if created else 'exists'}")

    username = environ["MLFLOW_TRACKING_USERNAME"]
    outcome = ensure_mlflow_user(
        environ["TRAINYARD_MLFLOW__TRACKING_URI"],
        environ["MLFLOW_ADMIN_PASSWORD"],
        username,
        environ["MLFLOW_TRACKING_PASSWORD"],
    )
    print(f"airflow-init: MLflow user {username} {outcome}")
    for team, password in team_passwords(environ).items():
        user = f"team-{team}"  # pipeline_steps.core.team_credentials.team_user
        outcome = ensure_mlflow_user(
            environ["TRAINYARD_MLFLOW__TRACKING_URI"],
            environ["MLFLOW_ADMIN_PASSWORD"],
            user,
            password,
        )
        print(f"airflow-init: MLflow user {user} {outcome}")
    return 0


def team_passwords(environ: Mapping[str, str]) -> dict[str, str]:
    """Each team's MLflow password the deployment holds (``MLFLOW_TEAM_<TEAM>_PASSWORD``), by
    team."""
    found = {}
    for key, value in environ.items():
        match = _TEAM_PASSWORD.fullmatch(key)
        if match and value:
            found[match["team"].lower().replace("_", "-")] = value
    return found


if __name__ == "__main__":
    sys.exit(main())
