"""What each step process used, and what that cost.

Every ``trainyard step`` process measures itself from the start of the command to its end,
succeeded or failed, and records a ``StepUsage`` in its run's folder::

    runs/<run>/usage/<step>.json              train: one per rank, train.rank<N>.json past rank 0
    runs/<run>/trials/<n>/usage/train.json    a tuning trial

Measured: CPU seconds (user + system of the process and of the children it waited for, from
``resource.getrusage``), peak RSS, wall seconds and, when the process used CUDA, GPU seconds
(wall times the devices used), peak GPU memory and the devices visible. torch is only read where
the step imported it. A retried step adds its attempt to its record. Recording never fails a step: a
record that cannot be written is logged and left out.

``summarise`` turns a run's records into a ``RunCost`` with the ``cost`` settings' rates; it is
what ``lineage.json``, the MLflow training run and ``trainyard report`` show.
"""

from __future__ import annotations

import logging
import os
import resource
import socket
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from pipeline_steps.core.lake import Lake
from pipeline_steps.core.manifests import OMIT_NONE, load_record, to_json
from pipeline_steps.core.settings import CostSettings
from pipeline_steps.core.step_registry import STEPS

if TYPE_CHECKING:
    from pipeline_steps.core.context import RunContext


UsageOutcome = Literal["succeeded", "failed"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ProcessUsage:
    """What one attempt of a step process used, from the start of ``trainyard step`` to its end
    (see ``pipeline_steps/core/usage.py``)."""

    outcome: UsageOutcome
    started_at: str
    """UTC, ISO."""
    finished_at: str
    host: str
    wall_s: float
    cpu_s: float
    """User + system CPU seconds of the process and of its children it waited for."""
    peak_rss_bytes: int
    """The process's peak resident memory (or a waited-for child's, if larger)."""
    gpus_visible: int = 0
    """CUDA devices the process could see (``torch.cuda.device_count()``; a pod's GPU limit);
    0 when the step never imported torch."""
    gpus_used: int = 0
    """CUDA devices the process allocated memory on."""
    gpu_s: float = 0.0
    """``wall_s`` times ``gpus_used``."""
    peak_gpu_memory_bytes: int = 0
    """``torch.cuda.max_memory_allocated`` at its highest, over the devices used."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepUsage:
    """``runs/<run>/usage/<step>.json``: one step process's usage, attempt after attempt (a
    retried step adds its attempt). The train step records one file per rank: ``train.json``
    (rank 0), ``train.rank<N>.json``."""

    step: str
    run_id: str
    logical_date: str
    rank: int = 0
    world_size: int = 1
    attempts: list[ProcessUsage] = field(default_factory=list)
    """Oldest first."""
    trial: int | None = field(default=None, metadata=OMIT_NONE)
    """A tuning trial's number (its record is ``runs/<run>/trials/<n>/usage/train.json``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class UsageTotals:
    """Usage summed over processes (ranks and attempts), and its cost."""

    processes: int
    """Process attempts counted (ranks * attempts)."""
    failed: int
    """Of those, the attempts that failed."""
    wall_s: float
    """Elapsed seconds: per step, the longest-running rank's over its attempts; per run, the
    steps' summed."""
    cpu_s: float
    gpu_s: float
    peak_rss_bytes: int
    """The largest peak of any process counted."""
    peak_gpu_memory_bytes: int
    cost: float
    """``cpu_s``/3600 * cpu_core_hour + ``gpu_s``/3600 * gpu_hour + peak RSS (GiB) * wall
    (hours) * memory_gib_hour, summed over the processes."""

    @property
    def peak_rss_gib(self) -> float:
        return self.peak_rss_bytes / 2**30


@dataclass(frozen=True, kw_only=True, slots=True)
class StepCost(UsageTotals):
    """One step's usage over its ranks and attempts, and its cost."""

    step: str


@dataclass(frozen=True, kw_only=True, slots=True)
class CostRates:
    """The ``cost`` settings a cost was computed with."""

    cpu_core_hour: float
    gpu_hour: float
    memory_gib_hour: float
    currency: str


@dataclass(frozen=True, kw_only=True, slots=True)
class RunCost:
    """What a run's step processes used and cost (``cost`` in ``lineage.json``)."""

    rates: CostRates
    steps: list[StepCost]
    """The steps counted, in run order (a tuning run's trials together as ``trials``)."""
    total: UsageTotals
    not_counted: list[str] = field(default_factory=list)
    """Steps with no usage record when the sum was made. In ``lineage.json`` that is at least
    ``promote``, which records its usage after writing the lineage; ``trainyard report
    --costs`` counts it."""

    def step(self, name: str) -> StepCost | None:
        """The step ``name``'s part, if it is counted."""
        return next((s for s in self.steps if s.step == name), None)


log = logging.getLogger(__name__)
USAGE_DIR = "usage"
# ru_maxrss is in KiB on Linux, in bytes on macOS.
_MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024
_gpu_peaks: dict[int, int] = {}


def usage_file(step: str, rank: int = 0) -> str:
    """The record's file name: ``<step>.json`` for rank 0, ``<step>.rank<N>.json`` past it."""
    return f"{step}.json" if rank == 0 else f"{step}.rank{rank}.json"


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its children it waited for."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        used = resource.getrusage(who)
        total += used.ru_utime + used.ru_stime
    return total


def _peak_rss_bytes() -> int:
    """This process's peak RSS, or its largest waited-for child's when that one is larger.

    Linux keeps ``ru_maxrss`` across ``exec``: a step started by a large process (Airflow's
    worker, a test runner) would report its parent's memory. ``VmHWM`` in ``/proc/self/status``
    is this program's own peak; ``ru_maxrss`` is the fallback where there is no ``/proc``. A
    child's figure can include this process's memory at the fork, never more than its peak.
    """
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * _MAXRSS_UNIT
    try:
        with open("/proc/self/status") as status:  # not a lake path: this process's own
            own = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * _MAXRSS_UNIT
    return int(max(own, children))


def note_gpu_peak(device_index: int, peak_bytes: int) -> None:
    """Keep a device's peak allocated memory before torch's counter is reset (the training loop
    reads and resets it every epoch), so the record holds the process's peak."""
    _gpu_peaks[device_index] = max(_gpu_peaks.get(device_index, 0), peak_bytes)


@dataclass(frozen=True, slots=True)
class GpuUsage:
    visible: int = 0
    used: int = 0
    peak_memory_bytes: int = 0


def gpu_usage() -> GpuUsage:
    """The CUDA devices this process could see and those it allocated memory on, with its peak
    GPU memory. Nothing when the process never imported torch (it is not imported here); no
    device used when it never initialised CUDA."""
    torch = sys.modules.get("torch")
    if torch is None:
        return GpuUsage()
    try:
        visible = int(torch.cuda.device_count())
        if not visible or not torch.cuda.is_initialized():
            return GpuUsage(visible=visible)
        peaks = {
            i: max(int(torch.cuda.max_memory_allocated(i)), _gpu_peaks.get(i, 0))
            for i in range(visible)
        }
        used = [i for i, peak in peaks.items() if peak > 0] or [torch.cuda.current_device()]
        return GpuUsage(visible, len(used), max(peaks.get(i, 0) for i in used))
    except Exception as exc:  # a broken driver must not hide the rest of the record
        log.warning("GPU usage not measured: %s", exc)
        return GpuUsage()


class UsageMeter:
    """Measures this process from the meter's creation on: create it where the command starts."""

    def __init__(self) -> None:
        self.started_at = datetime.now(UTC)
        self._start = time.monotonic()
        self._cpu_s = _cpu_seconds()

    def measure(self, outcome: UsageOutcome) -> ProcessUsage:
        """What the process used since the meter's creation, ending now with ``outcome``."""
        wall = time.monotonic() - self._start
        gpu = gpu_usage()
        return ProcessUsage(
            outcome=outcome,
            started_at=self.started_at.isoformat(timespec="seconds"),
            finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
            host=socket.gethostname(),
            wall_s=round(wall, 3),
            cpu_s=round(_cpu_seconds() - self._cpu_s, 3),
            peak_rss_bytes=_peak_rss_bytes(),
            gpus_visible=gpu.visible,
            gpus_used=gpu.used,
            gpu_s=round(wall * gpu.used, 3),
            peak_gpu_memory_bytes=gpu.peak_memory_bytes,
        )


def record_usage(ctx: RunContext, step: str, usage: ProcessUsage) -> str | None:
    """Add ``usage`` as the newest attempt of this process's record in
    ``<run dir>/usage/`` (its rank from torchrun's ``RANK``); the record's path, or None when it
    could not be written: that is logged, never raised."""
    try:
        rank = int(os.environ.get("RANK", "0"))
        folder = f"{ctx.run_dir}/{USAGE_DIR}"
        name = usage_file(step, rank)
        record = StepUsage(
            step=step,
            run_id=ctx.run_id,
            logical_date=ctx.logical_date.isoformat(),
            rank=rank,
            world_size=int(os.environ.get("WORLD_SIZE", "1")),
            attempts=[*_earlier_attempts(ctx.lake, folder, name), usage],
            trial=ctx.trial.number if ctx.trial else None,
        )
        return ctx.lake.write_json(to_json(record), folder, name)
    except Exception as exc:
        log.warning("usage of step %s not recorded: %s", step, exc)
        return None


def _earlier_attempts(lake: Lake, folder: str, name: str) -> list[ProcessUsage]:
    if not lake.exists(folder, name):
        return []
    try:
        return _read(lake, folder, name).attempts
    except Exception as exc:
        log.warning("usage record %s unreadable, replaced: %s", lake.path(folder, name), exc)
        return []


@contextmanager
def recording_usage(meter: UsageMeter, ctx: RunContext, step: str) -> Iterator[None]:
    """Record the process's usage when the block ends: ``succeeded``, or ``failed`` when it
    raised (the error goes on)."""
    outcome: UsageOutcome = "failed"
    try:
        yield
        outcome = "succeeded"
    finally:
        try:
            usage = meter.measure(outcome)
        except Exception as exc:
            log.warning("usage of step %s not measured: %s", step, exc)
        else:
            record_usage(ctx, step, usage)


def _read(lake: Lake, folder: str, name: str) -> StepUsage:
    return load_record(StepUsage, lake.read_json(folder, name), lake.path(folder, name))


def read_usage(lake: Lake, run_dir: str) -> list[StepUsage]:
    """The usage records of a run's folder (``runs/<run>``), its tuning trials' included; a
    record this version cannot read is left out with a warning naming it."""
    base = lake.path(run_dir)
    paths = [
        *lake.fs.glob(f"{base}/{USAGE_DIR}/*.json"),
        *lake.fs.glob(f"{base}/trials/*/{USAGE_DIR}/*.json"),
    ]
    records = []
    for path in sorted(paths):
        folder, _, name = path.removeprefix(base).strip("/").rpartition("/")
        try:
            records.append(_read(lake, f"{run_dir}/{folder}", name))
        except Exception as exc:
            log.warning("usage record left out: %s", exc)
    return records


# -- cost ---------------------------------------------------------------------------------------


def rates(settings: CostSettings) -> CostRates:
    return CostRates(
        cpu_core_hour=settings.cpu_core_hour,
        gpu_hour=settings.gpu_hour,
        memory_gib_hour=settings.memory_gib_hour,
        currency=settings.currency,
    )


def process_cost(usage: ProcessUsage, rates: CostRates) -> float:
    """cpu_s/3600 * cpu_core_hour + gpu_s/3600 * gpu_hour
    + peak RSS (GiB) * wall (hours) * memory_gib_hour."""
    return (
        usage.cpu_s / 3600 * rates.cpu_core_hour
        + usage.gpu_s / 3600 * rates.gpu_hour
        + usage.peak_rss_bytes / 2**30 * usage.wall_s / 3600 * rates.memory_gib_hour
    )


TRIALS = "trials"
"""The step a tuning run's trials are counted under, together."""


def step_cost(step: str, records: Sequence[StepUsage], rates: CostRates) -> StepCost:
    """One step's usage over its ranks' records and their attempts. Its wall time is the
    longest-running rank's, summed over that rank's attempts (for ``trials``: summed over the
    trials, trial-seconds)."""
    processes = [attempt for record in records for attempt in record.attempts]
    ranks_wall: dict[int | None, list[float]] = {}
    for record in records:
        ranks_wall.setdefault(record.trial, []).append(sum(a.wall_s for a in record.attempts))
    return StepCost(
        step=step,
        processes=len(processes),
        failed=sum(p.outcome == "failed" for p in processes),
        wall_s=sum(max(walls) for walls in ranks_wall.values()),
        cpu_s=sum(p.cpu_s for p in processes),
        gpu_s=sum(p.gpu_s for p in processes),
        peak_rss_bytes=max((p.peak_rss_bytes for p in processes), default=0),
        peak_gpu_memory_bytes=max((p.peak_gpu_memory_bytes for p in processes), default=0),
        cost=sum(process_cost(p, rates) for p in processes),
    )


def summarise(
    records: Iterable[StepUsage], settings: CostSettings, expected: Sequence[str] = STEPS
) -> RunCost:
    """A run's usage and cost per step (the pipeline's order, then any other step by name; a
    tuning run's trials as ``trials``) and in total; ``not_counted`` names the ``expected``
    steps without a record."""
    cost_rates = rates(settings)
    by_step: dict[str, list[StepUsage]] = {}
    for record in records:
        by_step.setdefault(TRIALS if record.trial is not None else record.step, []).append(record)
    order = [s for s in STEPS if s in by_step] + sorted(s for s in by_step if s not in STEPS)
    parts = [step_cost(name, by_step[name], cost_rates) for name in order]
    total = UsageTotals(
        processes=sum(t.processes for t in parts),
        failed=sum(t.failed for t in parts),
        wall_s=sum(t.wall_s for t in parts),
        cpu_s=sum(t.cpu_s for t in parts),
        gpu_s=sum(t.gpu_s for t in parts),
        peak_rss_bytes=max((t.peak_rss_bytes for t in parts), default=0),
        peak_gpu_memory_bytes=max((t.peak_gpu_memory_bytes for t in parts), default=0),
        cost=sum(t.cost for t in parts),
    )
    return RunCost(
        rates=cost_rates,
        steps=parts,
        total=total,
        not_counted=[s for s in expected if s not in by_step],
    )
