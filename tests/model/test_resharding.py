"""A checkpointed epoch resumed on another number of processes consumes, step by step, the rows
the uninterrupted training would have: counted row by row on a real training set (the demo
window's flights), each row carrying its position in the set as its label."""

from collections import Counter
from dataclasses import replace
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.manifests import FeaturesManifest
from pipeline_steps.core.settings import TrainSettings
from pipeline_steps.steps.train.data import Preprocessor, TrainingTable
from pipeline_steps.steps.train.distributed import Processes
from pipeline_steps.steps.train.layout import Layout, epoch_steps

ROW = "row"
LAYOUT = Layout(world_size=3, batch_size=48, accumulation=2)
EPOCH, DONE = 1, 4  # the interrupted epoch, and its steps taken before the checkpoint


def test_an_epoch_resumed_on_two_or_four_processes_sees_the_rows_it_would_have(
    prepare_run,
) -> None:
    table, pre, cfg = _counted(prepare_run("counted", "features.row_group_rows=256"))
    uninterrupted = _steps(table, pre, cfg, LAYOUT.world_size)
    steps = len(uninterrupted)
    assert steps > DONE + 2
    epoch = sum(uninterrupted, Counter())
    # The epoch as three processes cut it: each takes its row groups' fitting rows for as many
    # whole steps as the rank dealt most can fill; a rank dealt fewer tops up from the start
    # of its shard (repeats, as DistributedSampler pads), any rank leaves what does not fill
    # its last step.
    dealt = [
        sum(table.fit_rows[g] for g in table.epoch_groups(EPOCH, r, LAYOUT.world_size))
        for r in range(LAYOUT.world_size)
    ]
    taken = steps * LAYOUT.step_rows
    topped_up = sum(max(taken - n, 0) for n in dealt)
    left = sum(max(n - taken, 0) for n in dealt)
    assert sum(epoch.values()) == steps * LAYOUT.global_batch
    assert len(epoch) == sum(table.fit_rows) - left
    assert sum(n - 1 for n in epoch.values()) == topped_up

    for world_size in (2, 4):
        resumed = _steps(table, pre, cfg, world_size, skip_steps=DONE)
        # step by step the same rows, none dropped, none added, none twice more
        assert resumed == uninterrupted[DONE:], world_size
        assert sum(uninterrupted[:DONE], Counter()) + sum(resumed, Counter()) == epoch


def _counted(ctx: RunContext) -> tuple[TrainingTable, Preprocessor, TrainSettings]:
    """The run's real training set with a ``row`` column numbering its rows (in the same row
    groups), as the label; its table, preprocessing and train settings."""
    features = ctx.upstream(FeaturesManifest)
    with ctx.lake.fs.open(features.sets.train.path, "rb") as fh:
        source = pq.read_table(fh)
        groups = pq.ParquetFile(ctx.lake.fs.open(features.sets.train.path, "rb")).metadata
    sizes = [groups.row_group(g).num_rows for g in range(groups.num_row_groups)]
    path = Path(ctx.settings.lake.root).parent / "counted.parquet"
    numbered = source.append_column(ROW, pa.array(np.arange(len(source), dtype=np.float32)))
    with pq.ParquetWriter(path, numbered.schema) as writer:
        offset = 0
        for size in sizes:
            writer.write_table(numbered.slice(offset, size), row_group_size=size)
            offset += size
    table = TrainingTable(
        str(path), fsspec.filesystem("file"), [*features.feature_columns, ROW], 13, 0.1
    )
    assert table.group_rows == sizes
    everything = list(range(len(sizes)))
    pre = Preprocessor.fit(
        table.frames(everything, validation=False), features.categorical, features.numeric
    )
    cfg = replace(
        ctx.settings.train, batch_size=LAYOUT.batch_size, grad_accumulation=LAYOUT.accumulation
    )
    return table, pre, cfg


def _steps(
    table: TrainingTable,
    pre: Preprocessor,
    cfg: TrainSettings,
    world_size: int,
    skip_steps: int = 0,
) -> list[Counter[int]]:
    """The rows of each optimizer step of ``EPOCH`` over ``world_size`` processes, from step
    ``skip_steps`` on; every process's micro-batches hold at most a batch, and as many."""
    by_process = []
    for rank in range(world_size):
        processes = Processes(
            rank=rank, world_size=world_size, local_rank=rank, device=torch.device("cpu")
        )
        skip = skip_steps * LAYOUT.accumulation
        steps = list(epoch_steps(table, pre, ROW, cfg, LAYOUT, processes, EPOCH, skip=skip))
        for micro in steps:
            assert len(micro) == LAYOUT.micro_batches(world_size)
            assert all(0 < len(b) <= LAYOUT.batch_size for b in micro)
        by_process.append(steps)
    steps_left = min(len(s) for s in by_process)
    assert all(len(s) == steps_left for s in by_process)
    return [
        Counter(
            int(row)
            for process in by_process
            for batch in process[s]
            for row in batch.labels.tolist()
        )
        for s in range(steps_left)
    ]
