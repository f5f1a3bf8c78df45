"""Sharing GPUs: the real DAGs' training and tuning tasks take slots of the Airflow GPU pool at
their priorities, every step pod carries the team's Kueue queue label and requests what it
uses, and the pool exists once Airflow is set up."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.dags.templates import rendered

KUBERNETES = {
    "TRAINYARD_ORCHESTRATION__RUNTIME": "kubernetes",
    "TRAINYARD_KUBERNETES__TRAIN_GPUS": "4",
    "TRAINYARD_KUBERNETES__QUEUE_NAME": "team-a",
}
QUEUE = "kueue.x-k8s.io/queue-name"


def _dags(monkeypatch: pytest.MonkeyPatch, **environ: str) -> dict:
    from airflow.dag_processing.dagbag import DagBag

    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    return bag.dags


def test_on_kubernetes_training_outranks_tuning_for_the_gpu_slots(monkeypatch) -> None:
    dags = _dags(monkeypatch, **KUBERNETES)
    trial = dags["flight_delay_tuning"].get_task("trial").partial_kwargs
    # the flights example has no team: the shared pools; the hotel example's team its own
    pools = {"flight_delay": ("gpu", "default_pool"), "hotel_rate": ("gpu-revenue", "team-revenue")}
    for domain, (gpu_pool, pool) in pools.items():
        dag = dags[f"{domain}_training"]
        train = dag.get_task("train")
        assert (train.pool, train.pool_slots) == (gpu_pool, 4), domain
        assert (train.priority_weight, train.weight_rule) == (10, "absolute")
        assert train.priority_weight > trial["priority_weight"]
        for other in ("trigger", "ingest", "evaluate"):  # no GPU: the team's pool
            assert dag.get_task(other).pool == pool
        hotel_trial = dags[f"{domain}_tuning"].get_task("trial").partial_kwargs
        assert hotel_trial["pool"] == gpu_pool
    assert (trial["pool"], trial["pool_slots"]) == ("gpu", 4)
    assert (trial["priority_weight"], trial["weight_rule"]) == (1, "absolute")


def test_with_a_quota_a_teams_trials_take_its_training_slots_below_its_jobs(
    monkeypatch, tmp_path
) -> None:
    """On CPU, a tuning trial is a training like a job's: it takes a slot of the team's
    training pool, so a study's parallel trials stay within the team's ``runs``, and at
    tuning's priority, so a job waiting for the slot goes first."""
    dags = _dags(
        monkeypatch,
        TRAINYARD_HOME=str(tmp_path / "home"),
        TRAINYARD_ORCHESTRATION__QUOTAS="{revenue: {runs: 2}}",
    )
    train = dags["hotel_rate_training"].get_task("train")
    trial = dags["hotel_rate_tuning"].get_task("trial").partial_kwargs
    assert (train.pool, train.pool_slots) == ("train-revenue", 1)
    assert (trial["pool"], trial["pool_slots"]) == ("train-revenue", 1)
    assert trial["priority_weight"] < train.priority_weight
    # a domain whose team has no quota keeps the trials in its worker pool
    assert dags["flight_delay_tuning"].get_task("trial").partial_kwargs.get("pool") is None


def test_a_multi_node_job_takes_a_slot_per_gpu_of_every_node(monkeypatch) -> None:
    dags = _dags(
        monkeypatch,
        **KUBERNETES,
        TRAINYARD_KUBERNETES__TRAIN_NODES="4",
        TRAINYARD_KUBERNETES__TRAIN_MIN_NODES="2",
    )
    dag = dags["flight_delay_training"]
    job = dag.get_task("train.job")
    assert (job.pool, job.pool_slots, job.priority_weight) == ("gpu", 16, 10)
    # the Service's creation and removal hold no GPU
    assert dag.get_task("train.create_rendezvous_service").pool == "default_pool"
    # a trial trains in one pod: that pod's GPUs
    assert dags["flight_delay_tuning"].get_task("trial").partial_kwargs["pool_slots"] == 4


def test_local_training_takes_gpu_slots_only_when_it_must_use_cuda(make_settings) -> None:
    from pipeline_steps.orchestration.runners import step_task

    cpu = step_task("train", make_settings())
    assert (cpu.pool, cpu.pool_slots, cpu.priority_weight) == ("default_pool", 1, 10)
    cuda = step_task("train", make_settings("train.device=cuda", "train.nproc_per_node=2"))
    assert (cuda.pool, cuda.pool_slots) == ("gpu", 2)


def test_an_empty_pool_setting_disables_the_pool(tmp_path) -> None:
    from pipeline_steps.core.settings import load_settings
    from pipeline_steps.orchestration.runners import step_task

    config = tmp_path / "settings.yaml"
    config.write_text("orchestration:\n  gpu_pool: ''\ntrain:\n  device: cuda\n")
    settings = load_settings(config, environ={"TRAINYARD_HOME": str(tmp_path)})
    assert step_task("train", settings).pool == "default_pool"


def test_a_task_needing_more_gpus_than_the_pool_is_refused(make_settings) -> None:
    from pipeline_steps.core.settings import SettingsError
    from pipeline_steps.orchestration.runners import step_task

    settings = make_settings(
        "orchestration.runtime=kubernetes",
        "kubernetes.train_gpus=8",
        "kubernetes.train_nodes=2",
        "orchestration.gpu_pool_slots=8",
    )
    with pytest.raises(SettingsError, match=r"16 GPU\(s\).*orchestration\.gpu_pool_slots is 8"):
        step_task("train", settings)


def test_every_step_pod_and_the_job_carry_the_teams_queue(monkeypatch) -> None:
    """Kueue admits what carries its queue label: every step's pod, a trial's pod, and a
    multi-node Job (on the Job itself, which Kueue suspends until admitted, and its pods)."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    monkeypatch.setattr(KubernetesHook, "is_in_cluster", False)
    dags = _dags(monkeypatch, **KUBERNETES)
    training = dags["flight_delay_training"]
    for step in ("ingest", "validate", "features", "train", "evaluate", "promote"):
        pod = training.get_task(step).build_pod_request_obj(dry_run=True)
        assert pod.metadata.labels[QUEUE] == "team-a", step
        resources = pod.spec.containers[0].resources
        assert resources.requests["cpu"] and resources.requests["memory"], step
        if step == "train":
            assert resources.requests["nvidia.com/gpu"] == resources.limits["nvidia.com/gpu"]
            assert rendered(resources.limits["nvidia.com/gpu"]) == "4"
    assert dags["flight_delay_tuning"].get_task("trial").partial_kwargs["labels"][QUEUE] == (
        "team-a"
    )

    multi = _dags(monkeypatch, **KUBERNETES, TRAINYARD_KUBERNETES__TRAIN_NODES="2")
    job = multi["flight_delay_training"].get_task("train.job").build_job_request_obj()
    assert job.metadata.labels[QUEUE] == "team-a"
    assert job.spec.template.metadata.labels[QUEUE] == "team-a"


def test_no_queue_no_label(make_settings) -> None:
    from pipeline_steps.orchestration.runners import step_task

    settings = make_settings("orchestration.runtime=kubernetes")
    pod = step_task("ingest", settings).build_pod_request_obj(dry_run=True)
    assert QUEUE not in pod.metadata.labels


def test_setting_up_airflow_creates_and_resizes_the_gpu_pool(airflow_db: Path) -> None:
    """What ``make airflow-db``, ``trainyard services up`` and compose's ``airflow-init`` run."""
    from pipeline_steps.orchestration.launch import executable
    from pipeline_steps.services.gpu_pool import ensure_pools

    airflow = executable("airflow")
    environ = {**os.environ, "TRAINYARD_ORCHESTRATION__GPU_POOL": "gpu-test"}
    for slots in ("12", "6"):
        said = ensure_pools({**environ, "TRAINYARD_ORCHESTRATION__GPU_POOL_SLOTS": slots}, airflow)
        # the hotel example's team pool beside it
        assert said == (
            f"Airflow pool gpu-test has {slots} slot(s); Airflow pool team-revenue has 16 slot(s)"
        )
        listed = subprocess.run(
            [airflow, "pools", "get", "gpu-test", "-o", "plain"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert listed.split("\n")[1].split()[:2] == ["gpu-test", slots]


def test_the_pool_module_runs_as_make_airflow_db_runs_it(airflow_db: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pipeline_steps.services.gpu_pool"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (  # the flights example's, then the hotel example team's
        "Airflow pool gpu has 64 slot(s); Airflow pool gpu-revenue has 64 slot(s); "
        "Airflow pool team-revenue has 16 slot(s)"
    )
    assert "RuntimeWarning" not in done.stderr


def test_the_job_task_waits_for_a_queued_jobs_pods_and_skips_lost_ones(monkeypatch) -> None:
    """Kueue creates a queued Job's pods only when it admits it: the task looks again instead
    of failing; a pod removed before its log is read (a preempted node's) is passed over."""
    from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator
    from airflow.providers.cncf.kubernetes.utils.pod_manager import PodManager
    from airflow.providers.common.compat.sdk import AirflowException
    from kubernetes.client import models as k8s
    from kubernetes.client.rest import ApiException

    from pipeline_steps.orchestration.training_job import TrainingJobOperator

    looks: list[int] = []

    def no_pods_twice(self, pod_request_obj, context, *, exclude_checked=True):
        looks.append(1)
        if len(looks) < 3:
            raise AirflowException("No pods running with labels ...")
        return ["pod-0", "pod-1"]

    monkeypatch.setattr(KubernetesJobOperator, "get_pods", no_pods_twice)
    task = TrainingJobOperator(task_id="job", name="trainyard-train", job_poll_interval=0)
    assert task.get_pods(None, {}) == ["pod-0", "pod-1"] and len(looks) == 3

    def gone(self, pod, *args, **kwargs):
        raise ApiException(status=404, reason="Not Found")

    monkeypatch.setattr(PodManager, "fetch_requested_container_logs", gone)
    lost = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="trainyard-train-2", namespace="team-a"))
    lister = TrainingJobOperator(task_id="job2", name="trainyard-train")
    lister.__dict__["client"] = None  # no cluster: the Kubernetes client is never called
    manager = lister.pod_manager
    assert manager.fetch_requested_container_logs(lost, containers=True) == []

    def refused(self, pod, *args, **kwargs):
        raise ApiException(status=403, reason="Forbidden")

    monkeypatch.setattr(PodManager, "fetch_requested_container_logs", refused)
    with pytest.raises(ApiException):
        manager.fetch_requested_container_logs(lost, containers=True)


def test_pools_of_a_team_are_its_own_in_multi_team_mode(make_settings) -> None:
    from pipeline_steps.services.gpu_pool import pool_commands

    team = make_settings("domain.team=revenue", "orchestration.gpu_pool=gpu")
    owned = {c[3]: c[6:] for c in pool_commands(team, teams=True)}
    assert owned == {
        "gpu-revenue": ["--team-name", "revenue"],
        "team-revenue": ["--team-name", "revenue"],
    }
    shared = make_settings("domain.team=revenue", "orchestration.gpu_pool=gpus-of-all")
    assert {c[3]: c[6:] for c in pool_commands(shared, teams=True)}["gpus-of-all"] == []
    assert all(len(c) == 6 for c in pool_commands(team, teams=False))


@pytest.mark.slow
def test_multi_team_airflow_gives_each_team_its_pools(airflow_db: Path, tmp_path: Path) -> None:
    """Under Airflow's multi-team mode the setup creates the bundles' teams and gives each team
    its pools; a domain whose team is no bundle's is named."""
    from pipeline_steps.orchestration.launch import executable
    from pipeline_steps.services.gpu_pool import PoolError, ensure_pools

    airflow = executable("airflow")
    bundle = {
        "name": "revenue",
        "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
        "kwargs": {"path": str(tmp_path)},
        "team_name": "revenue",
    }
    environ = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__MULTI_TEAM": "True",
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps([bundle]),
    }
    (tmp_path / "airflow").mkdir()
    shutil.copy(airflow_db, tmp_path / "airflow" / "airflow.db")  # migrated, no pool of a team
    said = ensure_pools(environ, airflow)
    assert "Airflow pool team-revenue has 16 slot(s)" in said
    listed = subprocess.run(
        [airflow, "pools", "list", "-o", "json"], env=environ, capture_output=True, text=True
    )
    teams = {p["pool"]: p.get("team_name") for p in json.loads(listed.stdout)}
    assert teams["team-revenue"] == "revenue" and teams["gpu"] is None, teams

    lost = {**environ, "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": "[]"}
    (tmp_path / "domains").mkdir()
    (tmp_path / "domains" / "shop.yaml").write_text(
        "domain:\n  module: hotel_rates.domain\n  name: shop\n  team: retail\n"
    )
    lost["TRAINYARD_ORCHESTRATION__DOMAINS_DIR"] = str(tmp_path / "domains")
    with pytest.raises(PoolError, match="no team 'retail'"):
        ensure_pools(lost, airflow)
