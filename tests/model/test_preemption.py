"""Spot capacity on CPU with gloo: SIGTERM stops every rank at one step boundary with a
checkpoint and a transient exit, and the retry ends with the weights of an uninterrupted run; a
checkpoint resumes on another number of processes (2 → 4 → 3) along the uninterrupted loss
curve; FSDP, preempted and resumed, follows DDP."""

import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import mlflow
import pytest
import torch

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.manifests import LoopPosition
from tests.model.conftest import assert_same_weights, final_weights, prepare, states_of
from tests.model.launch import (
    SMALL_SET,
    environment,
    manifest_of,
    run_torchrun,
    torchrun,
    wait_for_checkpoint,
)

pytestmark = pytest.mark.slow
BASE = (
    *SMALL_SET,
    "train.epochs=2",
    "train.batch_size=32",
    "train.checkpoint_every=2",
    "train.keep_checkpoints=100",
)
STOPPED = re.compile(r"SIGTERM during optimizer step (\d+): stopped after step (\d+)")


@pytest.fixture
def prepared(prepare_run):
    return lambda run_id, *overrides: prepare_run(run_id, *BASE, *overrides)


@pytest.fixture(scope="module")
def two_ranks(module_home: Path) -> RunContext:
    """The uninterrupted two-rank DDP run: what a preempted two-rank run must end like, what a
    two-rank run resumed on four then three processes must follow, and what FSDP must follow
    (trained once for the module)."""
    ctx = prepare(module_home, "steady", *BASE)
    run_torchrun(ctx, 2, BASE)
    return ctx


def preempt(
    ctx: RunContext, nproc: int, when: Callable[[LoopPosition], bool], *overrides: str
) -> tuple[int, int, str]:
    """Train under torchrun, each step paced, and SIGTERM the launcher, as the kubelet does a
    preempted pod's main process, once a checkpoint at a position ``when`` accepts appears.
    Returns the step the signal interrupted, the step the ranks stopped after, and stderr."""
    log = Path(ctx.settings.lake.root).parent / f"{ctx.run_id}-{nproc}.log"
    with log.open("w") as out:
        launcher = subprocess.Popen(
            torchrun(ctx, nproc, (*BASE, *overrides), paced=True),
            env=environment(ctx),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        at = wait_for_checkpoint(ctx, when, lambda: launcher.poll() is None)
        signalled = at is not None
        if signalled:
            launcher.send_signal(signal.SIGTERM)
        code = launcher.wait(timeout=300)
    output = log.read_text()
    assert signalled, "no checkpoint at the wanted position appeared:\n" + output[-3000:]
    assert code != 0 and "failed (transient)" in output, output[-3000:]
    found = STOPPED.findall(output)
    assert found, output[-3000:]
    interrupted, stopped = (int(x) for x in found[0])
    assert all(int(b) == stopped for _, b in found)  # every rank stopped after the same step
    return interrupted, stopped, output


def test_sigterm_checkpoints_at_the_next_boundary_and_the_retry_ends_as_if_uninterrupted(
    prepared, two_ranks
) -> None:
    reference, preempted = two_ranks, prepared("spot")

    interrupted, stopped, _ = preempt(preempted, 2, lambda at: at.epoch == 1 and at.step > 0)
    # the ranks agree within a step of the signal, and the checkpoint holds that step
    assert 0 <= stopped - interrupted <= 1
    newest = list(states_of(preempted).values())[-1]
    assert newest.position.step == stopped and newest.position.epoch == 1

    manifest = manifest_of(run_torchrun(preempted, 2, BASE))  # the retry
    assert manifest["resumed_from"]["step"] == stopped  # no step redone
    assert_same_weights(final_weights(reference), final_weights(preempted))
    mlflow.set_tracking_uri(preempted.settings.mlflow.tracking_uri)
    runs = mlflow.search_runs(
        experiment_names=[preempted.settings.mlflow.experiment],
        filter_string=f"tags.`trainyard.run_id` = '{preempted.run_id}'",
        output_format="list",
    )
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"  # the same run, resumed
    assert runs[0].data.tags["trainyard.preempted_at_step"] == str(stopped)


def test_a_checkpoint_resumes_on_four_then_three_processes_along_the_same_loss_curve(
    prepared, two_ranks
) -> None:
    """The global batch is the first launch's (two ranks of 32 rows): four processes take 16
    rows of each step, three take 21, 21 and 22, and the curve is the two-rank one."""
    reference, elastic = two_ranks, prepared("elastic")

    _, first, _ = preempt(elastic, 2, lambda at: at.epoch == 0 and at.step >= 4)
    _, second, _ = preempt(elastic, 4, lambda at: at.step >= first + 6)
    assert list(states_of(elastic).values())[-1].world_size == 4
    manifest = manifest_of(run_torchrun(elastic, 3, BASE))
    assert manifest["world_size"] == 3 and manifest["resumed_from"]["step"] == second

    steady, resumed = _history(reference), _history(elastic)
    assert [h["epoch"] for h in steady] == [h["epoch"] for h in resumed]
    for a, b in zip(steady, resumed, strict=True):
        for metric in ("train_loss", "val_loss", "val_auc"):
            assert b[metric] == pytest.approx(a[metric], rel=1e-3), (metric, a, b)
    for name, tensor in final_weights(reference).items():
        assert torch.allclose(tensor, final_weights(elastic)[name], rtol=1e-3, atol=1e-4), name


def test_fsdp_preempted_and_resumed_follows_ddp(prepared, two_ranks) -> None:
    """A sharded run, preempted mid-epoch and retried, ends where the uninterrupted DDP run
    does: its loss curve and weights (FSDP's resume from a sharded checkpoint, optimizer state
    included; a reset Adam state or a step redone would leave the curve)."""
    ddp, preempted = two_ranks, prepared("fsdp-spot")
    sharded = ("train.strategy=fsdp",)
    _, stopped, _ = preempt(preempted, 2, lambda at: at.epoch == 1 and at.step > 0, *sharded)
    manifest = manifest_of(run_torchrun(preempted, 2, (*BASE, *sharded)))
    assert manifest["resumed_from"]["step"] == stopped
    for a, b in zip(_history(ddp), _history(preempted), strict=True):
        for metric in ("train_loss", "val_loss"):
            assert b[metric] == pytest.approx(a[metric], rel=1e-3), (metric, a, b)
    for name, tensor in final_weights(ddp).items():
        assert torch.allclose(tensor, final_weights(preempted)[name], rtol=1e-3, atol=1e-4), name


def _history(ctx: RunContext) -> list[dict]:
    return list(states_of(ctx).values())[-1].history
