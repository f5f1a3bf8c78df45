"""``docker compose up`` of the production profile on a real engine: docker-compose.yaml as users
run it, with containers/offline/compose.yaml standing in for the three public images no registry
serves here. Every service healthy (two Celery workers and team revenue's own), a demo date
trained through the authenticated REST API, the outcome read back from the authenticated MLflow
server and what the run left in Prometheus, the team's queue, worker and MLflow user kept to the
team, then ``docker compose down -v``.

The project runs under a name and ports of its own, so a profile a user started is left alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from pipeline_steps.services.airflow_api import AirflowApi, AirflowApiError
from tests.conftest import wait_until
from tests.containers.engine import Compose, env_file, remove_stale_projects

pytestmark = [pytest.mark.containers, pytest.mark.slow, pytest.mark.deployment]

DAG = "flight_delay_training"
HISTORY = ("2013-06-01", "2013-06-02")
DAY = "2013-06-03"
WORKERS = 2
UP_TIMEOUT_S = 900
# a run that keeps going is waited for up to RUN_TIMEOUT_S (a slow machine under the suite's
# load takes over 20 minutes); one whose tasks stop changing fails after STALL_S
RUN_TIMEOUT_S = 3600
STALL_S = 900


@pytest.fixture(scope="module")
def profile(
    images: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Compose, dict[str, str]]]:
    remove_stale_projects()
    folder = tmp_path_factory.mktemp("compose")
    values = env_file(folder / ".env")
    compose = Compose(f"trainyard-test-{os.getpid()}", folder / ".env")
    try:
        try:
            # `up` itself waits for each dependency's health check (MLflow's before airflow-init,
            # the API server's before the workers): on a busy machine, minutes
            compose(
                "up",
                "--detach",
                "--no-build",
                "--scale",
                f"airflow-worker={WORKERS}",
                timeout=UP_TIMEOUT_S,
            )
        except (AssertionError, subprocess.TimeoutExpired) as exc:
            raise AssertionError(f"{exc}\n{compose.logs()}") from None
        compose.wait_until_healthy(WORKERS, UP_TIMEOUT_S)
        yield compose, values
    finally:
        compose("down", "--volumes", "--remove-orphans", "--timeout", "5", check=False)


def test_compose_profile_trains_a_demo_date_through_the_rest_api(
    profile: tuple[Compose, dict[str, str]],
) -> None:
    compose, values = profile
    # the history the window needs, as the compose file's header says
    start, end = HISTORY
    compose("exec", "-T", "airflow-worker", "trainyard", "seed", "--start", start, "--end", end)

    url = f"http://127.0.0.1:{values['AIRFLOW_PORT']}"
    api = AirflowApi(url, "admin", values["AIRFLOW_ADMIN_PASSWORD"])
    with pytest.raises(Exception, match="401"):
        AirflowApi(api.url, "admin", "wrong").get("/api/v2/dags")
    api.unpause(DAG)
    run_id = f"manual__{DAY}"
    api.trigger(DAG, DAY, run_id, conf={"window_days": 3, "epochs": 2})
    try:
        states = api.wait(DAG, [run_id], RUN_TIMEOUT_S, stall_s=STALL_S)
    except AirflowApiError as exc:
        raise AssertionError(f"{exc}\n{compose.logs()}") from None
    assert states[run_id] == "success", (api.unsuccessful(DAG, run_id), compose.logs())

    from mlflow import MlflowClient

    mlflow_url = f"http://127.0.0.1:{values['MLFLOW_PORT']}"
    with pytest.MonkeyPatch.context() as patch:  # MLflow's client reads its login from there
        patch.setenv("MLFLOW_TRACKING_USERNAME", values["MLFLOW_TRACKING_USERNAME"])
        patch.setenv("MLFLOW_TRACKING_PASSWORD", values["MLFLOW_TRACKING_PASSWORD"])
        client = MlflowClient(tracking_uri=mlflow_url, registry_uri=mlflow_url)
        runs = client.search_runs(
            [e.experiment_id for e in client.search_experiments()],
            filter_string=f"tags.`trainyard.run_id` = '{run_id}'",
        )
        assert runs and all(r.info.status == "FINISHED" for r in runs), runs
        assert any("val_auc" in r.data.metrics for r in runs), [r.data.metrics for r in runs]
        versions = client.search_model_versions("name = 'flight_delay'")
        by_run = {v.tags.get("trainyard.run_id"): v for v in versions}
        assert run_id in by_run, [v.tags for v in versions]
        decision = by_run[run_id].tags.get("trainyard.decision")
        assert decision in ("promoted", "staged", "rejected", "undecided"), by_run[run_id].tags

    # Prometheus scraped what the run left: the training's gauges (through the Pushgateway,
    # removed by its task when it ended, so that no alert on them outlives the run),
    # its tasks' outcomes (Airflow's StatsD, through the statsd-exporter), MLflow's requests
    prometheus = f"http://127.0.0.1:{values['PROMETHEUS_PORT']}"
    wanted = {
        "every target up": 'count(up{job=~"pushgateway|airflow|mlflow"} == 1) == 3',
        # the training pushed its gauges, and its task removed them when it ended
        "the training's gauges pushed and removed": (
            'sum(pushgateway_http_requests_total{handler="push",code=~"2.."}) > 0 and '
            'sum(pushgateway_http_requests_total{handler="delete",code=~"2.."}) > 0'
        ),
        "no gauge of the ended training left": (
            f'absent(trainyard_train_running{{run_id="{run_id}"}})'
        ),
        "its training task succeeded": (
            f'airflow_ti_finish{{dag_id="{DAG}",task_id="train",state="success"}}'
        ),
        "MLflow's requests": "sum(mlflow_http_request_total) > 0",
    }
    for what, expr in wanted.items():
        wait_until(f"Prometheus: {what} ({expr})", lambda e=expr: _query(prometheus, e), 120, 3)

    # Team revenue (the hotel example's): its tasks go to its own queue, which its worker
    # takes, and that worker writes as the team's user, who may read the flights model (the
    # deployment user's) but not write it; the shared worker holds no team's password.
    tasks = api.get("/api/v2/dags/hotel_rate_training/tasks")["tasks"]
    assert {t["queue"] for t in tasks} == {"team-revenue"}, [
        (t["task_id"], t["queue"]) for t in tasks
    ]
    queues = compose(
        "exec",
        "-T",
        "airflow-worker-revenue",
        "sh",
        "-c",
        'celery --broker "$AIRFLOW__CELERY__BROKER_URL" inspect active_queues '
        '-d "celery@$HOSTNAME"',
    )
    assert "'name': 'team-revenue'" in queues, queues
    shared = compose(
        "exec", "-T", "airflow-worker", "printenv", "MLFLOW_TEAM_REVENUE_PASSWORD", check=False
    )
    assert shared.strip() == "", "the shared worker holds team revenue's password"
    from mlflow.exceptions import MlflowException

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_USERNAME", "team-revenue")
        patch.setenv("MLFLOW_TRACKING_PASSWORD", values["MLFLOW_TEAM_REVENUE_PASSWORD"])
        team = MlflowClient(tracking_uri=mlflow_url, registry_uri=mlflow_url)
        assert team.get_registered_model("flight_delay").name == "flight_delay"  # READ
        with pytest.raises(MlflowException, match=r"403|PERMISSION_DENIED"):
            team.set_registered_model_tag("flight_delay", "written_by", "team-revenue")


def _query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    url = f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return list(json.load(answer)["data"]["result"])
