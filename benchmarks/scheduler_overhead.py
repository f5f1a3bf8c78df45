"""The scheduler's overhead in finished runs of a chained DAG, read through Airflow's REST API.

For each run: the gap from each task's end to the next task's start (one per task boundary),
the run's wall time (first task's start to last task's end), the sum of its task instances'
durations, and the sum of its steps' own times (the subprocess wall time each step task logs as
"step X exited with code N after S s"). The overhead of a run is its wall time minus the sum of
its steps' own times; its share is that over the wall time.

    python benchmarks/scheduler_overhead.py --url http://127.0.0.1:8080 --user admin \
        --password-env AIRFLOW_ADMIN_PASSWORD --dag flight_delay_training RUN_ID [RUN_ID ...]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline_steps.services.airflow_api import AirflowApi, boundary_gaps

STEP_TIME = re.compile(r"step \w+ exited with code \d+ after ([0-9.]+) s")


def _seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def step_time(api: AirflowApi, dag: str, run_id: str, ti: dict[str, Any]) -> float | None:
    path = (
        f"/api/v2/dags/{dag}/dagRuns/{run_id}/taskInstances/{ti['task_id']}/logs/"
        f"{ti['try_number']}?full_content=true"
    )
    content = api.get(path).get("content", [])
    text = " ".join(str(e.get("event", e)) if isinstance(e, dict) else str(e) for e in content)
    found = STEP_TIME.findall(text)
    return float(found[-1]) if found else None


def measure(api: AirflowApi, dag: str, run_id: str) -> dict[str, Any]:
    tis = [t for t in api.task_instances(dag, run_id) if t.get("start_date") and t.get("end_date")]
    tis.sort(key=lambda t: t["start_date"])
    wall = _seconds(tis[0]["start_date"], tis[-1]["end_date"])
    steps = [s for s in (step_time(api, dag, run_id, t) for t in tis) if s is not None]
    own = sum(steps)
    gaps = boundary_gaps(tis)
    return {
        "run_id": run_id,
        "tasks": len(tis),
        "gaps": gaps,
        "median_gap_s": statistics.median(gaps),
        "wall_s": wall,
        "task_s": sum(float(t["duration"] or 0) for t in tis),
        "steps_s": own,
        "overhead_share": (wall - own) / wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--user", default="admin")
    parser.add_argument("--password-env", default="AIRFLOW_ADMIN_PASSWORD")
    parser.add_argument("--dag", default="flight_delay_training")
    parser.add_argument("runs", nargs="+")
    args = parser.parse_args()
    api = AirflowApi(args.url, args.user, os.environ[args.password_env])
    rows = [measure(api, args.dag, run_id) for run_id in args.runs]
    print("run                       tasks  median gap  max gap    wall   tasks   steps  overhead")
    for r in rows:
        print(
            f"{r['run_id'][:24]:24} {r['tasks']:5}  {r['median_gap_s']:8.2f} s "
            f"{max(r['gaps']):6.2f} s {r['wall_s']:6.1f} s {r['task_s']:6.1f} s "
            f"{r['steps_s']:6.1f} s  {r['overhead_share']:6.1%}"
        )
    gaps = [g for r in rows for g in r["gaps"]]
    print(
        f"all boundaries: median {statistics.median(gaps):.2f} s over {len(gaps)}; "
        f"median overhead share {statistics.median(r['overhead_share'] for r in rows):.1%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
