"""Cold start of the docker-compose profile, and the size of each image it runs.

Each run starts docker-compose.yaml with the offline override (containers/offline/compose.yaml)
under a fresh project (fresh named volumes: PostgreSQL initialised, the Airflow database
migrated, the bucket and the MLflow user created) with two Celery workers, and records the
seconds from `docker compose up` to each container being healthy (a one-shot service: exited
0), then `docker compose down -v`. The images must be built (`make images`); their sizes are
read from the engine.

    .venv/bin/python benchmarks/compose_start.py --runs 3

A table of medians (min-max) per service is printed; the raw figures go to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.containers.engine import LONG_RUNNING, ONE_SHOT, Compose, env_file

IMAGES = (
    "trainyard-base:bookworm",
    "trainyard-step:0.1.0",
    "trainyard-airflow-base:3.3.2",
    "trainyard-airflow:0.1.0",
    "trainyard-offline-postgres:15",
    "trainyard-offline-redis:7",
    "trainyard-offline-s3:5",
)
WORKERS = 2


def image_sizes() -> dict[str, int]:
    sizes = {}
    for image in IMAGES:
        out = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{.Size}}", image],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        sizes[image] = int(out)
    return sizes


def one_start(run: int) -> dict[str, float]:
    """Seconds from `up` to healthy, per service (the slower worker for the workers)."""
    with tempfile.TemporaryDirectory() as folder:
        env = Path(folder) / ".env"
        env_file(env)
        compose = Compose(f"trainyard-bench-{run}", env)
        try:
            # `up --detach` returns once the services others depend on are healthy; polling
            # beside it sees each container as it gets there
            up = subprocess.Popen(
                [
                    *compose.base,
                    "up",
                    "--detach",
                    "--no-build",
                    "--scale",
                    f"airflow-worker={WORKERS}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            ready = compose.wait_until_healthy(WORKERS, 900)
            _, errors = up.communicate()
            assert up.returncode == 0, errors[-3000:]
            services = {c["Name"]: c["Service"] for c in compose.containers()}
        finally:
            compose("down", "--volumes", "--remove-orphans", "--timeout", "30", check=False)
    by_service: dict[str, float] = {}
    for name, seconds in ready.items():
        service = services[name]
        by_service[service] = max(by_service.get(service, 0.0), seconds)
    by_service["all healthy"] = max(by_service.values())
    return by_service


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("compose_start.json"))
    args = parser.parse_args()

    sizes = image_sizes()
    runs = []
    for run in range(args.runs):
        runs.append(one_start(run))
        print(f"run {run + 1}: all healthy after {runs[-1]['all healthy']:.0f} s", flush=True)
    args.out.write_text(json.dumps({"image_bytes": sizes, "runs": runs}, indent=2))

    print("\n| image | size |\n|---|---:|")
    for image, size in sizes.items():
        print(f"| `{image}` | {size / 1e6:,.0f} MB |")
    print(f"\n| service (up to healthy, {args.runs} cold starts) | median s | min-max s |")
    print("|---|---:|---:|")
    order = [*ONE_SHOT, *LONG_RUNNING, "all healthy"]
    for key in order:
        values = [r[key] for r in runs if key in r]
        if values:
            print(
                f"| {key} | {statistics.median(values):.0f} | {min(values):.0f}-{max(values):.0f} |"
            )


if __name__ == "__main__":
    main()
