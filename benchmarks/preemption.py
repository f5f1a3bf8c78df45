"""Preemption and recovery: what SIGTERM saves, and how soon the retry trains again.

Two models train under torchrun on the CPU (2 ranks, gloo), on the training set of 2013-06-04
(the demo's 30-day window), built once by the real ingest, validate and features steps in a
fresh home (``--home`` reuses one):

    demo      ``train.model=mlp`` with every default (hidden layers 128, 64; batch 512; six
              epochs): a checkpoint at each epoch end (``checkpoint_every`` 200 is more than an
              epoch's steps)
    100m      ``mlp`` with four hidden layers of 5,760 (about 100M parameters), batch 16, one
              epoch, a checkpoint every 20 steps

Each repeat trains a fresh run id. Once two checkpoints are on disk (their spacing gives the
checkpoint interval and the seconds per step), it waits a random fraction (0.15-0.85, recorded)
of an interval and sends SIGTERM to the torchrun launcher, as the kubelet signals a pod's main
process. It records the step the signal interrupted (X) and the one the ranks stopped after (Y)
from the failure line, the seconds to the checkpoint (the step's own figure, and the file's
appearance seen from here, with the time its temporary file took to fill and be renamed), to
the workers' exit and to the launcher's exit, and the work a process without SIGTERM
handling would lose: X minus the newest checkpoint on disk at the signal, in steps and in
seconds since that checkpoint appeared. Then it launches the retry and times it to the
``resumed:`` line of its first new optimizer step, split at the ``resuming from`` line (after
the checkpoint is read); the checkpoint's read is also timed alone in this process. The demo's
retry trains to its end and its manifest's ``resumed_from`` is checked; the 100M model's retry
(an epoch is ~750 steps) gets SIGTERM right after its first new step, a second stop measured.

    .venv/bin/python benchmarks/preemption.py --repeat 3

A table of medians (min-max) is printed; every raw figure goes to ``--out`` as JSON and each
launch's output to ``<out>-logs/``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from pipeline_steps.core.context import RunContext  # noqa: E402
from pipeline_steps.core.lake import Lake  # noqa: E402
from pipeline_steps.core.settings import load_settings  # noqa: E402

RUN = "preemption_benchmark"
DAY = date(2013, 6, 4)
NPROC = 2
STOPPED = re.compile(
    r"failed \(transient\): SIGTERM during optimizer step (\d+): stopped after step (\d+) "
    r"\(epoch (\d+)\), checkpointed(?: as (\S+))? ([0-9.]+) s after the signal"
)
TAKEN = re.compile(r"SIGTERM: stopping at the next step boundary")
RESUMING = re.compile(r"resuming from (\S+) \(epoch (\d+), batch (\d+)\)")
RESUMED = re.compile(r"resumed: optimizer step (\d+) done on (\d+) processes")
CHECKPOINT = re.compile(r"^step-(\d+)\.pt(\.tmp-.*)?$")


@dataclass(frozen=True, slots=True)
class Model:
    """One model of the benchmark: its settings and how its retry ends."""

    name: str
    overrides: tuple[str, ...]
    """``--set`` values beyond the run's base settings."""
    finish_retry: bool
    """Let the retry train to its end (and check its manifest); else SIGTERM it after its
    first new step."""
    poll_s: float
    """How often the checkpoint folder is listed."""


MODELS = {
    "demo": Model("demo", (), finish_retry=True, poll_s=0.005),
    "100m": Model(
        "100m",
        (
            "train.hidden_dims=[5760,5760,5760,5760]",
            "train.batch_size=16",
            "train.epochs=1",
            "train.checkpoint_every=20",
        ),
        finish_retry=False,
        poll_s=0.02,
    ),
}


def prepared_home(home: Path, window: int) -> RunContext:
    """A home holding the window's validated days and DAY's frozen training set (kept when
    ``home`` already has them)."""
    from pipeline_steps.steps.features import build_features
    from pipeline_steps.steps.ingest import ingest
    from pipeline_steps.steps.validate import validate

    settings = load_settings(
        overrides=[f"features.window_days={window}", "validation.data_docs=false"],
        environ={
            "TRAINYARD_HOME": str(home),
            "TRAINYARD_CONFIG": str(ROOT / "examples" / "flight_delay" / "settings.yaml"),
        },
    )
    ctx = RunContext(run_id=RUN, logical_date=DAY, settings=settings)
    if ctx.lake.exists(ctx.run_dir, "features.json"):
        return ctx
    for n in range(window - 1, -1, -1):
        day = RunContext(
            run_id=f"seed__{n}", logical_date=DAY - timedelta(days=n), settings=settings
        )
        ingest(day)
        validate(day)
    build_features(ctx)
    return ctx


class Launch:
    """One torchrun launch of the train step; its output lines timestamped as they arrive."""

    def __init__(self, ctx: RunContext, run_id: str, overrides: tuple[str, ...], log: Path):
        sets = [x for o in overrides for x in ("--set", o)]
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes=1",
            f"--nproc-per-node={NPROC}",
            "--max-restarts=0",
            "-m",
            "pipeline_steps.commands.cli",
            "step",
            "train",
            "--run-id",
            run_id,
            "--logical-date",
            DAY.isoformat(),
            *sets,
        ]
        home = str(Path(ctx.settings.lake.root).parent)  # the lake is $TRAINYARD_HOME/lake
        env = {**os.environ, "TRAINYARD_HOME": home, "OMP_NUM_THREADS": "1"}
        self.log = log
        self.lines: list[tuple[float, str, str]] = []
        """(seen at, ``out`` or ``err``, line) in arrival order."""
        self.started = time.time()
        self.process = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        self._readers = [
            threading.Thread(target=self._read, args=(stream, name), daemon=True)
            for stream, name in ((self.process.stdout, "out"), (self.process.stderr, "err"))
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: Any, name: str) -> None:
        for line in stream:
            self.lines.append((time.time(), name, line.rstrip("\n")))

    def matches(self, pattern: re.Pattern[str]) -> list[tuple[float, re.Match[str]]]:
        """Every line matching ``pattern`` so far, with the time it was seen."""
        return [(t, m) for t, _, line in list(self.lines) if (m := pattern.search(line))]

    def await_line(self, pattern: re.Pattern[str], timeout_s: float) -> tuple[float, re.Match[str]]:
        """The first line matching ``pattern``; ``RuntimeError`` when the launch ends or
        ``timeout_s`` passes first."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if found := self.matches(pattern):
                return found[0]
            if self.process.poll() is not None:
                time.sleep(0.2)  # the readers drain what is left
                if found := self.matches(pattern):
                    return found[0]
                break
            time.sleep(0.005)
        raise RuntimeError(f"no line matching {pattern.pattern!r}:\n{self.tail()}")

    def finish(self, timeout_s: float = 600) -> tuple[int, float]:
        """Wait for the launcher; its exit code and when it was seen to exit."""
        while self.process.poll() is None:
            if time.time() - self.started > timeout_s:
                self.process.kill()
            time.sleep(0.005)
        ended = time.time()
        for reader in self._readers:
            reader.join(timeout=10)
        self.log.write_text("\n".join(f"{t:.3f} {s} {line}" for t, s, line in self.lines) + "\n")
        return self.process.returncode, ended

    def stdout_last(self) -> str:
        out = [line for _, s, line in self.lines if s == "out" and line.strip()]
        return out[-1] if out else ""

    def tail(self, n: int = 40) -> str:
        return "\n".join(line for _, _, line in self.lines[-n:])


@dataclass(slots=True)
class Folder:
    """A run's checkpoint folder watched from outside: when each step's checkpoint was first
    seen being written (its temporary file) and in place (renamed)."""

    path: Path
    writing: dict[int, float] = field(default_factory=dict)
    placed: dict[int, float] = field(default_factory=dict)

    def look(self) -> None:
        now = time.time()
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return
        for name in names:
            if m := CHECKPOINT.match(name):
                seen = self.writing if m.group(2) else self.placed
                seen.setdefault(int(m.group(1)), now)


def sigterm(launch: Launch, folder: Folder, poll_s: float) -> dict[str, Any]:
    """SIGTERM the launcher, as the kubelet does a pod's main process, and wait for it to exit:
    the steps, the seconds to the checkpoint, to the workers' and the launcher's exits, and
    anything short of a clean stop in ``problems``."""
    before = set(folder.placed)
    workers = psutil.Process(launch.process.pid).children()
    workers_gone = None
    signalled = time.time()
    launch.process.send_signal(signal.SIGTERM)
    while launch.process.poll() is None:
        folder.look()
        if workers_gone is None and not any(_running(w) for w in workers):
            workers_gone = time.time()
        time.sleep(poll_s)
    folder.look()
    code, ended = launch.finish()
    workers_gone = workers_gone or ended
    stops = launch.matches(STOPPED)
    output = "\n".join(line for _, _, line in launch.lines)
    problems = []
    if len(stops) != NPROC:
        problems.append(f"{len(stops)} failure lines, not {NPROC}")
    if len({m.group(2) for _, m in stops}) > 1:
        problems.append("the ranks stopped after different steps")
    if "SIGKILL" in output or "within train.preemption_grace_s" in output:
        problems.append("a rank was killed or gave up within the grace")
    figures: dict[str, Any] = {
        "exit_code": code,
        "handler_lag_s": [t - signalled for t, _ in launch.matches(TAKEN)],
        "workers_exit_s": workers_gone - signalled,
        "exit_s": ended - signalled,
    }
    if ended - signalled >= 30:
        problems.append("the launcher took 30 s or more: torchrun's SIGKILL time")
    written = [(t, m) for t, m in stops if m.group(4)]
    if not written:
        problems.append("no rank 0 line with the checkpoint's path")
        return figures | {"problems": problems}
    line_at, rank0 = written[0]
    stopped = int(rank0.group(2))
    appeared = folder.placed.get(stopped) if stopped not in before else None
    begun = folder.writing.get(stopped)
    if appeared is None:
        problems.append(f"step-{stopped:08d}.pt was not seen appearing on disk")
    return figures | {
        "interrupted_step": int(rank0.group(1)),
        "stopped_after_step": stopped,
        "checkpoint_path": rank0.group(4),
        "checkpoint_s_reported": float(rank0.group(5)),
        "checkpoint_s_seen": None if appeared is None else appeared - signalled,
        "checkpoint_file_write_s": (
            None if appeared is None or begun is None else appeared - begun
        ),
        "failure_line_s": line_at - signalled,
        "problems": problems,
    }


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def preempt_once(
    ctx: RunContext, model: Model, run_id: str, rng: random.Random, logs: Path
) -> dict[str, Any]:
    """Train ``run_id``, SIGTERM it mid-interval, retry it; every figure of the repeat."""
    from pipeline_steps.steps.train import checkpoint

    lake = ctx.lake
    features = lake.read_json(ctx.run_dir, "features.json")
    lake.write_json(features, Lake.run_dir(run_id), "features.json")
    folder = Folder(Path(lake.path(Lake.run_dir(run_id), "checkpoints")))
    window = ctx.settings.features.window_days
    overrides = ("validation.data_docs=false", f"features.window_days={window}", *model.overrides)

    launch = Launch(ctx, run_id, overrides, logs / f"{run_id}-first.log")
    # the signal lands this fraction of an interval after the newest checkpoint appeared, the
    # interval being the spacing of the last two (epochs and steps vary in length)
    fraction = rng.uniform(0.15, 0.85)
    while True:
        if launch.process.poll() is not None:
            raise RuntimeError(f"{run_id} ended before it was signalled:\n{launch.tail()}")
        folder.look()
        appeared = sorted(folder.placed.items(), key=lambda kv: kv[1])
        if len(appeared) >= 2:
            (s1, t1), (s2, t2) = appeared[-2:]
            if time.time() >= t2 + fraction * (t2 - t1):
                break
        time.sleep(model.poll_s)
    signal_at = time.time()
    stop = sigterm(launch, folder, model.poll_s)
    record: dict[str, Any] = {
        "model": model.name,
        "run_id": run_id,
        "checkpoints_before_signal": [[s, t - launch.started] for s, t in appeared],
        "interval_steps": s2 - s1,
        "interval_s": t2 - t1,
        "s_per_step": (t2 - t1) / (s2 - s1),
        "signal_fraction": fraction,
        "signal_after_launch_s": signal_at - launch.started,
        "newest_on_disk_at_signal": s2,
        "newest_on_disk_age_s": signal_at - t2,
        **stop,
    }
    if "stopped_after_step" not in stop:
        return record
    stopped = stop["stopped_after_step"]
    record["lost_steps_without_handling"] = stop["interrupted_step"] - s2

    started = time.perf_counter()
    state = checkpoint.read(lake, stop["checkpoint_path"])
    record["checkpoint_read_s"] = time.perf_counter() - started
    record["checkpoint_position_step"] = state.position.step
    record["parameters"] = sum(t.numel() for t in state.model.values())
    record["checkpoint_bytes"] = Path(stop["checkpoint_path"]).stat().st_size
    if state.position.step != stopped:
        record["problems"].append(f"the checkpoint holds step {state.position.step}")
    del state

    retry = Launch(ctx, run_id, overrides, logs / f"{run_id}-retry.log")
    first_at, first = retry.await_line(RESUMED, timeout_s=600)
    reading = [(t, m) for t, m in retry.matches(RESUMING) if t <= first_at]
    read_at = max((t for t, _ in reading), default=None)
    record |= {
        "retry_first_step": int(first.group(1)),
        "retry_first_step_s": first_at - retry.started,
        "retry_to_checkpoint_read_s": None if read_at is None else read_at - retry.started,
        "retry_read_to_first_step_s": None if read_at is None else first_at - read_at,
        "retry_resumed_path": reading[-1][1].group(1) if reading else None,
        "retry_sigterm": not model.finish_retry,
    }
    if model.finish_retry:
        code, ended = retry.finish()
        manifest = json.loads(retry.stdout_last()) if code == 0 else {}
        resumed = (manifest.get("resumed_from") or {}).get("step")
        record |= {
            "retry_exit_code": code,
            "retry_total_s": ended - retry.started,
            "retry_status": manifest.get("status"),
        }
        if code != 0:
            record["problems"].append(f"the retry exited {code}:\n{retry.tail()}")
    else:
        # no manifest: the retry resumed from the step before its first new one, read from the
        # checkpoint its log names
        resumed = record["retry_first_step"] - 1
        again = sigterm(retry, folder, model.poll_s)
        record["retry_stop"] = again
        record["problems"] += [f"retry: {p}" for p in again["problems"]]
    record["retry_resumed_from_step"] = resumed
    record["steps_redone"] = None if resumed is None else stopped - resumed
    if record["retry_resumed_path"] != stop["checkpoint_path"]:
        record["problems"].append(f"the retry read {record['retry_resumed_path']}")
    shutil.rmtree(folder.path, ignore_errors=True)  # a 100M model's checkpoints are 1.2 GB each
    return record


def spread(values: list[float], digits: int = 2) -> str:
    """``median (min-max)``, or the one value."""
    if not values:
        return "-"
    med, low, high = (
        f"{v:,.{digits}f}" for v in (statistics.median(values), min(values), max(values))
    )
    return med if low == high else f"{med} ({low}-{high})"


def table(records: list[dict[str, Any]]) -> str:
    """The figures per model as a markdown table of medians (min-max)."""
    names = list(dict.fromkeys(r["model"] for r in records))

    # label, record key, digits, scale
    rows: list[tuple[str, str, int, float]] = [
        ("parameters", "parameters", 0, 1.0),
        ("checkpoint size (MB)", "checkpoint_bytes", 1, 1e-6),
        ("s per optimizer step", "s_per_step", 3, 1.0),
        ("checkpoint interval: steps", "interval_steps", 0, 1.0),
        ("checkpoint interval: s", "interval_s", 2, 1.0),
        ("signal at (fraction of the interval)", "signal_fraction", 2, 1.0),
        ("step interrupted X", "interrupted_step", 0, 1.0),
        ("step checkpointed Y", "stopped_after_step", 0, 1.0),
        ("SIGTERM → checkpoint on disk, seen (s)", "checkpoint_s_seen", 2, 1.0),
        ("same, rank 0's own figure (s)", "checkpoint_s_reported", 2, 1.0),
        ("  of which the file's write (s)", "checkpoint_file_write_s", 2, 1.0),
        ("SIGTERM → workers exited (s)", "workers_exit_s", 2, 1.0),
        ("SIGTERM → torchrun exit (s)", "exit_s", 2, 1.0),
        ("steps redone by the retry", "steps_redone", 0, 1.0),
        ("lost without handling: steps", "lost_steps_without_handling", 0, 1.0),
        ("lost without handling: s", "newest_on_disk_age_s", 2, 1.0),
        ("restart → first new step (s)", "retry_first_step_s", 2, 1.0),
        ("  of which launch → checkpoint read (s)", "retry_to_checkpoint_read_s", 2, 1.0),
        ("  of which read → first new step (s)", "retry_read_to_first_step_s", 2, 1.0),
        ("checkpoint read alone (s)", "checkpoint_read_s", 2, 1.0),
    ]
    by_model = {n: [r for r in records if r["model"] == n] for n in names}
    lines = [f"| | {' | '.join(names)} |", f"|---|{'---:|' * len(names)}"]
    for label, key, digits, scale in rows:
        cells = [
            spread([r[key] * scale for r in by_model[n] if r.get(key) is not None], digits)
            for n in names
        ]
        lines.append(f"| {label} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--models", default="demo,100m", help=f"of {', '.join(MODELS)}")
    parser.add_argument("--window", type=int, default=30, help="features.window_days")
    parser.add_argument("--seed", type=int, default=0, help="for the signals' random delays")
    parser.add_argument("--home", type=Path, help="reuse a prepared home (default: a new one)")
    parser.add_argument(
        "--out", type=Path, default=Path(tempfile.gettempdir()) / "trainyard-preemption.json"
    )
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="trainyard-preemption-bench-"))
    logs = args.out.with_name(args.out.stem + "-logs")
    logs.mkdir(parents=True, exist_ok=True)
    print(f"home {home}, logs {logs}", flush=True)
    started = time.perf_counter()
    ctx = prepared_home(home, args.window)
    print(f"prepared in {time.perf_counter() - started:.0f} s", flush=True)
    rng, stamp, records = random.Random(args.seed), time.strftime("%H%M%S"), []
    for name in args.models.split(","):
        model = MODELS[name]
        for i in range(args.repeat):
            record = preempt_once(ctx, model, f"preempt-{name}-{stamp}-{i}", rng, logs)
            records.append(record)
            shown = {k: v for k, v in record.items() if k != "retry_stop"}
            print(json.dumps(shown, default=str), flush=True)
            for problem in record["problems"]:
                print(f"PROBLEM ({record['run_id']}): {problem}", flush=True)
            args.out.write_text(json.dumps(records, indent=1, default=str))
    print(table(records))
    print(f"raw figures: {args.out}")


if __name__ == "__main__":
    main()
