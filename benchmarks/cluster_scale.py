"""The data steps on a standalone Spark cluster as the window grows: per step, wall time, the
driver's peak memory and the executors', and the executors' task time.

Real days repeated as ``benchmarks/scale.py`` writes them (the same lifted suites), the history
ingested and validated on the local engine in this process (not measured); the lake is then
copied to an S3 server (moto's, as the production profile and the cluster test run it) and the
measured day's raw files ingested there. A standalone cluster runs beside it: a master and
``--workers`` workers of one core each, every worker with an empty ``/tmp`` of its own where the
machine lets it (``pipeline_steps.services.spark_cluster``). Then validate, features (its online
store in the machine's Redis, loaded by Feast's Spark materialisation engine) and monitor run for
the day as ``trainyard step`` processes with ``engine.name=spark`` on that master, the lake and
``engine.spark_dir`` on S3, each the driver of its own application:

    .venv/bin/python benchmarks/cluster_scale.py --copies 1 10 100 300 --workers 2
    .venv/bin/python benchmarks/cluster_scale.py --copies 100 --workers 1 2 --steps features

Recorded per step: wall seconds; the driver's peak RSS (the step's Python process and its JVM,
sampled every 0.1 s, as ``scale.py`` does); each worker's executors' peak RSS (the processes the
worker started for the step: the executor JVM and its Python workers, sampled every 0.2 s); and,
from the application's event log, the executors' task time (the sum of ``Executor Run Time``)
with the window's rows per second of it: a task's throughput, which carries to a cluster with
more cores. The monitor's window (``drift.reference_days`` + ``drift.current_days``, no champion
in this lake) is counted, not scored. Results are printed as a markdown table and appended to
``--out`` as JSON lines.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import timedelta
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale  # the sibling benchmark: its lake of repeated days and its measurement

from pipeline_steps.services.readiness import Watched, wait_until_ready
from pipeline_steps.services.s3_server import serving

BUCKET = "scale"
REDIS = ("127.0.0.1", 6379, 4)
ONLINE_CONFIG = "feature_store.cluster.yaml"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


class Cluster:
    """A master and ``workers`` workers of one core and ``memory`` each."""

    def __init__(self, logs: Path, workers: int, memory: str) -> None:
        from pipeline_steps.services import spark_cluster as sc

        self.isolated = sc.can_isolate()
        port, self.webui = free_port(), free_port()
        self.url = sc.master_url("127.0.0.1", port)
        base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self.master = _start(
            sc.master_command("127.0.0.1", port, self.webui),
            sc.master_environment(base, str(logs)),
            logs / "master.log",
        )
        self.workers: list[subprocess.Popen[bytes]] = []
        try:
            watched = [Watched.child("the Spark master", self.master, logs / "master.log")]
            wait_until_ready(f"the Spark master on port {port}", lambda: listening(port), watched)
            for number in range(1, workers + 1):
                work_dir = (
                    f"/tmp/spark-worker-{number}" if self.isolated else str(logs / f"w{number}")
                )
                argv = sc.worker_command(
                    self.url,
                    work_dir,
                    host="127.0.0.1",
                    cores=1,
                    memory=memory,
                    webui_port=free_port(),
                    isolate=self.isolated,
                )
                env = sc.worker_environment(work_dir, base)
                log = logs / f"worker-{number}.log"
                self.workers.append(_start(argv, env, log))
                watched.append(Watched.child(f"Spark worker {number}", self.workers[-1], log))
            wait_until_ready(
                f"{workers} workers registered with the Spark master",
                partial(sc.workers_alive, self.webui, workers),
                watched,
            )
        except BaseException:
            self.stop()
            raise

    def alive(self) -> int:
        try:
            url = f"http://127.0.0.1:{self.webui}/json/"
            with urllib.request.urlopen(url, timeout=5) as answer:
                return int(json.load(answer)["aliveworkers"])
        except OSError:
            return 0

    def stop(self) -> None:
        for proc in [*self.workers, self.master]:
            _stop(proc)


class ExecutorMemory:
    """Each worker's executors' peak RSS while the block runs: every process under the worker's
    JVM (the executors it launched and their Python workers), summed per worker."""

    def __init__(self, workers: list[subprocess.Popen[bytes]]) -> None:
        self.pids = [w.pid for w in workers]
        self.peaks = [0] * len(self.pids)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _executor_rss(self, pid: int) -> int:
        import psutil

        try:
            tree = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            return 0
        jvm = next((p for p in tree if "Worker" in " ".join(_cmdline(p))), None)
        total = 0
        for proc in tree:
            if proc is jvm or (jvm is None and proc.pid == pid):
                continue
            try:
                if jvm is not None and jvm.pid not in [a.pid for a in proc.parents()]:
                    continue
                total += proc.memory_info().rss
            except psutil.Error:
                continue
        return total

    def _sample(self) -> None:
        while not self._done.is_set():
            for n, pid in enumerate(self.pids):
                self.peaks[n] = max(self.peaks[n], self._executor_rss(pid))
            self._done.wait(0.2)

    def __enter__(self) -> ExecutorMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def _cmdline(proc) -> list[str]:  # type: ignore[no-untyped-def]
    import psutil

    try:
        return list(proc.cmdline())
    except psutil.Error:
        return []


def task_seconds(events: Path, since: float) -> tuple[float, int]:
    """The executors' task time (seconds) and task count of the applications whose event logs
    under ``events`` were written after ``since``."""
    ran_ms, tasks = 0, 0
    for log in events.rglob("*"):
        if not log.is_file() or log.stat().st_mtime < since:
            continue
        with log.open() as lines:
            for line in lines:
                if '"SparkListenerTaskEnd"' not in line:
                    continue
                metrics = json.loads(line).get("Task Metrics") or {}
                ran_ms += int(metrics.get("Executor Run Time", 0))
                tasks += 1
    return ran_ms / 1000, tasks


def online_repo(folder: Path) -> Path:
    """The shipped feature repository with a config whose online store is the machine's Redis."""
    repo = folder / "feature-repo"
    shutil.copytree(
        scale.ROOT / "examples" / "flight_delay" / "feature_repo", repo, dirs_exist_ok=True
    )
    host, port, db = REDIS
    (repo / ONLINE_CONFIG).write_text(
        "project: ${TRAINYARD_FEAST_PROJECT}\nprovider: local\n"
        "registry: ${TRAINYARD_FEAST_DIR}/registry.db\n"
        f"online_store: {{type: redis, connection_string: '{host}:{port},db={db}'}}\n"
        "offline_store: {type: duckdb}\nentity_key_serialization_version: 3\n"
    )
    return repo


def upload_lake(home: Path, env: dict[str, str]) -> None:
    import fsspec

    fs = fsspec.filesystem(
        "s3",
        key=env["AWS_ACCESS_KEY_ID"],
        secret=env["AWS_SECRET_ACCESS_KEY"],
        client_kwargs={"endpoint_url": env["AWS_ENDPOINT_URL"]},
        skip_instance_cache=True,
    )
    with contextlib.suppress(FileNotFoundError):
        fs.rm(f"{BUCKET}/lake", recursive=True)
    fs.put(str(home / "lake") + "/", f"{BUCKET}/lake/", recursive=True)


def measure_on(
    cluster: Cluster, step: str, home: Path, sets: list[str], run_id: str, env: dict[str, str],
    events: Path,
) -> dict:  # fmt: skip
    since = time.time()
    with ExecutorMemory(cluster.workers) as executors:
        result = scale.measure(step, home, sets, run_id, env=env)
    ran_s, tasks = task_seconds(events, since)
    result["executors_peak_mib"] = [round(p / 2**20) for p in executors.peaks]
    result["task_s"] = round(ran_s, 1)
    result["tasks"] = tasks
    return result


def run_size(args: argparse.Namespace, copies: int, workers: int, env: dict[str, str]) -> list:
    days = [scale.DAY - timedelta(days=n) for n in range(args.window, 0, -1)]
    folder = args.work / f"k{copies}"
    scale.write_days(folder, copies, [*days, scale.DAY])
    scale.lifted_suites(folder)
    base = scale.overrides(folder, args.window, [])
    home = folder / "home"
    scale.seed_history(folder, home, days, base)
    upload_lake(home, env)
    cluster_home = folder / f"cluster-home-{workers}"
    shutil.rmtree(cluster_home, ignore_errors=True)
    cluster_home.mkdir(parents=True)
    events = folder / f"events-{workers}"
    shutil.rmtree(events, ignore_errors=True)
    events.mkdir()
    logs = folder / f"cluster-logs-{workers}"
    logs.mkdir(exist_ok=True)
    repo = online_repo(folder)
    spark_conf = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": f"file://{events}",
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
        "spark.executor.memory": args.executor_memory,
    }
    rows = []
    cluster = Cluster(logs, workers, args.worker_memory)
    try:
        sets = [
            *base,
            f"lake.root=s3://{BUCKET}/lake",
            "engine.name=spark",
            f"engine.spark_master={cluster.url}",
            f"engine.spark_dir=s3://{BUCKET}/spark",
            f"engine.spark_conf={json.dumps(spark_conf)}",
            f"features.feature_repo={repo}",
            f"features.store_config={ONLINE_CONFIG}",
        ]
        run_id = f"cluster_{workers}w_{time.strftime('%Y%m%dT%H%M%S')}"
        for step in ["ingest", *args.steps]:
            if step == "ingest":  # the day's raw files to S3, on the step as Airflow runs it
                result = scale.measure("ingest", cluster_home, sets, run_id, env=env)
                if "validate" not in args.steps:  # the day validated, not measured
                    local = [*sets, "engine.name=local"]
                    scale.measure("validate", cluster_home, local, run_id, env=env)
            else:
                result = measure_on(cluster, step, cluster_home, sets, run_id, env, events)
            result |= {"copies": copies, "workers": workers, "run_id": run_id}
            rows.append(result)
            print(json.dumps(result), flush=True)
    finally:
        cluster.stop()
    drift_days = [scale.DAY - timedelta(days=n) for n in range(args.drift_days, 0, -1)]
    counted = {
        "ingest": _flights(folder, [scale.DAY]),
        "validate": _flights(folder, [scale.DAY]),
        "features": _flights(folder, [*days, scale.DAY]),
        "monitor": _flights(folder, drift_days),
    }
    for row in rows:
        row["rows"] = counted[row["step"]]
    return rows


def _flights(folder: Path, days: list) -> int:  # type: ignore[type-arg]
    """The raw flights of ``days`` (each day's parquet file's row count)."""
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(folder / "flights" / f"{day}.parquet").num_rows for day in days)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--workers", type=int, nargs="+", default=[2])
    parser.add_argument("--window", type=int, default=30)
    parser.add_argument(
        "--steps", nargs="+", default=["validate", "features", "monitor"],
        choices=["validate", "features", "monitor"],
    )  # fmt: skip
    parser.add_argument(
        "--drift-days", type=int, default=21, help="drift.reference_days + drift.current_days"
    )
    parser.add_argument("--worker-memory", default="3g")
    parser.add_argument("--executor-memory", default="2g")
    parser.add_argument("--work", type=Path, default=Path("/tmp/trainyard-scale"))
    parser.add_argument(
        "--out", type=Path, default=Path("/tmp/trainyard-scale/cluster-results.jsonl")
    )
    args = parser.parse_args()
    logs = args.work / "s3-logs"
    logs.mkdir(parents=True, exist_ok=True)
    rows = []
    with serving(logs / "moto.log", BUCKET) as env:
        for copies in args.copies:
            for workers in args.workers:
                rows += run_size(args, copies, workers, env)
    with args.out.open("a") as fh:
        for row in rows:
            fh.write(json.dumps({**row, "at": time.strftime("%Y-%m-%dT%H:%M:%S")}) + "\n")
    print(
        "\n| copies | rows read | workers | step | wall s | driver MiB | executors MiB "
        "| task s | rows per task s |"
    )
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        status = "" if r["rc"] == 0 else f" (failed: {r.get('error', '')})"
        executors = " + ".join(str(m) for m in r.get("executors_peak_mib", [])) or ""
        per_task = round(r["rows"] / r["task_s"]) if r.get("task_s") and r["rows"] else ""
        print(
            f"| {r['copies']} | {r['rows'] or ''} | {r['workers']} | {r['step']} | "
            f"{r['wall_s']} | {r['tree_peak_mib']} | {executors} | {r.get('task_s', '')} | "
            f"{per_task}{status} |"
        )


if __name__ == "__main__":
    main()
