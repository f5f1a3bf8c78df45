"""The production profile for real: `trainyard services up` on this machine (Airflow with the
CeleryExecutor on PostgreSQL and Redis, an authenticated MLflow server on PostgreSQL with its
artifacts in S3, the lake in S3, Feast's SQL registry and Redis online store), training runs
triggered through the authenticated REST API, then everything stopped and purged.

Its Prometheus scrapes the steps' gauges (through the Pushgateway), Airflow's metrics (through
the statsd-exporter) and MLflow's, and evaluates the alert rules: the runs' progress and task
outcomes are read back from it, and a training whose last step is older than its stall limit
(pushed as a frozen one's gauges are) fires ``TrainingStalled``.

The profile runs on its own ports, databases and Redis databases, so a profile a user started
on this machine is left alone. Two consecutive dates are triggered at once (the test raises
``orchestration.max_active_runs``): both compare against the champion of their moment and race
to promote; the window of 5 days holds the seeded day for each, whatever the order the runs
finish in. Training is 4 epochs, to keep the module to minutes,
and the gate's floor is lowered and the linear baseline not held to, so that such small models
can be promoted (they must still beat the trivial model).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import date
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from pipeline_steps.core.lake import Lake, safe_run_key
from pipeline_steps.core.pushgateway import Gauge, Pushgateway
from pipeline_steps.services import lifecycle
from pipeline_steps.services import processes as proc
from pipeline_steps.services.airflow_api import AirflowApi
from pipeline_steps.services.profile import PROCESSES, SECRETS, Profile, load_profile
from tests.conftest import ROOT, free_port, wait_until

pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.deployment]

DAG = "flight_delay_training"
HISTORY = ("2013-06-03", "2013-06-03")
DAYS = ["2013-06-04", "2013-06-05"]
# a run that keeps going is waited for up to RUN_TIMEOUT_S (a slow machine under the suite's
# load takes over 20 minutes); one whose tasks stop changing fails after STALL_S
RUN_TIMEOUT_S = 3600
STALL_S = 900


TEAM_DOMAIN = "room_nights"
TEAM_DOMAIN_FILE = """\
domain: {{module: hotel_rates.domain, name: room_nights, team: revenue}}
features:
  feature_repo: {root}/examples/hotel_rates/feature_repo
  project: hotel_rates
  min_train_days: 3
validation: {{expectations_dir: {root}/examples/hotel_rates/expectations}}
"""
"""A domain of team ``revenue``, whose tasks go to that team's own worker."""


@pytest.fixture(scope="module")
def production(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Profile]:
    home = tmp_path_factory.mktemp("production")
    domains = tmp_path_factory.mktemp("domains")
    (domains / f"{TEAM_DOMAIN}.yaml").write_text(TEAM_DOMAIN_FILE.format(root=ROOT))
    environ = {
        "TRAINYARD_PROD_HOME": str(home),
        "TRAINYARD_DB_PREFIX": f"trainyard_test_{os.getpid()}",
        "TRAINYARD_DB_USER": f"trainyard_test_{os.getpid()}",
        "TRAINYARD_REDIS_BROKER_DB": "13",
        "TRAINYARD_REDIS_FEAST_DB": "14",
        "AIRFLOW_PORT": str(free_port()),
        "AIRFLOW_WORKER_LOG_PORT": str(free_port()),
        "MLFLOW_PORT": str(free_port()),
        "S3_PORT": str(free_port()),
        "PUSHGATEWAY_PORT": str(free_port()),
        "PROMETHEUS_PORT": str(free_port()),
        "STATSD_PORT": str(free_port()),
        "STATSD_EXPORTER_PORT": str(free_port()),
        "PROMETHEUS_SCRAPE_S": "5",
        # what the runs train with (the processes inherit TRAINYARD_* from the environment)
        "TRAINYARD_FEATURES__WINDOW_DAYS": "5",
        "TRAINYARD_TRAIN__EPOCHS": "4",
        "TRAINYARD_VALIDATION__DATA_DOCS": "false",
        "TRAINYARD_GATE__MIN_AUC": "0.5",
        "TRAINYARD_GATE__BASELINES_MUST_BEAT": "[]",
        "TRAINYARD_ORCHESTRATION__MAX_ACTIVE_RUNS": "2",
        "TRAINYARD_ORCHESTRATION__RETRIES": "1",
        "TRAINYARD_ORCHESTRATION__RETRY_DELAY_S": "5",
        # a team's domain beside the flights (the hotel example's window is longer than 5 days)
        "TRAINYARD_ORCHESTRATION__DOMAINS_DIR": str(domains),
    }
    with pytest.MonkeyPatch.context() as patch:
        for key, value in environ.items():
            patch.setenv(key, value)
        profile = load_profile()
        try:
            profile = lifecycle.up(profile)
            _push_a_frozen_training(profile)
            _seed(profile)
            # The test itself reads the lake and MLflow as the pipeline does.
            for key, value in profile.s3_env().items():
                patch.setenv(key, value)
            patch.setenv("MLFLOW_TRACKING_USERNAME", profile["MLFLOW_TRACKING_USERNAME"])
            patch.setenv("MLFLOW_TRACKING_PASSWORD", profile["MLFLOW_TRACKING_PASSWORD"])
            yield profile
        finally:
            lifecycle.down(profile, purge=True)
    _assert_all_stopped(profile)


def _seed(profile: Profile) -> None:
    env = {**os.environ, **profile.pipeline_env()}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline_steps.commands.cli",
            "seed",
            "--start",
            HISTORY[0],
            "--end",
            HISTORY[1],
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


FROZEN = {"domain": "flight_delay", "run_id": "frozen__2013-06-01"}


def _push_a_frozen_training(profile: Profile) -> None:
    """The gauges a training frozen for ten minutes leaves in the Pushgateway: running, its
    last step long past its stall limit (the watchdog's own exit is tested in
    tests/model/test_watchdog.py; here, what the profile's Prometheus makes of it)."""
    now = time.time()
    gauges = {
        "trainyard_train_running": Gauge(1.0, "1 while the training runs"),
        "trainyard_train_last_step_timestamp_seconds": Gauge(now - 600, "last step"),
        "trainyard_train_stall_timeout_seconds": Gauge(300.0, "stall limit"),
    }
    Pushgateway(profile.pushgateway_url).push("trainyard_train", FROZEN, gauges)


def _query(profile: Profile, expr: str) -> list[dict[str, Any]]:
    url = f"{profile.prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return list(json.load(answer)["data"]["result"])


def _assert_prometheus_watched(profile: Profile, run_ids: list[str]) -> None:
    """What Prometheus holds after the runs: every scrape target up, each run's training
    gauges pushed and removed when its task ended, its tasks' outcomes and the DAG runs'
    durations from Airflow, MLflow's requests."""
    wanted = {
        "every target up": 'min(up{job=~"pushgateway|airflow|mlflow"}) == 1',
        "three targets": 'count(up{job=~"pushgateway|airflow|mlflow"}) == 3',
        # each training pushed its gauges and its task removed them when it ended: no stall
        # or silence alert outlives a run
        "the trainings' gauges pushed and removed": (
            'sum(pushgateway_http_requests_total{handler="push",code=~"2.."}) > 0 and '
            'sum(pushgateway_http_requests_total{handler="delete",code=~"2.."}) '
            f">= {len(run_ids)}"
        ),
        **{
            f"no gauge of {run_id} left": f'absent(trainyard_train_running{{run_id="{run_id}"}})'
            for run_id in run_ids
        },
        "trainings' tasks succeeded": (
            f'sum(airflow_ti_finish{{dag_id="{DAG}",task_id="train",state="success"}}) >= 2'
        ),
        "DAG runs' durations": f'sum(airflow_dagrun_duration_success_count{{dag_id="{DAG}"}}) >= 2',
        "MLflow's requests": "sum(mlflow_http_request_total) > 0",
    }
    for what, expr in wanted.items():
        wait_until(f"Prometheus: {what} ({expr})", lambda e=expr: _query(profile, e), 60, 2)


def test_prometheus_fires_the_stall_alert(production: Profile) -> None:
    def firing() -> list[dict[str, Any]]:
        url = f"{production.prometheus_url}/api/v1/alerts"
        with urllib.request.urlopen(url, timeout=10) as answer:
            alerts = json.load(answer)["data"]["alerts"]
        return [
            a
            for a in alerts
            if a["labels"]["alertname"] == "TrainingStalled"
            and a["labels"].get("run_id") == FROZEN["run_id"]
            and a["state"] == "firing"
        ]

    alert = wait_until("TrainingStalled to fire", firing, 60, 2)[0]
    assert alert["labels"]["severity"] == "page"
    assert alert["labels"]["domain"] == "flight_delay"
    assert FROZEN["run_id"] in alert["annotations"]["summary"]


def _assert_all_stopped(profile: Profile) -> None:
    for name in PROCESSES:
        assert proc.running_pid(profile, name) is None, name
    ports = ("AIRFLOW_PORT", "MLFLOW_PORT", "S3_PORT", "AIRFLOW_WORKER_LOG_PORT")
    ports += ("PUSHGATEWAY_PORT", "PROMETHEUS_PORT", "STATSD_EXPORTER_PORT")
    for key in ports:
        assert not proc.port_open(profile[key]), f"{key} {profile[key]} still answers"
    team_worker_logs = str(int(profile["AIRFLOW_WORKER_LOG_PORT"]) + 1)  # team revenue's worker
    assert not proc.port_open(team_worker_logs), f"{team_worker_logs} still answers"
    assert not profile.home.exists()


def _api(profile: Profile) -> AirflowApi:
    return AirflowApi(
        profile.airflow_url, profile["AIRFLOW_ADMIN_USER"], profile["AIRFLOW_ADMIN_PASSWORD"]
    )


def _mlflow(profile: Profile) -> Any:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=profile.mlflow_url, registry_uri=profile.mlflow_url)


def _lake(profile: Profile) -> Lake:
    return Lake(f"s3://{profile['S3_BUCKET']}/lake/flight_delay")


def _run_all(profile: Profile, days: list[str]) -> list[str]:
    api = _api(profile)
    api.unpause(DAG)
    run_ids = [f"prod__{day}" for day in days]
    for day, run_id in zip(days, run_ids, strict=True):
        api.trigger(DAG, day, run_id)
    states = api.wait(DAG, run_ids, RUN_TIMEOUT_S, stall_s=STALL_S)
    failed = {r: api.unsuccessful(DAG, r) for r, state in states.items() if state != "success"}
    assert not failed, "runs failed:\n" + "\n".join(f"{k}:\n{v}" for k, v in failed.items())
    return run_ids


def _versions(client: Any) -> list[Any]:
    return list(client.search_model_versions("name = 'flight_delay'"))


def _assert_one_champion_and_every_decision(client: Any, run_ids: list[str]) -> list[Any]:
    versions = _versions(client)
    by_run = {v.tags.get("trainyard.run_id"): v for v in versions}
    for run_id in run_ids:
        assert run_id in by_run, f"no registered version records run {run_id}"
        tags = by_run[run_id].tags
        decisions = ("promoted", "staged", "rejected", "undecided")
        assert tags.get("trainyard.decision") in decisions, tags
        assert "trainyard.champion_version" in tags, tags  # what it was compared against
    model = client.get_registered_model("flight_delay")
    # a run that passed the gate over a champion waits in staging (release.mode: staged)
    assert {"challenger", "champion"} <= set(model.aliases), model.aliases
    assert set(model.aliases) <= {"challenger", "champion", "staging"}, model.aliases
    assert model.aliases["challenger"] in {str(v.version) for v in versions}
    champion = model.aliases["champion"]
    promoted = [v for v in versions if v.tags.get("trainyard.decision") == "promoted"]
    assert promoted, "no run was promoted"
    assert champion in {str(v.version) for v in promoted}
    return versions


def test_two_consecutive_dates_at_once_through_the_rest_api(production: Profile) -> None:
    run_ids = _run_all(production, DAYS)
    versions = _assert_one_champion_and_every_decision(_mlflow(production), run_ids)
    # Promotion was serialised: no two promotions moved the alias from the same champion.
    promoted_from = [
        v.tags["trainyard.champion_version"]
        for v in versions
        if v.tags.get("trainyard.decision") == "promoted"
    ]
    assert len(promoted_from) == len(set(promoted_from)), promoted_from
    # No clash in the lake: each date ingested once, each run its own folder and lineage.
    lake = _lake(production)
    for day in DAYS:
        versions_of_day = lake.raw_versions("flights", date.fromisoformat(day))
        assert versions_of_day == [1], (day, versions_of_day)
    lineages = [lake.read_json("runs", safe_run_key(run_id), "lineage.json") for run_id in run_ids]
    assert [x["run_id"] for x in lineages] == run_ids
    assert len({x["training_set_sha256"] for x in lineages}) == len(run_ids)
    _assert_prometheus_watched(production, run_ids)


def test_credentials_are_required_everywhere(production: Profile) -> None:
    airflow, mlflow, s3 = production.airflow_url, production.mlflow_url, production.s3_url
    assert proc.http_status(f"{airflow}/api/v2/dags") == 401
    trigger = json.dumps({"logical_date": "2013-06-09T00:00:00Z"}).encode()
    assert proc.http_status(f"{airflow}/api/v2/dags/{DAG}/dagRuns", data=trigger) == 401
    bad = AirflowApi(airflow, "admin", "not-the-password")
    with pytest.raises(Exception, match="HTTP 401"):
        bad.token()
    assert proc.http_status(f"{mlflow}/api/2.0/mlflow/experiments/search?max_results=1") == 401
    assert proc.http_status(f"{mlflow}/") == 401  # the UI
    write = json.dumps({"name": "intruder"}).encode()
    assert proc.http_status(f"{mlflow}/api/2.0/mlflow/registered-models/create", data=write) == 401
    wrong = ("trainyard", "wrong-password")
    assert (
        proc.http_status(f"{mlflow}/api/2.0/mlflow/registered-models/create", wrong, write) == 401
    )
    # The pipeline's own user may not administer users.
    pipeline = (production["MLFLOW_TRACKING_USERNAME"], production["MLFLOW_TRACKING_PASSWORD"])
    user = json.dumps({"username": "intruder", "password": "intruder-password-1"}).encode()
    assert proc.http_status(f"{mlflow}/api/2.0/mlflow/users/create", pipeline, user) == 403
    lineage = f"{s3}/{production['S3_BUCKET']}/lake/flight_delay/runs/prod__{DAYS[0]}/lineage.json"
    assert proc.http_status(lineage) == 403  # an unsigned read
    assert proc.http_status(lineage, data=b"{}", method="PUT") == 403  # an unsigned write
    stranger = boto3.client(
        "s3",
        endpoint_url=s3,
        region_name="us-east-1",
        aws_access_key_id="AKIAIOSFODNN7EXAMPLE",
        aws_secret_access_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    )
    with pytest.raises(ClientError, match="InvalidAccessKeyId"):
        stranger.list_objects_v2(Bucket=production["S3_BUCKET"])


def test_secret_files_are_private(production: Profile) -> None:
    private = (production.env_file, production.passwords_file, production.mlflow_auth_config)
    private += (production.prometheus_home / "mlflow-password",)  # Prometheus' MLflow login
    for path in private:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path} has mode {oct(mode)}"


def test_no_secret_in_logs_lake_or_mlflow(production: Profile) -> None:
    values = {key: production[key] for key in SECRETS if production.values.get(key)}
    places: dict[str, bytes] = {}
    for folder in (production.airflow_home / "logs", production.home / "logs"):
        for path in folder.rglob("*"):
            if path.is_file():
                places[str(path)] = path.read_bytes()
    store = _lake(production).fs  # the whole bucket: the lake and MLflow's artifacts
    for key in store.find(production["S3_BUCKET"]):
        places[f"s3://{key}"] = store.cat_file(key)
    client = _mlflow(production)
    for experiment in client.search_experiments():
        for run in client.search_runs([experiment.experiment_id]):
            places[f"mlflow run {run.info.run_id}"] = json.dumps(
                [run.data.params, run.data.tags]
            ).encode()
    for version in _versions(client):
        places[f"mlflow version {version.version}"] = json.dumps(version.tags).encode()
    assert len(places) > 50, "nothing to search: the runs wrote nothing?"
    leaks = [
        f"{key} in {where}"
        for where, content in places.items()
        for key, value in values.items()
        if value.encode() in content
    ]
    assert not leaks, leaks


def test_a_team_cannot_write_another_team_s_model(production: Profile, monkeypatch) -> None:
    """Each team's steps write to MLflow as the team's user (``team-<team>``), on a worker of
    its own holding its password alone: a model another team registered is read by every user
    and written by its team alone. A task on the worker of team ``revenue`` (its domain
    room_nights), whose settings file named that model, is refused with HTTP 403 (MLflow's
    basic auth, ``default_permission = READ``); the shared worker holds no team's password."""
    from mlflow.exceptions import MlflowException

    from pipeline_steps.core.team_credentials import password_variable, team_environment

    profile = lifecycle.prepare_team_users(production, ["alpha", "revenue"])
    assert password_variable("alpha") in load_profile().values
    # the worker of team revenue is running, on its queue, with its own password alone
    log = proc.log_file(profile, "airflow-worker-revenue")
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
    assert proc.running_pid(profile, "airflow-worker-revenue") is not None, tail
    assert proc.worker_ready(profile, "airflow-worker-revenue").ready
    revenue_worker = proc.environment(profile, "airflow-worker-revenue")
    held = sorted(k for k in revenue_worker if k.startswith("MLFLOW_TEAM_"))
    assert held == [password_variable("revenue")], held
    assert revenue_worker["MLFLOW_TRACKING_USERNAME"] == "team-revenue"
    assert profile["MLFLOW_TRACKING_PASSWORD"] not in revenue_worker.values()
    shared = proc.environment(profile, "airflow-worker")
    assert not [k for k in shared if k.startswith("MLFLOW_TEAM_")]

    def client_as(team: str, environ: dict[str, str]) -> Any:
        for key, value in team_environment(team, environ).items():
            monkeypatch.setenv(key, value)
        return _mlflow(profile)

    client_as("alpha", profile.values).create_registered_model("alpha_demand")
    # what a revenue task's step sees: the revenue worker's environment
    revenue = client_as("revenue", revenue_worker)
    assert revenue.get_registered_model("alpha_demand").name == "alpha_demand"
    with pytest.raises(MlflowException) as refused:
        revenue.set_registered_model_tag("alpha_demand", "owner", "revenue")
    assert refused.value.get_http_status_code() == 403, refused.value
    assert team_environment("alpha", revenue_worker) == {}  # alpha's login is not there
    client_as("alpha", profile.values).set_registered_model_tag("alpha_demand", "owner", "alpha")
    assert _mlflow(profile).get_registered_model("alpha_demand").tags == {"owner": "alpha"}
