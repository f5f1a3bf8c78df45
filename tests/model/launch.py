"""The train step under torchrun, as the DAG launches it, for the distributed tests."""

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil

from pipeline_steps.core.context import RunContext
from tests.conftest import FIRST_DAY


def torchrun(
    ctx: RunContext, nproc: int, overrides: tuple[str, ...], max_restarts: int = 0
) -> list[str]:
    """The torchrun command of the train step for ``ctx`` (``overrides`` as ``--set``,
    ``nproc`` ranks)."""
    sets = [x for o in overrides for x in ("--set", o)]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        f"--nproc-per-node={nproc}",
        f"--max-restarts={max_restarts}",
        "-m",
        "pipeline_steps.commands.cli",
        "step",
        "train",
        "--run-id",
        ctx.run_id,
        "--logical-date",
        FIRST_DAY.isoformat(),
        *sets,
    ]


def environment(ctx: RunContext) -> dict[str, str]:
    home = str(Path(ctx.settings.lake.root).parent)  # the lake is $TRAINYARD_HOME/lake
    return {**os.environ, "TRAINYARD_HOME": home, "OMP_NUM_THREADS": "1"}


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
