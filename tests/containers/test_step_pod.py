"""The step image under the pod's constraints: each step runs in ``trainyard-step`` exactly as
the KubernetesPodOperator spec renders it (:func:`pod_arguments`): as uid 10001 with fsGroup
10001, a read-only root filesystem, no capabilities and no privilege escalation, an emptyDir at
``/tmp`` (and ``/dev/shm`` for training), the lake on a claim mounted at ``/lake``, the pod's
environment and command. Ingest and validate three days, materialise the features, train; then a
training pod is stopped as the kubelet stops a preempted pod and its retry resumes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from pipeline_steps.core.lake import Lake
from pipeline_steps.core.settings import Settings, load_settings
from pipeline_steps.orchestration.runners import pod_arguments
from tests.containers.engine import claim_folder, docker_run

pytestmark = [pytest.mark.containers, pytest.mark.slow]

DAYS = ["2013-06-01", "2013-06-02", "2013-06-03"]
CLAIM = "trainyard-lake"
SETTINGS = (
    "orchestration.runtime=kubernetes",
    "kubernetes.image=trainyard-step:0.1.0",
    f"kubernetes.lake_pvc={CLAIM}",
    "kubernetes.cpu_limit=2",
    "kubernetes.memory_limit=6Gi",
    # MLflow, Optuna and the promotion lock beside the lake, on the claim every pod mounts
    "mlflow.tracking_uri=sqlite:////lake/mlflow.db",
    "mlflow.artifact_root=/lake/mlartifacts",
    "tuning.storage=sqlite:////lake/optuna.db",
    # the DAG's own settings, which reach the steps through the pods' environment
    "features.window_days=3",
    "validation.data_docs=false",
    "train.epochs=1",
)
READ_RUN = """
import json, sys, mlflow
mlflow.set_tracking_uri("sqlite:////lake/mlflow.db")
runs = mlflow.search_runs(
    search_all_experiments=True,
    filter_string=f"tags.`trainyard.run_id` = '{sys.argv[1]}'",
    output_format="list",
)
run = runs[0]
info = {"status": run.info.status, "params": run.data.params, "metrics": run.data.metrics}
print(json.dumps(info))
"""
STOPPED = re.compile(r"SIGTERM during optimizer step (\d+): stopped after step (\d+)")


class Pods:
    """Runs steps as pods of the step image, all on one lake claim (a host folder)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.lake = claim_folder(root / "claim", fs_group=10001)
        self.count = 0

    def settings(self, *overrides: str) -> Settings:
        """The settings the DAG loads (its home, ``SETTINGS`` and ``overrides``)."""
        home = {
            "TRAINYARD_HOME": os.environ["TRAINYARD_HOME"],
            "TRAINYARD_CONFIG": os.environ["TRAINYARD_CONFIG"],
        }
        return load_settings(overrides=[*SETTINGS, *overrides], environ=home)

    def pod(self, step: str, run_id: str, day: str, *overrides: str) -> dict[str, Any]:
        """The step's pod as the DAG renders it; its command has no ``--set``."""
        run_args = ["--run-id", run_id, "--logical-date", day]
        return pod_arguments(step, self.settings(*overrides), run_args)

    def command(self, pod: dict[str, Any], *extra: str) -> tuple[list[str], Path, Path]:
        """``docker run`` for ``pod``, with a fresh termination log and XCom folder."""
        self.count += 1
        box = self.root / f"pod-{self.count}"
        xcom = box / "xcom"
        xcom.mkdir(parents=True)
        xcom.chmod(0o777)
        termination = box / "termination-log"
        termination.touch(mode=0o666)
        termination.chmod(0o666)
        options = docker_run(pod, {CLAIM: self.lake}, termination, xcom)
        return ["docker", "run", *extra, *options], termination, xcom / "return.json"

    def run(self, step: str, run_id: str, day: str, *overrides: str) -> dict[str, Any]:
        """Run the step's pod to the end; its manifest, from the XCom file."""
        name = f"trainyard-{step}-{time.monotonic_ns()}"
        pod = self.pod(step, run_id, day, *overrides)
        argv, termination, result = self.command(pod, "--rm", "--name", name)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        finally:  # a timeout stops the client, not the container
            subprocess.run(["docker", "rm", "--force", name], capture_output=True)
        output = (done.stdout + done.stderr)[-4000:]
        assert done.returncode == 0, f"{step} for {day}: exit {done.returncode}\n{output}"
        assert termination.read_text() == "", termination.read_text()
        manifest = json.loads(result.read_text())
        assert manifest["step"] == step, manifest
        return manifest


@pytest.fixture(scope="module")
def pods(images: None, tmp_path_factory: pytest.TempPathFactory) -> Pods:
    """A lake claim holding three ingested and validated days, each step a pod of its own."""
    pods = Pods(tmp_path_factory.mktemp("pods"))
    for day in DAYS:
        pods.run("ingest", f"manual__{day}", day)
        pods.run("validate", f"manual__{day}", day)
    return pods


def test_the_pod_spec_is_enforced(pods: Pods) -> None:
    """The constraints are real: the step's user, no writable root, no capabilities."""
    pod = pods.pod("ingest", "probe", DAYS[0])
    probe = "id -u; id -G; touch /opt/trainyard/x; grep CapEff /proc/self/status"
    pod["cmds"] = ["sh", "-c", probe]
    argv, _, _ = pods.command(pod, "--rm")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    assert lines[0] == "10001" and "10001" in lines[1].split()
    assert "Read-only file system" in done.stderr
    assert lines[-1].split() == ["CapEff:", "0000000000000000"]


def test_steps_run_in_the_image_under_the_pod_constraints(pods: Pods) -> None:
    day = DAYS[-1]
    run_id = f"manual__{day}"
    assert "--set" not in pods.pod("train", run_id, day)["cmds"]
    features = pods.run("features", run_id, day)
    trained = pods.run("train", run_id, day)
    assert features["step"] == "features" and trained["step"] == "train"

    # everything the pods wrote is on the claim, as the pods' user
    owners = {p.stat().st_uid for p in pods.lake.rglob("*")}
    assert owners == {10001}, owners

    # the run in MLflow, read with the image's own MLflow (the store's schema is its version's)
    pod = pods.pod("train", run_id, day)
    pod["cmds"] = ["python", "-c", READ_RUN, run_id]
    argv, _, _ = pods.command(pod, "--rm")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(done.stdout.strip().splitlines()[-1])
    assert run["status"] == "FINISHED" and "val_loss" in run["metrics"], run
    # the DAG's settings reached the step through the pod's environment alone
    assert run["params"]["train.epochs"] == "1"
    assert run["params"]["features.window_days"] == "3"


def test_a_stopped_training_pod_checkpoints_and_its_retry_resumes(pods: Pods) -> None:
    """``docker stop`` with the pod's grace period: SIGTERM to the container's first process
    (torchrun), SIGKILL after ``terminationGracePeriodSeconds``, as the kubelet does."""
    day, run_id = DAYS[-1], "spot"
    spot = (
        "train.nproc_per_node=2",
        "train.epochs=6",  # far more steps than the stop takes
        "train.batch_size=32",
        "train.checkpoint_every=2",
        "features.row_group_rows=256",
    )
    pods.run("features", run_id, day, *spot)
    pod = pods.pod("train", run_id, day, *spot)
    name = f"trainyard-train-{time.monotonic_ns()}"
    argv, termination, _ = pods.command(pod, "--detach", "--name", name)
    subprocess.run(argv, check=True, capture_output=True)
    try:
        checkpoints = Path(
            Lake(str(pods.lake / "flight_delay")).path(Lake.run_dir(run_id), "checkpoints")
        )
        deadline = time.monotonic() + 600
        while not list(checkpoints.glob("step-*.pt")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(checkpoints.glob("step-*.pt")), _logs(name)
        grace = pod["termination_grace_period"]
        subprocess.run(["docker", "stop", "--time", str(grace), name], check=True, timeout=300)
        state = json.loads(
            subprocess.run(
                ["docker", "inspect", "--format", "{{json .State}}", name],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        logs = _logs(name)
    finally:
        subprocess.run(["docker", "rm", "--force", name], capture_output=True)

    # stopped by the signal, not killed at the end of the grace period
    assert not state["OOMKilled"] and state["ExitCode"] not in (0, 137), (state, logs[-3000:])
    assert "failed (transient)" in termination.read_text(), (termination.read_text(), logs)
    stops = STOPPED.findall(logs)
    assert len(stops) == 2 and len({b for _, b in stops}) == 1, logs[-3000:]
    stopped = int(stops[0][1])
    assert (checkpoints / f"step-{stopped:08d}.pt").exists(), sorted(checkpoints.iterdir())

    retried = pods.run("train", run_id, day, *spot)
    assert retried["resumed_from"]["step"] == stopped


def _logs(name: str) -> str:
    done = subprocess.run(["docker", "logs", name], capture_output=True, text=True)
    return done.stdout + done.stderr
