"""The Spark engine on a standalone cluster that shares no disk with the step.

A master and two workers run as separate processes (``pipeline_steps.services.spark_cluster``),
each worker with an empty ``/tmp`` of its own, where the test's trainyard home, the driver's
scratch folders and every file a step would keep on the driver's disk live; the lake and
``engine.spark_dir`` are on an S3 server (moto's) that authenticates its one user. The steps run
as Airflow runs them, ``trainyard step`` processes, each the driver of its own application. The day
is validated on the cluster, the features step loses a worker mid-step and loads an online store
in the machine's Redis (as the production profile's do: Feast's Spark engine writes it from the
executors), and the drift monitor counts its window there; each gives what the local engine
gives.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from pipeline_steps.services.readiness import Watched, wait_until_ready
from tests.conftest import FIRST_DAY, WINDOW, free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BIN = Path(sys.executable).parent
BUCKET = "cluster"
REDIS = ("127.0.0.1", 6379, 3)
"""The machine's Redis (host, port, database) the features steps load as their online store; the
production profile's own databases are 1 and 2."""
WORKER_TIMEOUT = "-Dspark.worker.timeout=20"
"""How long the master waits on a worker's heartbeats (sent at a quarter of it) before counting
it lost: 20 s instead of Spark's 60 for the worker this test kills."""
ONLINE_CONFIG = "feature_store.cluster.yaml"
STEP_SETTINGS = (
    f"features.window_days={WINDOW}",
    "train.epochs=2",
    "validation.data_docs=false",
)


class Cluster:
    """The master and its workers, each in its own process group."""

    def __init__(self, root: Path, workers: int = 2) -> None:
        from pipeline_steps.services import spark_cluster as sc

        self.isolated = sc.can_isolate()
        self.port, self.webui = free_port(), free_port()
        self.url = sc.master_url("127.0.0.1", self.port)
        self.logs = root
        base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self.master = self._start(
            "master",
            sc.master_command("127.0.0.1", self.port, self.webui),
            {**sc.master_environment(base, str(root)), "SPARK_MASTER_OPTS": WORKER_TIMEOUT},
        )
        self.workers: list[subprocess.Popen[bytes]] = []
        try:
            self.watched = [Watched.child("the Spark master", self.master, root / "master.log")]
            wait_until_ready(
                f"the Spark master on port {self.port}", lambda: _listening(self.port), self.watched
            )
            for number in range(1, workers + 1):
                work_dir = (
                    f"/tmp/spark-worker-{number}" if self.isolated else str(root / f"w{number}")
                )
                argv = sc.worker_command(
                    self.url,
                    work_dir,
                    host="127.0.0.1",
                    cores=1,
                    memory="1g",
                    webui_port=free_port(),
                    isolate=self.isolated,
                )
                env = {**sc.worker_environment(work_dir, base), "SPARK_WORKER_OPTS": WORKER_TIMEOUT}
                self.workers.append(self._start(f"worker-{number}", argv, env))
                log = root / f"worker-{number}.log"
                self.watched.append(Watched.child(f"Spark worker {number}", self.workers[-1], log))
            # as long as the master and every worker run: a loaded machine starts them slowly
            wait_until_ready(
                f"{workers} workers registered with the Spark master",
                partial(sc.workers_alive, self.webui, workers),
                self.watched,
            )
        except BaseException:  # nothing left running when the cluster does not come up
            self.stop()
            raise

    def _start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with (self.logs / f"{name}.log").open("ab") as out:
            return subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def alive(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.webui}/json/", timeout=5) as r:
                return int(json.load(r)["aliveworkers"])
        except OSError:
            return 0

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def stop(self) -> None:
        for proc in [*self.workers, self.master]:
            self.kill(proc)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """moto's S3 server with one user allowed everything (its keys) and the bucket."""
    from pipeline_steps.services.s3_server import serving

    with serving(tmp_path_factory.mktemp("s3") / "moto.log", BUCKET) as env:
        yield env


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    pytest.importorskip("pyspark")
    from pipeline_steps.engines.spark_storage import bundled_jars

    if not bundled_jars():
        pytest.fail("no s3a:// connector: `make venv` puts it under <venv>/share/trainyard")
    running = Cluster(tmp_path_factory.mktemp("spark"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def home(seeded_home: Path, s3: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The seeded history's lake copied to S3 (the home keeps only the step's state)."""
    fs = _s3(s3)
    fs.put(str(seeded_home / "lake") + "/", f"{BUCKET}/lake/", recursive=True)
    return tmp_path_factory.mktemp("cluster-home")


@pytest.fixture(scope="module")
def online(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ...]]:
    """The settings of a feature repository (the shipped one, copied to the driver's disk) whose
    config keeps the registry in a file beside the run and the online store in Redis; the runs'
    keys removed afterwards."""
    import redis

    host, port, db = REDIS
    client = redis.Redis(host=host, port=port, db=db)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.fail(f"the cluster test's online store needs Redis at {host}:{port}: {exc}")
    repo = tmp_path_factory.mktemp("feature-repo") / "repo"
    shutil.copytree(Path(__file__).parents[2] / "examples" / "flight_delay" / "feature_repo", repo)
    (repo / ONLINE_CONFIG).write_text(
        "project: ${TRAINYARD_FEAST_PROJECT}\n"
        "provider: local\n"
        "registry: ${TRAINYARD_FEAST_DIR}/registry.db\n"
        f"online_store: {{type: redis, connection_string: '{host}:{port},db={db}'}}\n"
        "offline_store: {type: duckdb}\n"
        "entity_key_serialization_version: 3\n"
    )
    try:
        yield (f"features.feature_repo={repo}", f"features.store_config={ONLINE_CONFIG}")
    finally:
        for run_id in RUNS:
            for key in client.scan_iter(match=b"*" + _project(run_id).encode(), count=1000):
                client.delete(key)


RUNS = ("lost-worker", "local")


def _project(run_id: str) -> str:
    from pipeline_steps.core.settings import FeatureSettings
    from pipeline_steps.steps.features import project_of_run

    return project_of_run(FeatureSettings().project, run_id)


def online_rows(run_id: str) -> dict[bytes, dict[bytes, bytes]]:
    """What the run's features step wrote to the online store: each entity's hash of feature
    values, by the entity's key without the run's project."""
    import redis

    host, port, db = REDIS
    client = redis.Redis(host=host, port=port, db=db)
    project = _project(run_id).encode()
    return {
        key.removesuffix(project): client.hgetall(key)
        for key in client.scan_iter(match=b"*" + project, count=1000)
    }


def step_argv(name: str, run_id: str, *settings: str) -> list[str]:
    every = (*STEP_SETTINGS, f"lake.root=s3://{BUCKET}/lake", *settings)
    return [
        str(BIN / "trainyard"),
        "step",
        name,
        "--run-id",
        run_id,
        "--logical-date",
        FIRST_DAY.isoformat(),
        *[arg for setting in every for arg in ("--set", setting)],
    ]


def step(
    name: str, run_id: str, env: dict[str, str], *settings: str, home: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        step_argv(name, run_id, *settings),
        env={**os.environ, **env, "TRAINYARD_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=900,
    )


def on(cluster: Cluster) -> tuple[str, ...]:
    return (
        "engine.name=spark",
        f"engine.spark_master={cluster.url}",
        f"engine.spark_dir=s3://{BUCKET}/spark",
    )


def manifest(done: subprocess.CompletedProcess[str]) -> dict:
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def features_losing_a_worker(
    cluster: Cluster, env: dict[str, str], home: Path, *settings: str
) -> subprocess.CompletedProcess[str]:
    """The features step on the cluster, its second worker killed (with its executor) once the
    step's application has its executors and the step is a few seconds into its work."""
    worker_log = cluster.logs / "worker-2.log"
    launched = worker_log.read_text().count("Asked to launch executor")
    with subprocess.Popen(
        step_argv("features", "lost-worker", *on(cluster), *settings),
        env={**os.environ, **env, "TRAINYARD_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as running:
        step_process = Watched.child("the features step", running)
        wait_until_ready(
            "an executor of the step on the second worker",
            lambda: worker_log.read_text().count("Asked to launch executor") > launched,
            [step_process, *cluster.watched],
        )
        time.sleep(8)
        assert running.poll() is None, "the step ended before the worker could be lost"
        cluster.kill(cluster.workers[1])
        out, err = running.communicate(timeout=900)
    return subprocess.CompletedProcess(running.args, running.returncode, out, err)


@pytest.mark.services  # the online store in the machine's Redis
def test_validate_features_and_monitor_on_the_cluster_as_on_the_local_engine_losing_a_worker(
    cluster: Cluster, s3: dict[str, str], home: Path, online: tuple[str, ...]
) -> None:
    driver_only = home / "driver-only.txt"
    driver_only.write_text("the driver's disk")
    if cluster.isolated:
        # the workers and their executors do not see the driver's /tmp, where this home is
        seen = Path(f"/proc/{cluster.workers[0].pid}/root{driver_only}")
        assert driver_only.exists() and not seen.exists()

    ingest = manifest(step("ingest", "day", s3, home=home))
    assert ingest["rows"] > 500
    # Great Expectations' Spark datasource reads the raw partition by its s3a:// name
    validated = manifest(step("validate", "day", s3, *on(cluster), home=home))
    assert validated["verdict"] == "passed"

    # A worker (and its executor) lost mid-step: Spark runs its tasks again on the other one.
    lost = features_losing_a_worker(cluster, s3, home, *online)
    remote = manifest(lost)
    # the same step and the drift monitor on the driver alone, while the master counts the lost
    # worker out (its heartbeats stopped for spark.worker.timeout)
    on_driver = step("features", "local", s3, *online, home=home)
    local = manifest(on_driver)
    window = ("drift.current_days=1", "drift.reference_days=3", "drift.min_reference_days=2")
    measured = {"local": manifest(step("monitor", "monitor-local", s3, *window, home=home))}
    wait_until_ready(
        "the master to count one worker",
        lambda: cluster.alive() == 1,
        cluster.watched[:2],
    )
    assert remote["status"] == local["status"] == "built"
    assert remote["sets"]["train"]["rows"] == local["sets"]["train"]["rows"] > 2000
    assert remote["training_set_sha256"] == local["training_set_sha256"]
    assert remote["materialized"] == local["materialized"]
    # the online store: written by the cluster's executors, the same as the local engine wrote
    assert "materialisation engine spark.engine" in lost.stderr, lost.stderr[-3000:]
    assert "materialisation engine local" in on_driver.stderr, on_driver.stderr[-3000:]
    written = online_rows("lost-worker")
    assert len(written) > 1000 and written == online_rows("local")

    # The drift monitor: the window joined through Feast's Spark store from sources on S3 and
    # counted by Spark aggregates on the workers gives the local engine's signals.
    cluster_run = step("monitor", "monitor-cluster", s3, *window, *on(cluster), home=home)
    measured["cluster"] = manifest(cluster_run)
    signals = {name: m["signals"] for name, m in measured.items()}
    assert [s["name"] for s in signals["cluster"]] == [s["name"] for s in signals["local"]]
    assert {"label", "temp", "carrier"} <= {s["name"] for s in signals["local"]}
    for a, b in zip(signals["cluster"], signals["local"], strict=True):
        assert (a["statistic"], a["crossed"]) == (b["statistic"], b["crossed"]), a["name"]
        assert a["value"] == pytest.approx(b["value"], rel=1e-6, abs=1e-9), a["name"]
    assert measured["cluster"]["drift_detected"] == measured["local"]["drift_detected"]

    # the steps' scratch folders on S3 went with them
    fs = _s3(s3)
    assert not fs.exists(f"{BUCKET}/spark") or not fs.ls(f"{BUCKET}/spark")


def test_credentials_the_store_refuses_name_the_setting(
    s3: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline_steps.core.errors import StepError
    from pipeline_steps.core.settings import EngineSettings
    from pipeline_steps.engines.spark_storage import check_cluster

    for key, value in {**s3, "AWS_SECRET_ACCESS_KEY": "not-the-key"}.items():
        monkeypatch.setenv(key, value)
    with socket.socket() as master:  # a master that answers: only the store is wrong
        master.bind(("127.0.0.1", 0))
        master.listen()
        settings = EngineSettings(
            name="spark",
            spark_master=f"spark://127.0.0.1:{master.getsockname()[1]}",
            spark_dir=f"s3://{BUCKET}/spark",
        )
        with pytest.raises(
            StepError,
            match=r"engine.spark_dir s3://cluster/spark: the object "
            r"store refused the credentials \(AWS_ACCESS_KEY_ID",
        ):
            check_cluster(settings)


def _s3(env: dict[str, str]) -> Any:
    import fsspec

    return fsspec.filesystem(
        "s3",
        key=env["AWS_ACCESS_KEY_ID"],
        secret=env["AWS_SECRET_ACCESS_KEY"],
        client_kwargs={"endpoint_url": env["AWS_ENDPOINT_URL"]},
        skip_instance_cache=True,
    )
