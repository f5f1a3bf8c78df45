"""An elastic multi-node training on one machine: the torchrun agents the elastic Job runs, as
separate process trees ("nodes") around a rendezvous store of their own, lose a node mid-epoch
and finish on the one left, along the loss curve of the uninterrupted two-node run."""

import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pipeline_steps.core.context import RunContext
from pipeline_steps.orchestration.elastic import STORE_SCRIPT
from pipeline_steps.orchestration.launch import RENDEZVOUS_STORE, local_argv, step_argv
from tests.conftest import FIRST_DAY, free_port
from tests.model.conftest import states_of
from tests.model.launch import (
    SMALL_SET,
    environment,
    manifest_of,
    run_torchrun,
    wait_for_checkpoint,
)

pytestmark = pytest.mark.slow
BASE = (
    *SMALL_SET,
    "train.epochs=2",
    "train.batch_size=16",
    "train.model=ft_transformer",  # slow enough for the loss to land mid-training
    "train.checkpoint_every=2",
    "train.keep_checkpoints=1000",
    "train.collective_timeout_s=30",
)


def test_an_elastic_job_loses_a_node_and_finishes_on_the_other(prepare_run, make_settings):
    reference = prepare_run("two-nodes", *BASE)
    elastic = prepare_run("elastic-nodes", *BASE)
    run_torchrun(reference, 2, BASE)

    port = free_port()
    store = subprocess.Popen([sys.executable, "-c", STORE_SCRIPT, str(port)])
    logs = Path(elastic.settings.lake.root).parent
    try:
        _wait_for(port)
        argv = _agent_argv(elastic, make_settings, port)
        nodes = [
            subprocess.Popen(
                argv,
                env=environment(elastic),
                stdout=(logs / f"node-{n}.out").open("w"),
                stderr=(logs / f"node-{n}.err").open("w"),
                start_new_session=True,
            )
            for n in range(2)
        ]
        at = wait_for_checkpoint(
            elastic,
            lambda p: p.epoch == 0 and p.step >= 4,
            lambda: all(n.poll() is None for n in nodes),
        )
        assert at is not None, "no checkpoint at the wanted position appeared"
        _lose(nodes[1])
        assert nodes[0].wait(timeout=600) == 0, (logs / "node-0.err").read_text()[-4000:]
    finally:
        store.kill()

    manifest = manifest_of((logs / "node-0.out").read_text())
    assert manifest["world_size"] == 1 and manifest["resumed_from"]["step"] >= at.step
    writers = [s.world_size for s in states_of(elastic).values()]
    assert writers[0] == 2 and writers[-1] == 1
    assert {s.layout_world_size for s in states_of(elastic).values()} == {2}
    steady, resumed = (list(states_of(c).values())[-1].history for c in (reference, elastic))
    for a, b in zip(steady, resumed, strict=True):
        for metric in ("train_loss", "val_loss"):
            assert b[metric] == pytest.approx(a[metric], rel=1e-3), (metric, a, b)


def _lose(node: subprocess.Popen) -> None:
    """The node is gone without notice: its agent and its workers (each in a session of its
    own) killed at once."""
    agent = psutil.Process(node.pid)
    for process in [agent, *agent.children(recursive=True)]:
        process.kill()


def _agent_argv(ctx: RunContext, make_settings, port: int) -> list[str]:
    """The elastic Job's torchrun command (``step_argv``), with the store's Service name and
    the Job's name, which Kubernetes would resolve, filled in for this machine."""
    settings = make_settings(
        "orchestration.runtime=kubernetes",
        "kubernetes.train_nodes=2",
        "kubernetes.train_min_nodes=1",
        f"kubernetes.rendezvous_port={port}",
        "train.max_restarts=3",
    )
    sets = [x for o in BASE for x in ("--set", o)]
    run_args = ["--run-id", ctx.run_id, "--logical-date", FIRST_DAY.isoformat(), *sets]
    argv = step_argv("train", settings, run_args)
    local = [
        a.replace(f"{RENDEZVOUS_STORE}:", "127.0.0.1:").replace("$(TRAINYARD_JOB_NAME)", "job")
        for a in argv
    ]
    assert "--nnodes=1:2" in local and "--rdzv-conf=is_host=false" in local
    return local_argv(local)


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"the rendezvous store did not listen on {port}")
