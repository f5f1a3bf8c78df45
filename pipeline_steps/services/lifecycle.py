"""``trainyard services up|down|status``: the production profile on this machine.

``up`` prepares what the processes need (a PostgreSQL role and one database per component, the
S3 user and bucket, MLflow's auth config and pipeline user, Airflow's metadata database, GPU
pool and admin password) and starts them in order, each waited for. ``down`` stops them all; with
``purge`` it also drops the databases, the Redis databases and the profile's home.
"""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import subprocess
from dataclasses import replace
from functools import partial
from typing import Any

from pipeline_steps.core.team_credentials import password_variable, team_user
from pipeline_steps.services import processes as proc
from pipeline_steps.services.gpu_pool import ensure_pools
from pipeline_steps.services.profile import (
    DATABASES,
    PROCESSES,
    SPARK_PROCESSES,
    Profile,
    ensure_env,
    load_profile,
    write_env_file,
)

log = logging.getLogger(__name__)
AIRFLOW = tuple(name for name in PROCESSES if name.startswith("airflow-"))
"""Airflow's processes, in start order."""


def _admin_engine(profile: Profile) -> Any:
    import sqlalchemy

    return sqlalchemy.create_engine(
        profile["TRAINYARD_PG_ADMIN_URL"],
        isolation_level="AUTOCOMMIT",
        poolclass=sqlalchemy.pool.NullPool,
    )


def prepare_postgres(profile: Profile) -> None:
    """The profile's role (its password from ``.env``) and one database per component."""
    import sqlalchemy

    user = profile["TRAINYARD_DB_USER"]
    engine = _admin_engine(profile)
    try:
        with engine.connect() as conn:
            exists = conn.execute(
                sqlalchemy.text("SELECT 1 FROM pg_roles WHERE rolname = :u"), {"u": user}
            ).scalar()
            verb = "ALTER" if exists else "CREATE"
            password = profile["TRAINYARD_DB_PASSWORD"].replace("'", "''")
            conn.execute(sqlalchemy.text(f"{verb} ROLE \"{user}\" LOGIN PASSWORD '{password}'"))
            for name in DATABASES:
                database = profile.database(name)
                found = conn.execute(
                    sqlalchemy.text("SELECT 1 FROM pg_database WHERE datname = :d"),
                    {"d": database},
                ).scalar()
                if not found:
                    conn.execute(sqlalchemy.text(f'CREATE DATABASE "{database}" OWNER "{user}"'))
    except sqlalchemy.exc.OperationalError as exc:
        raise proc.ServiceError(
            f"PostgreSQL at TRAINYARD_PG_ADMIN_URL={profile['TRAINYARD_PG_ADMIN_URL']} "
            f"is not reachable: {exc.orig}"
        ) from exc
    finally:
        engine.dispose()


def create_s3_user(endpoint: str, user: str) -> tuple[str, str]:
    """A user of moto's S3 server at ``endpoint`` allowed every S3 action, and its access key
    (id, secret): the three unauthenticated requests the server is started to accept."""
    import boto3

    iam = boto3.client(
        "iam",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="bootstrap",
        aws_secret_access_key="bootstrap",
    )
    iam.create_user(UserName=user)
    policy = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
    }
    iam.put_user_policy(UserName=user, PolicyName="lake", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=user)["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


def prepare_s3(profile: Profile) -> Profile:
    """The S3 server's only user (its keys into ``.env``) and the bucket. moto's server keeps
    everything in memory, so each start creates them afresh."""
    import boto3

    key_id, secret = create_s3_user(profile.s3_url, profile["TRAINYARD_DB_USER"])
    values = ensure_env(profile.env_file, S3_ACCESS_KEY_ID=key_id, S3_SECRET_ACCESS_KEY=secret)
    profile = replace(profile, values=values)
    s3 = boto3.client("s3", region_name="us-east-1", **_boto_args(profile))
    s3.create_bucket(Bucket=profile["S3_BUCKET"])
    return profile


def _boto_args(profile: Profile) -> dict[str, str]:
    env = profile.s3_env()
    return {
        "endpoint_url": env["AWS_ENDPOINT_URL"],
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
    }


def prepare_mlflow_user(profile: Profile) -> None:
    """The pipeline's own MLflow user (``MLFLOW_TRACKING_USERNAME``), created by the admin."""
    admin = (profile["MLFLOW_ADMIN_USER"], profile["MLFLOW_ADMIN_PASSWORD"])
    user, password = profile["MLFLOW_TRACKING_USERNAME"], profile["MLFLOW_TRACKING_PASSWORD"]
    body = json.dumps({"username": user, "password": password}).encode()
    status = proc.http_status(f"{profile.mlflow_url}/api/2.0/mlflow/users/create", admin, body)
    if status == 200:
        return
    # It exists from an earlier start: make sure its password is the one in .env.
    url = f"{profile.mlflow_url}/api/2.0/mlflow/users/update-password"
    status = proc.http_status(url, admin, body, method="PATCH")
    if status != 200:
        raise proc.ServiceError(f"MLflow refused to set the password of user {user}: HTTP {status}")


def team_passwords(profile: Profile, teams: list[str] | None = None) -> tuple[Profile, list[str]]:
    """Each team's MLflow password (``MLFLOW_TEAM_<TEAM>_PASSWORD``) for the teams of the
    deployment's domains (or ``teams``), generated into ``.env`` when missing; the profile with
    them, and the teams. What ``services init`` writes, with no service running."""
    if teams is None:
        teams = proc.deployment_teams(profile)
    missing = {
        password_variable(team): secrets.token_urlsafe(24)
        for team in teams
        if password_variable(team) not in profile.values
    }
    if missing:
        values = {**profile.values, **missing}
        write_env_file(profile.env_file, values)
        profile = replace(profile, values=values)
    return profile, teams


def prepare_team_users(profile: Profile, teams: list[str] | None = None) -> Profile:
    """Each team's own MLflow user (``team-<team>``, :mod:`pipeline_steps.core.team_credentials`)
    for the teams of the deployment's domains (or ``teams``), with its password of ``.env``
    (:func:`team_passwords`) set by the admin; the profile with those passwords, which each
    team's worker (``airflow-worker-<team>``) then holds, its own alone."""
    profile, teams = team_passwords(profile, teams)
    admin = (profile["MLFLOW_ADMIN_USER"], profile["MLFLOW_ADMIN_PASSWORD"])
    for team in teams:
        user, password = team_user(team), profile[password_variable(team)]
        body = json.dumps({"username": user, "password": password}).encode()
        status = proc.http_status(f"{profile.mlflow_url}/api/2.0/mlflow/users/create", admin, body)
        if status == 200:
            continue
        url = f"{profile.mlflow_url}/api/2.0/mlflow/users/update-password"
        if proc.http_status(url, admin, body, method="PATCH") != 200:
            raise proc.ServiceError(f"MLflow refused to set the password of user {user}")
    return profile


def migrate_airflow(profile: Profile) -> None:
    profile.airflow_home.mkdir(parents=True, exist_ok=True)
    airflow = str(proc.BIN / "airflow")
    out = proc.log_file(profile, "airflow-migrate")
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as handle:
        done = subprocess.run(
            [airflow, "db", "migrate"],
            env=proc.environment(profile, "airflow-scheduler"),
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=profile.home,
            check=False,
        )
    if done.returncode != 0:
        raise proc.ServiceError(f"airflow db migrate failed (log: {out})")
    # the GPU pool, with the settings the scheduler reads
    try:
        log.info(ensure_pools(proc.environment(profile, "airflow-scheduler"), airflow))
    except subprocess.CalledProcessError as exc:
        said = (exc.stderr or exc.stdout or "").strip()[-500:]
        raise proc.ServiceError(f"airflow pools set failed: {said}") from exc
    proc.write_airflow_passwords(profile)


def start_monitoring(profile: Profile) -> None:
    """The Pushgateway the steps push to, the statsd-exporter Airflow sends its metrics to, and
    Prometheus, which scrapes them and MLflow and evaluates the alert rules; each waited for."""
    proc.write_prometheus_config(profile)
    ready = {
        "pushgateway": profile.pushgateway_url,
        "statsd-exporter": f"http://127.0.0.1:{profile['STATSD_EXPORTER_PORT']}",
        "prometheus": profile.prometheus_url,
    }
    for name in ready:
        proc.start(profile, name)
    for name, url in ready.items():
        proc.wait_for(profile, name, partial(proc.prometheus_ready, url), what=f"{name} ready")


def start_spark(profile: Profile) -> None:
    """The Spark master, then ``SPARK_WORKERS`` workers; waited for until the master counts
    them all alive, or at once told when one of them exits."""
    master = "spark-master"
    proc.start(profile, master)
    port = profile["SPARK_MASTER_PORT"]
    proc.wait_for(
        profile, master, lambda: proc.port_open(port), what=f"the Spark master on port {port}"
    )
    workers = tuple(f"spark-worker-{n}" for n in range(1, profile.spark_workers + 1))
    for name in workers:
        proc.start(profile, name)
    proc.wait_for(
        profile,
        master,
        partial(proc.spark_workers_alive, profile, len(workers)),
        what=f"{len(workers)} Spark workers registered with the master",
        also=workers,
    )


def up(given: Profile | None = None, spark_workers: int | None = None) -> Profile:
    """Start every process of the profile (those running already are left alone); with
    ``spark_workers``, a Spark standalone cluster of that many workers too, which the steps then
    run their data work on (0: back to the local engine)."""
    profile = given or load_profile()
    if spark_workers is not None and spark_workers != profile.spark_workers:
        values = ensure_env(profile.env_file, SPARK_WORKERS=str(spark_workers))
        profile = Profile(home=profile.home, values=values)
    prepare_postgres(profile)
    s3_fresh = proc.running_pid(profile, "s3") is None
    proc.start(profile, "s3")
    port = profile["S3_PORT"]
    proc.wait_for(profile, "s3", lambda: proc.port_open(port), what=f"the S3 server on port {port}")
    if s3_fresh:
        profile = prepare_s3(profile)
    if profile.spark_workers:
        start_spark(profile)
    proc.write_mlflow_auth_config(profile)
    if proc.running_pid(profile, "mlflow") is None:  # its workers' metrics start from nothing
        shutil.rmtree(profile.mlflow_metrics_dir, ignore_errors=True)
    proc.start(profile, "mlflow")
    proc.wait_for(
        profile,
        "mlflow",
        partial(proc.http_ready, f"{profile.mlflow_url}/health"),
        what="MLflow's /health",
    )
    prepare_mlflow_user(profile)
    profile = prepare_team_users(profile)
    start_monitoring(profile)
    if proc.running_pid(profile, "airflow-apiserver") is None:
        migrate_airflow(profile)
    workers = proc.team_workers(profile)
    for name in (*AIRFLOW, *workers):
        proc.start(profile, name)
    proc.wait_for(
        profile,
        "airflow-apiserver",
        partial(proc.airflow_healthy, profile, "metadatabase"),
        what="Airflow's API server and its metadata database",
    )
    for name, component in (
        ("airflow-scheduler", "scheduler"),
        ("airflow-triggerer", "triggerer"),
        ("airflow-dag-processor", "dag_processor"),
    ):
        proc.wait_for(
            profile,
            name,
            partial(proc.airflow_healthy, profile, component),
            what=f"Airflow's {component} healthy",
        )
    for name in ("airflow-worker", *workers):
        proc.wait_for(
            profile,
            name,
            partial(proc.worker_ready, profile, name),
            what=f"the Celery worker {name} ready",
        )
    return profile


def down(profile: Profile | None = None, purge: bool = False) -> list[str]:
    """Stop every process (Airflow first, the stores last); return the names that ran."""
    profile = profile or load_profile()
    # the workers first: their tasks end while MLflow and S3 still answer; the monitoring last,
    # so that it takes everyone's last metrics
    stopped = proc.stop(profile, [*started_team_workers(profile), *AIRFLOW[::-1]])
    stopped += proc.stop(profile, ["mlflow", *SPARK_PROCESSES[::-1], "s3"])
    stopped += proc.stop(profile, ["prometheus", "statsd-exporter", "pushgateway"])
    if purge:
        _purge(profile)
    return stopped


def started_team_workers(profile: Profile) -> list[str]:
    """The teams' workers that have a pid file: those of the teams of the deployment when it
    was started (a team since removed included)."""
    folder = proc.pid_file(profile, "x").parent
    return sorted(p.stem for p in folder.glob(f"{proc.TEAM_WORKER}*.pid"))


def _purge(profile: Profile) -> None:
    import redis

    engine = _admin_engine(profile)
    import sqlalchemy

    with engine.connect() as conn:
        for name in DATABASES:
            conn.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{profile.database(name)}"'))
        try:
            conn.execute(sqlalchemy.text(f'DROP ROLE IF EXISTS "{profile["TRAINYARD_DB_USER"]}"'))
        except sqlalchemy.exc.DBAPIError as exc:  # it owns something outside the profile
            log.warning("role %s kept: %s", profile["TRAINYARD_DB_USER"], exc.orig)
    engine.dispose()
    for key in ("TRAINYARD_REDIS_BROKER_DB", "TRAINYARD_REDIS_FEAST_DB"):
        redis.Redis(
            host=profile["TRAINYARD_REDIS_HOST"],
            port=int(profile["TRAINYARD_REDIS_PORT"]),
            db=int(profile[key]),
        ).flushdb()
    shutil.rmtree(profile.home, ignore_errors=True)


def status(profile: Profile | None = None) -> dict[str, int | None]:
    profile = profile or load_profile()
    names = [
        *PROCESSES,
        *started_team_workers(profile),
        *SPARK_PROCESSES[: 1 + profile.spark_workers],
    ]
    return {name: proc.running_pid(profile, name) for name in names}


def describe(profile: Profile) -> str:
    """Where everything is, for the person who started it (no secret printed)."""
    return "\n".join(
        [
            f"Airflow   {profile.airflow_url}   user {profile['AIRFLOW_ADMIN_USER']}, "
            "password AIRFLOW_ADMIN_PASSWORD",
            f"MLflow    {profile.mlflow_url}   user {profile['MLFLOW_ADMIN_USER']} "
            "(MLFLOW_ADMIN_PASSWORD); the pipeline's user "
            f"{profile['MLFLOW_TRACKING_USERNAME']} (MLFLOW_TRACKING_PASSWORD)",
            f"Prometheus {profile.prometheus_url}   alerts at /alerts; the steps push to the "
            f"Pushgateway {profile.pushgateway_url}",
            f"S3        {profile.s3_url}   bucket {profile['S3_BUCKET']}, keys S3_ACCESS_KEY_ID / "
            "S3_SECRET_ACCESS_KEY",
            f"Postgres  {profile.database_url('airflow').rsplit('/', 1)[0]}/"
            f"{profile['TRAINYARD_DB_PREFIX']}_{{{','.join(DATABASES)}}}   password "
            "TRAINYARD_DB_PASSWORD",
            *(
                [
                    f"Spark     {profile.spark_master_url}   {profile.spark_workers} workers, "
                    f"web UI http://127.0.0.1:{profile['SPARK_WEBUI_PORT']}; the steps' data "
                    f"work runs there, its files under s3://{profile['S3_BUCKET']}/spark"
                ]
                if profile.spark_workers
                else []
            ),
            f"Credentials: {profile.env_file} (mode 0600)",
            f"Logs: {profile.home / 'logs'}",
        ]
    )
