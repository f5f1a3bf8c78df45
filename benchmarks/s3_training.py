"""The train step reading its frozen set from object storage, with less memory than the set.

Real days repeated (as ``benchmarks/scale.py`` writes them, ``--copies`` times) go through
ingest, validate and features on a local lake, whose validated days are then copied to an S3
server (moto's, as the production profile on one machine runs it). The train step runs on the
local lake; then, with ``lake.root`` on S3, the features step freezes the same set there and the
train step runs inside a cgroup (v1 memory controller) whose limit is below the training set's
decoded size; each step in a fresh process. Recorded:
the set's rows, its size on S3 and in memory (Arrow), each run's wall
time, peak RSS and the cgroup's peak usage and failures, and the final training loss of both
(the same rows in the same order give the same loss)::

    .venv/bin/python benchmarks/s3_training.py --copies 300 --memory-limit 1280M --no-checks

Needs root (the cgroup) and moto's server (``pip install 'trainyard[production]'``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parent.parent

from scale import (  # noqa: E402
    DAY,
    lake_of,
    lifted_suites,
    measure,
    overrides,
    seed_history,
    write_days,
)

CGROUP = Path("/sys/fs/cgroup/memory")
BUCKET = "trainyard-bench"


def parse_bytes(text: str) -> int:
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].isalpha() else int(text)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def decoded_bytes(path: Path) -> tuple[int, int, int]:
    """Rows, row groups and in-memory (Arrow) bytes of a parquet file, read a row group at a
    time."""
    parquet = pq.ParquetFile(path)
    groups = parquet.metadata.num_row_groups
    size = sum(parquet.read_row_group(i).nbytes for i in range(groups))
    return parquet.metadata.num_rows, groups, size


def start_s3(folder: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=(folder / "moto.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    import urllib.request

    for _ in range(100):
        try:
            urllib.request.urlopen(url, timeout=1)
            break
        except Exception:
            time.sleep(0.2)
    return server, url


def s3_env(url: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": url,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def upload(lake: Path, url: str) -> None:
    """The local lake's files to ``s3://BUCKET/lake/flight_delay/``, but the runs' training
    sets and files (the features step writes them again there, with their S3 paths)."""
    import boto3

    client = boto3.client("s3", endpoint_url=url, **_keys(url))
    client.create_bucket(Bucket=BUCKET)
    for path in lake.rglob("*"):
        if path.relative_to(lake).parts[0] in ("training_sets", "runs"):
            continue
        if path.is_file():
            key = f"lake/flight_delay/{path.relative_to(lake)}"
            client.upload_file(str(path), BUCKET, key)


def _keys(url: str) -> dict[str, str]:
    env = s3_env(url)
    return {
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
        "region_name": env["AWS_DEFAULT_REGION"],
    }


def in_cgroup(name: str, limit: int) -> Path:
    group = CGROUP / name
    group.mkdir(exist_ok=True)
    (group / "memory.limit_in_bytes").write_text(str(limit))
    (group / "memory.max_usage_in_bytes").write_text("0")
    return group


def trained(manifest: dict) -> dict:
    """What two trainings on the same rows must share: the registered weights' sha256 and the
    epoch's metrics."""
    keep = ("train_loss", "val_loss", "val_auc")
    return {
        "weights_sha256": manifest.get("weights_sha256"),
        **{k: v for k, v in (manifest.get("metrics") or {}).items() if k in keep},
    }


def empty_suites(folder: Path) -> Path:
    """The suites without expectations: the days pass validate at once (the training is
    measured here, not the checks, which ``benchmarks/scale.py`` measures)."""
    out = folder / "expectations-empty"
    shutil.copytree(folder / "expectations", out, dirs_exist_ok=True)
    for path in out.glob("*.json"):
        suite = json.loads(path.read_text())
        suite["expectations"] = []
        path.write_text(json.dumps(suite, indent=2))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=300)
    parser.add_argument("--window", type=int, default=30)
    parser.add_argument("--memory-limit", default="1280M", help="the S3 run's cgroup limit")
    parser.add_argument("--work", type=Path, default=Path("/tmp/trainyard-scale"))
    parser.add_argument(
        "--no-checks", action="store_true", help="validate with empty suites (faster seeding)"
    )
    args = parser.parse_args()
    limit = parse_bytes(args.memory_limit)

    days = [DAY - timedelta(days=n) for n in range(args.window, 0, -1)]
    folder = args.work / f"k{args.copies}"
    write_days(folder, args.copies, [*days, DAY])
    lifted_suites(folder)
    sets = overrides(folder, args.window, [])
    if args.no_checks:
        sets.append(f"validation.expectations_dir={empty_suites(folder)}")
    home = folder / "home"
    seed_history(folder, home, days, sets)
    run_id = "bench_s3_train"
    for step in ("ingest", "validate", "features"):
        result = measure(step, home, sets, run_id)
        print(json.dumps(result), flush=True)
        if result["rc"]:
            raise SystemExit(f"{step} failed: {result.get('error')}")
    train_set = lake_of(home) / "training_sets" / run_id / "train.parquet"
    rows, groups, decoded = decoded_bytes(train_set)
    stored = train_set.stat().st_size
    print(json.dumps({"rows": rows, "row_groups": groups, "stored": stored, "decoded": decoded}))

    run_dir = lake_of(home) / "runs" / run_id  # a run trained before would be cached
    (run_dir / "train.json").unlink(missing_ok=True)
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    server, url = start_s3(folder)
    try:
        upload(lake_of(home), url)
        local = measure("train", home, sets, run_id)
        local |= trained(json.loads((lake_of(home) / "runs" / run_id / "train.json").read_text()))
        print(json.dumps({"lake": "local", **local}), flush=True)
        group = in_cgroup("trainyard-s3-train", limit)
        env = {**s3_env(url), "TRAINYARD_LAKE__ROOT": f"s3://{BUCKET}/lake"}
        s3_home = folder / "home-s3"  # its own MLflow store and scratch
        shutil.rmtree(s3_home, ignore_errors=True)
        s3_home.mkdir()
        features = measure("features", s3_home, sets, run_id, env=env)
        print(json.dumps({"lake": "s3", **features}), flush=True)
        if features["rc"]:
            raise SystemExit(f"features on S3 failed: {json.dumps(features)}")
        remote = measure("train", s3_home, sets, run_id, env=env, cgroup=group)
        remote["cgroup_peak_mib"] = round(
            int((group / "memory.max_usage_in_bytes").read_text()) / 2**20
        )
        remote["cgroup_failcnt"] = int((group / "memory.failcnt").read_text())
        remote["limit_mib"] = round(limit / 2**20)
        if remote["rc"]:
            raise SystemExit(f"train on S3 failed: {json.dumps(remote)}")
        import boto3

        client = boto3.client("s3", endpoint_url=url, **_keys(url))
        body = client.get_object(Bucket=BUCKET, Key=f"lake/flight_delay/runs/{run_id}/train.json")
        remote |= trained(json.loads(body["Body"].read()))
        print(json.dumps({"lake": "s3", **remote}), flush=True)
    finally:
        server.terminate()
        server.wait()
    print(
        f"\n| set rows | row groups | on S3 MiB | decoded MiB | lake | limit MiB | train s | "
        f"peak RSS MiB | cgroup peak MiB |\n|---:|---:|---:|---:|---|---:|---:|---:|---:|\n"
        f"| {rows:,} | {groups} | {stored / 2**20:.0f} | {decoded / 2**20:.0f} | local | none | "
        f"{local['wall_s']} | {local['peak_rss_mib']} | |\n"
        f"| {rows:,} | {groups} | {stored / 2**20:.0f} | {decoded / 2**20:.0f} | s3 | "
        f"{remote['limit_mib']} | {remote['wall_s']} | {remote['peak_rss_mib']} | "
        f"{remote['cgroup_peak_mib']} |"
    )
    if os.environ.get("KEEP_CGROUP") != "1":
        group.rmdir()


if __name__ == "__main__":
    main()
