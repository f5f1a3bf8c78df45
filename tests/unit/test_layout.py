"""The layout's arithmetic: every process's share of a step, its micro-batches and their loss
weights, on the layout's own world size and on others."""

import itertools

import pytest

from pipeline_steps.core.errors import StepError
from pipeline_steps.steps.train.layout import Layout, needed


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5, 7])
def test_the_shares_of_a_step_tile_the_global_batch(world_size: int) -> None:
    layout = Layout(world_size=3, batch_size=30, accumulation=2)
    shares = [layout.share(m, world_size) for m in range(world_size)]
    assert shares[0][0] == 0 and shares[-1][1] == layout.global_batch == 180
    assert all(a[1] == b[0] for a, b in itertools.pairwise(shares))
    sizes = [stop - start for start, stop in shares]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5, 7])
def test_the_gradient_weights_of_a_step_sum_to_one_per_row(world_size: int) -> None:
    """Each micro-batch's mean loss divided by ``loss_divisor``, averaged over the processes
    (DDP), weighs every row of the step by 1 / global batch."""
    layout = Layout(world_size=3, batch_size=30, accumulation=2)
    total = 0.0
    for m in range(world_size):
        start, stop = layout.share(m, world_size)
        parts = layout.micro_batches(world_size)
        rows = stop - start
        sizes = [(i + 1) * rows // parts - i * rows // parts for i in range(parts)]
        assert max(sizes) <= layout.batch_size and min(sizes) > 0
        # a row of a micro-batch of n rows: (1/n) / divisor / world_size
        total += sum(n * (1 / n) / layout.loss_divisor(n, world_size) for n in sizes) / world_size
    assert total * layout.global_batch == pytest.approx(layout.global_batch)


def test_the_layouts_own_world_size_keeps_its_micro_batches_and_divisor() -> None:
    layout = Layout(world_size=2, batch_size=64, accumulation=4)
    assert layout.micro_batches(2) == 4
    assert layout.loss_divisor(64, 2) == 4  # the loop's 1 / accumulation, unchanged
    assert needed(layout, 1, 2) == [1]


def test_a_process_replays_only_the_layout_ranks_its_share_falls_in() -> None:
    layout = Layout(world_size=3, batch_size=10, accumulation=1)
    assert [needed(layout, m, 2) for m in range(2)] == [[0, 1], [1, 2]]
    assert [needed(layout, m, 6) for m in range(6)] == [[0], [0], [1], [1], [2], [2]]


def test_more_processes_than_rows_per_step_is_a_clear_error() -> None:
    layout = Layout(world_size=1, batch_size=2, accumulation=1)
    with pytest.raises(StepError, match="3 training processes cannot share a global batch of 2"):
        layout.check(3)
