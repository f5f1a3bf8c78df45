"""The Spark engine on a standalone cluster that shares no disk with the step.

A master and two workers run as separate processes (``pipeline_steps.services.spark_cluster``),
each worker with an empty ``/tmp`` of its own, where the test's trainyard home, the driver's
scratch folders and every file a step would keep on the driver's disk live; the lake and
``engine.spark_dir`` are on an S3 server (moto's) that authenticates its one user. The steps run
as Airflow runs them, ``trainyard step`` processes, each the driver of its own application.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import FIRST_DAY, WINDOW, free_port, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BIN = Path(sys.executable).parent
BUCKET = "cluster"
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
            sc.master_environment(base, str(root)),
        )
        wait_until("the Spark master", lambda: _listening(self.port), 120)
        self.workers: list[subprocess.Popen[bytes]] = []
        for number in range(1, workers + 1):
            work_dir = f"/tmp/spark-worker-{number}" if self.isolated else str(root / f"w{number}")
            argv = sc.worker_command(
                self.url,
                work_dir,
                host="127.0.0.1",
                cores=1,
                memory="1g",
                webui_port=free_port(),
                isolate=self.isolated,
            )
            self.workers.append(
                self._start(f"worker-{number}", argv, sc.worker_environment(work_dir, base))
            )
        wait_until("two workers alive", lambda: self.alive() == workers, 120)

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
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """moto's S3 server with one user allowed everything (its keys) and the bucket."""
    import boto3

    port = free_port()
    log = tmp_path_factory.mktemp("s3") / "moto.log"
    with log.open("ab") as out:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pipeline_steps.services.s3_server",
                "-H",
                "127.0.0.1",
                "-p",
                str(port),
            ],
            env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until("moto's S3 server", lambda: _listening(port), 60)
        endpoint = f"http://127.0.0.1:{port}"
        iam = boto3.client(
            "iam",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="bootstrap",
            aws_secret_access_key="bootstrap",
        )
        iam.create_user(UserName="lake")
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
        }
        iam.put_user_policy(UserName="lake", PolicyName="lake", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="lake")["AccessKey"]
        env = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        ).create_bucket(Bucket=BUCKET)
        yield env
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)


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
    import fsspec

    fs = fsspec.filesystem(
        "s3",
        key=s3["AWS_ACCESS_KEY_ID"],
        secret=s3["AWS_SECRET_ACCESS_KEY"],
        client_kwargs={"endpoint_url": s3["AWS_ENDPOINT_URL"]},
    )
    fs.put(str(seeded_home / "lake") + "/", f"{BUCKET}/lake/", recursive=True)
    return tmp_path_factory.mktemp("cluster-home")


def step(
    name: str, run_id: str, env: dict[str, str], *settings: str, home: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(BIN / "trainyard"),
            "step",
            name,
            "--run-id",
            run_id,
            "--logical-date",
            FIRST_DAY.isoformat(),
            *[
                a
                for s in (*STEP_SETTINGS, f"lake.root=s3://{BUCKET}/lake", *settings)
                for a in ("--set", s)
            ],
        ],
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


def test_validate_features_and_monitor_run_on_the_cluster_as_on_the_local_engine(
    cluster: Cluster, s3: dict[str, str], home: Path
) -> None:
    driver_only = home / "driver-only.txt"
    driver_only.write_text("the driver's disk")
    if cluster.isolated:
        # the workers and their executors do not see the driver's /tmp, where this home is
        seen = Path(f"/proc/{cluster.workers[0].pid}/root{driver_only}")
        assert driver_only.exists() and not seen.exists()

    ingest = manifest(step("ingest", "day", s3, home=home))
    assert ingest["rows"] > 500
    validated = manifest(step("validate", "day", s3, *on(cluster), home=home))
    assert validated["verdict"] == "passed"
    assert {d["status"] for d in validated["datasets"].values()} == {"validated"}

    remote = manifest(step("features", "cluster", s3, *on(cluster), home=home))
    local = manifest(step("features", "local", s3, home=home))
    assert remote["status"] == local["status"] == "built"
    assert remote["sets"]["train"]["rows"] == local["sets"]["train"]["rows"] > 2000
    assert remote["training_set_sha256"] == local["training_set_sha256"]
    assert remote["materialized"] == local["materialized"]

    window = ("drift.current_days=1", "drift.reference_days=3", "drift.min_reference_days=2")
    drift = {
        engine: manifest(step("monitor", f"drift-{engine}", s3, *window, *extra, home=home))
        for engine, extra in (("cluster", on(cluster)), ("local", ()))
    }
    signals = {engine: d["signals"] for engine, d in drift.items()}
    assert [s["name"] for s in signals["cluster"]] == [s["name"] for s in signals["local"]]
    assert {"label", "temp", "carrier"} <= {s["name"] for s in signals["local"]}
    for a, b in zip(signals["cluster"], signals["local"], strict=True):
        assert (a["statistic"], a["crossed"]) == (b["statistic"], b["crossed"]), a["name"]
        assert a["value"] == pytest.approx(b["value"], rel=1e-6, abs=1e-9), a["name"]
    assert drift["cluster"]["drift_detected"] == drift["local"]["drift_detected"]
    # the step's scratch folders on S3 are gone with it
    import fsspec

    fs = fsspec.filesystem(
        "s3",
        client_kwargs={"endpoint_url": s3["AWS_ENDPOINT_URL"]},
        key=s3["AWS_ACCESS_KEY_ID"],
        secret=s3["AWS_SECRET_ACCESS_KEY"],
    )
    assert not fs.exists(f"{BUCKET}/spark") or not fs.ls(f"{BUCKET}/spark")
