"""The train step under torchrun, as the DAG launches it, for the distributed tests."""

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.manifests import LoopPosition
from pipeline_steps.steps.train import checkpoint
from tests.conftest import FIRST_DAY, WINDOW

SMALL_SET = (
    f"features.window_days={WINDOW}",
    "validation.data_docs=false",
    "features.row_group_rows=256",  # row groups enough for several ranks
    "train.dropout=0",  # the same loss whatever the ranks' generators
)
"""Settings of the distributed tests: a small training set in small row groups, no dropout."""


def torchrun(
    ctx: RunContext,
    nproc: int,
    overrides: tuple[str, ...],
    max_restarts: int = 0,
    paced: bool = False,
) -> list[str]:
    """The torchrun command of the train step for ``ctx`` (``overrides`` as ``--set``,
    ``nproc`` ranks; ``paced``: each step held back, :mod:`tests.model.paced`)."""
    sets = [x for o in overrides for x in ("--set", o)]
    command = ["tests.model.paced"] if paced else ["pipeline_steps.commands.cli"]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        f"--nproc-per-node={nproc}",
        f"--max-restarts={max_restarts}",
        "-m",
        *command,
        "step",
        "train",
        "--run-id",
        ctx.run_id,
        "--logical-date",
        FIRST_DAY.isoformat(),
        *sets,
    ]


def environment(ctx: RunContext) -> dict[str, str]:
    """The environment of a run's torchrun: the suite's (one compute thread per process, set in
    tests/conftest.py) with the run's home."""
    home = str(Path(ctx.settings.lake.root).parent)  # the lake is $TRAINYARD_HOME/lake
    return {**os.environ, "TRAINYARD_HOME": home}


def run_torchrun(ctx: RunContext, nproc: int, overrides: tuple[str, ...]) -> str:
    """Train ``ctx`` under torchrun to the end; its stdout."""
    done = subprocess.run(
        torchrun(ctx, nproc, overrides),
        env=environment(ctx),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def manifest_of(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def rank_process(launcher_pid: int, rank: int) -> psutil.Process:
    """The worker process of ``rank`` under the torchrun launcher ``launcher_pid``."""
    for child in psutil.Process(launcher_pid).children(recursive=True):
        try:
            if child.environ().get("RANK") == str(
                rank
            ) and "pipeline_steps.commands.cli" in " ".join(child.cmdline()):
                return child
        except psutil.Error:
            continue
    raise AssertionError(f"no worker process of rank {rank}")


def wait_for_checkpoint(
    ctx: RunContext,
    when: Callable[[LoopPosition], bool],
    running: Callable[[], bool],
    timeout_s: float = 300,
) -> LoopPosition | None:
    """The position of the first checkpoint of ``ctx``'s run that ``when`` accepts, while
    ``running()``; None when none came in time. Only the newest checkpoint is read each time
    (the positions only grow), so that the reader keeps up with the training."""
    folder = Path(ctx.lake.path(ctx.run_dir, "checkpoints"))
    read: set[Path] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and running():
        for path in sorted(folder.glob("step-*.pt"))[-1:] if folder.exists() else []:
            if path in read:
                continue
            try:
                at = checkpoint.read(ctx.lake, str(path)).position
            except Exception:  # being renamed into place
                continue
            read.add(path)
            if when(at):
                return at
        time.sleep(0.01)
    return None


def run_killing_a_rank_mid_epoch(
    ctx: RunContext, nproc: int, overrides: tuple[str, ...], rank: int = 1
) -> tuple[LoopPosition, str, str]:
    """Train ``ctx`` under torchrun (one restart allowed), SIGKILL ``rank`` once a mid-epoch
    checkpoint of epoch 1 is written, and let the restarted workers finish: the checkpoint's
    position and torchrun's stdout and stderr. Fails when no such checkpoint came or the
    training did not end well."""
    launcher = subprocess.Popen(
        torchrun(ctx, nproc, overrides, max_restarts=1),
        env=environment(ctx),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    at = wait_for_checkpoint(
        ctx, lambda p: p.epoch == 1 and p.epoch_batches > 0, lambda: launcher.poll() is None
    )
    if at is not None:
        rank_process(launcher.pid, rank=rank).send_signal(signal.SIGKILL)
    stdout, stderr = launcher.communicate(timeout=600)
    assert at is not None, f"no mid-epoch checkpoint of epoch 1 appeared: {stderr[-3000:]}"
    assert launcher.returncode == 0, stderr[-3000:]
    return at, stdout, stderr
