"""Cost per run: what a step process records about itself, the cost arithmetic, the ``cost``
settings, the lineage and MLflow sums, and ``trainyard report --costs``."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from dataclasses import replace
from datetime import date
from types import SimpleNamespace

import pytest
from mlflow import MlflowClient

from pipeline_steps.commands.cli import main
from pipeline_steps.commands.report import RecordedRun, summarise
from pipeline_steps.core import usage
from pipeline_steps.core.context import RunContext
from pipeline_steps.core.lake import Lake, safe_run_key
from pipeline_steps.core.manifests import TrialRef, load_record, to_json
from pipeline_steps.core.provenance import Lineage
from pipeline_steps.core.settings import CostSettings, SettingsError, load_settings
from pipeline_steps.core.usage import (
    ProcessUsage,
    StepUsage,
    UsageMeter,
    gpu_usage,
    process_cost,
    rates,
    read_usage,
    recording_usage,
)
from pipeline_steps.core.usage import summarise as summarise_usage
from pipeline_steps.steps.promote import promote
from tests.manifests import ingest_manifest, lineage, train_manifest
from tests.unit.test_promote import _prepare

DAY = date(2013, 6, 4)
GIB = 2**30
RATES = CostSettings(cpu_core_hour=0.04, gpu_hour=3.0, memory_gib_hour=0.005, currency="EUR")


def attempt(
    wall_s: float = 10.0,
    cpu_s: float = 5.0,
    rss: int = GIB,
    gpu_s: float = 0.0,
    outcome: str = "succeeded",
) -> ProcessUsage:
    return ProcessUsage(
        outcome=outcome,  # type: ignore[arg-type]
        started_at="2013-06-04T00:00:00+00:00",
        finished_at="2013-06-04T00:00:10+00:00",
        host="h",
        wall_s=wall_s,
        cpu_s=cpu_s,
        peak_rss_bytes=rss,
        gpus_used=1 if gpu_s else 0,
        gpu_s=gpu_s,
    )


def record(step: str, *attempts: ProcessUsage, rank: int = 0) -> StepUsage:
    return StepUsage(
        step=step, run_id="r", logical_date=DAY.isoformat(), rank=rank, attempts=list(attempts)
    )


@pytest.fixture
def ctx(make_settings) -> RunContext:
    # Airflow's run ids are not folder names: the record goes under the run's safe key
    return RunContext(
        run_id="manual__2013-06-04T00:00:00+00:00", logical_date=DAY, settings=make_settings()
    )


def _stored(ctx: RunContext, name: str) -> StepUsage:
    folder = f"{ctx.run_dir}/usage"
    return load_record(StepUsage, ctx.lake.read_json(folder, name), name)


# -- what a process records ---------------------------------------------------------------------


def test_the_meter_counts_cpu_and_memory_of_the_process_and_its_waited_children() -> None:
    # in a fresh interpreter, far smaller than the child's 300 MiB
    child = (
        "import time\n"
        "block = b'x' * (300 * 2**20)\n"  # touched pages: 300 MiB resident
        "end = time.process_time() + 0.5\n"
        "while time.process_time() < end: pass\n"
    )
    script = f"""
import json, subprocess, sys, time
from pipeline_steps.core.manifests import to_json
from pipeline_steps.core.usage import UsageMeter

meter = UsageMeter()
spin = time.process_time() + 0.3
while time.process_time() < spin:
    pass
subprocess.run([sys.executable, "-c", {child!r}], check=True)
print(json.dumps(to_json(meter.measure("succeeded"))))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    measured = load_record(ProcessUsage, json.loads(done.stdout), "measured")
    assert measured.cpu_s >= 0.75  # 0.3 s here + 0.5 s in the child
    assert measured.wall_s >= 0.75
    # ru_maxrss is KiB on Linux: the record is in bytes, and the child's peak counts
    assert measured.peak_rss_bytes >= 300 * 2**20
    assert measured.outcome == "succeeded" and measured.host


def test_a_step_started_by_a_large_process_reports_its_own_memory() -> None:
    """Linux carries ``ru_maxrss`` over ``exec``; the record must not take the parent's."""
    measure = (
        "from pipeline_steps.core.usage import UsageMeter\n"
        "print(UsageMeter().measure('succeeded').peak_rss_bytes)\n"
    )
    parent = (
        "import subprocess, sys\n"
        "block = b'x' * (1024 * 2**20)\n"  # 1 GiB resident in the parent
        f"subprocess.run([sys.executable, '-c', {measure!r}], check=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", parent], capture_output=True, text=True, check=True
    )
    assert 0 < int(done.stdout) < 512 * 2**20


def test_a_step_records_success_and_failure_and_a_retry_adds_its_attempt(ctx) -> None:
    with recording_usage(UsageMeter(), ctx, "ingest"):
        pass
    with pytest.raises(RuntimeError), recording_usage(UsageMeter(), ctx, "ingest"):
        raise RuntimeError("the step failed")
    assert ctx.run_dir == f"runs/{safe_run_key(ctx.run_id)}"
    stored = _stored(ctx, "ingest.json")
    assert stored.step == "ingest" and stored.run_id == ctx.run_id and stored.rank == 0
    assert [a.outcome for a in stored.attempts] == ["succeeded", "failed"]
    assert not ctx.lake.fs.glob(ctx.lake.path(ctx.run_dir, "usage", "*.tmp-*"))


def test_each_training_rank_records_its_own_file(ctx, monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in ("0", "1"):
        monkeypatch.setenv("RANK", rank)
        with recording_usage(UsageMeter(), ctx, "train"):
            pass
    assert _stored(ctx, "train.json").rank == 0
    second = _stored(ctx, "train.rank1.json")
    assert second.rank == 1 and second.world_size == 2
    assert sorted(r.rank for r in read_usage(ctx.lake, ctx.run_dir)) == [0, 1]


def test_recording_never_fails_the_step(ctx, monkeypatch, caplog) -> None:
    def broken(*args, **kwargs):
        raise OSError("the object store is unreachable")

    monkeypatch.setattr(Lake, "write_json", broken)
    with caplog.at_level(logging.WARNING, logger="pipeline_steps.core.usage"):
        with recording_usage(UsageMeter(), ctx, "ingest"):
            result = "done"
        # the step's own error is what propagates, not the recording's
        with (
            pytest.raises(ValueError, match="the step's"),
            recording_usage(UsageMeter(), ctx, "ingest"),
        ):
            raise ValueError("the step's own error")
    assert result == "done"
    assert "usage of step ingest not recorded: the object store is unreachable" in caplog.text


def test_an_unreadable_earlier_record_is_replaced(ctx) -> None:
    ctx.lake.write_bytes(b"{not json", ctx.run_dir, "usage", "ingest.json")
    with recording_usage(UsageMeter(), ctx, "ingest"):
        pass
    assert len(_stored(ctx, "ingest.json").attempts) == 1


def test_recording_does_not_import_torch(tmp_path) -> None:
    script = f"""
import sys
from datetime import date
from pipeline_steps.core.context import RunContext
from pipeline_steps.core.settings import load_settings
from pipeline_steps.core.usage import UsageMeter, recording_usage, read_usage

settings = load_settings(environ={{"TRAINYARD_HOME": {str(tmp_path)!r}}})
ctx = RunContext(run_id="r", logical_date=date(2013, 6, 4), settings=settings)
with recording_usage(UsageMeter(), ctx, "ingest"):
    pass
assert "torch" not in sys.modules, "recording imported torch"
print(read_usage(ctx.lake, ctx.run_dir)[0].attempts[0].gpus_visible)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"


def _fake_torch(initialized: bool, peaks: dict[int, int]) -> SimpleNamespace:
    cuda = SimpleNamespace(
        device_count=lambda: len(peaks),
        is_initialized=lambda: initialized,
        max_memory_allocated=lambda index: peaks[index],
        current_device=lambda: 0,
    )
    return SimpleNamespace(cuda=cuda)


def test_gpu_seconds_count_the_devices_a_process_used(monkeypatch) -> None:
    monkeypatch.setattr(usage, "_gpu_peaks", {})
    peaks = {0: 0, 1: 3 * GIB, 2: 0, 3: GIB}
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(True, peaks))
    usage.note_gpu_peak(3, 5 * GIB)  # a peak seen before the counter was reset
    found = gpu_usage()
    assert (found.visible, found.used, found.peak_memory_bytes) == (4, 2, 5 * GIB)
    meter = UsageMeter()
    time.sleep(0.1)
    measured = meter.measure("succeeded")
    assert measured.gpus_used == 2 and measured.gpus_visible == 4
    assert measured.wall_s >= 0.1
    assert measured.gpu_s == pytest.approx(2 * measured.wall_s, abs=0.002)


def test_a_process_that_never_initialised_cuda_used_no_gpu(monkeypatch) -> None:
    monkeypatch.setattr(usage, "_gpu_peaks", {})
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(False, {0: 0, 1: 0}))
    measured = UsageMeter().measure("failed")
    assert (measured.gpus_visible, measured.gpus_used, measured.gpu_s) == (2, 0, 0.0)


# -- the arithmetic -----------------------------------------------------------------------------


def test_cost_is_cpu_hours_gpu_hours_and_memory_held_over_the_wall_time() -> None:
    one = attempt(wall_s=1800, cpu_s=3600, rss=2 * GIB, gpu_s=1800)
    # 1 core-hour * 0.04 + 0.5 GPU-hour * 3.0 + 2 GiB * 0.5 h * 0.005
    assert process_cost(one, rates(RATES)) == pytest.approx(0.04 + 1.5 + 0.005)
    assert process_cost(attempt(cpu_s=0, rss=0, wall_s=99), rates(RATES)) == 0.0


def test_a_run_sums_its_steps_ranks_and_attempts() -> None:
    records = [
        record("ingest", attempt(wall_s=10, cpu_s=20, rss=GIB)),
        # train: two ranks; rank 0 failed once and was retried
        record(
            "train",
            attempt(wall_s=30, cpu_s=30, rss=2 * GIB, outcome="failed"),
            attempt(wall_s=100, cpu_s=100, rss=2 * GIB),
        ),
        record("train", attempt(wall_s=120, cpu_s=110, rss=3 * GIB), rank=1),
    ]
    cost = summarise_usage(records, RATES)
    assert [s.step for s in cost.steps] == ["ingest", "train"]
    ingest, train = cost.steps
    assert (train.processes, train.failed) == (3, 1)
    assert train.wall_s == 130  # the longest-running rank over its attempts
    assert train.cpu_s == 240 and train.peak_rss_bytes == 3 * GIB
    expected_train = sum(process_cost(a, rates(RATES)) for r in records[1:] for a in r.attempts)
    assert train.cost == pytest.approx(expected_train)
    assert cost.total.cost == pytest.approx(ingest.cost + expected_train)
    assert cost.total.cpu_s == 260 and cost.total.wall_s == 140
    assert cost.total.peak_rss_bytes == 3 * GIB
    assert cost.not_counted == ["validate", "features", "evaluate", "promote"]
    assert cost.rates.currency == "EUR"


# -- the settings -------------------------------------------------------------------------------


def test_cost_rates_come_from_every_settings_layer(tmp_path) -> None:
    environ = {"TRAINYARD_HOME": str(tmp_path), "TRAINYARD_COST__GPU_HOUR": "2.5"}
    settings = load_settings(overrides=["cost.currency=EUR"], environ=environ)
    assert settings.cost.gpu_hour == 2.5 and settings.cost.currency == "EUR"
    defaults = load_settings(environ={"TRAINYARD_HOME": str(tmp_path)}).cost
    assert defaults.cpu_core_hour > 0 and defaults.gpu_hour > 0 and defaults.memory_gib_hour > 0


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("cost.gpu_hour=-1", r"cost\.gpu_hour must not be negative, got -1\.0"),
        ("cost.cpu_core_hour=nan", r"cost\.cpu_core_hour must be a finite number"),
        ("cost.memory_gib_hour=.inf", r"cost\.memory_gib_hour must be a finite number"),
        ("cost.cpu_core_hour=cheap", r"setting cost\.cpu_core_hour expects"),
        ("cost.currency=' '", r"cost\.currency must not be empty"),
        ("cost.gpu_hours=1", r"unknown setting\(s\) cost\.gpu_hours"),
    ],
)
def test_bad_rates_name_the_key(tmp_path, override: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(overrides=[override], environ={"TRAINYARD_HOME": str(tmp_path)})


# -- lineage and MLflow -------------------------------------------------------------------------


def test_lineage_and_the_training_run_hold_the_sum_of_the_steps_recorded(make_settings) -> None:
    settings = make_settings("gate.min_auc=0.6")
    ctx = _prepare(settings, "run-1", auc=0.7, champion=None)
    for step, cpu_s in [("ingest", 10.0), ("features", 20.0), ("train", 3600.0)]:
        with_usage = record(step, attempt(cpu_s=cpu_s))
        ctx.lake.write_json(to_json(with_usage), ctx.run_dir, "usage", f"{step}.json")
    promote(ctx)
    where = ctx.lake.path(ctx.run_dir, "lineage.json")
    lineage = load_record(Lineage, ctx.lake.read_json(ctx.run_dir, "lineage.json"), where)
    assert lineage.cost is not None
    assert [s.step for s in lineage.cost.steps] == ["ingest", "features", "train"]
    assert lineage.cost.not_counted == ["validate", "evaluate", "promote"]
    assert lineage.cost.total.cpu_s == 3630.0
    assert lineage.cost.total.cost == pytest.approx(sum(s.cost for s in lineage.cost.steps))
    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    run = client.get_run(lineage.mlflow_run_id).data
    assert run.metrics["cost.total"] == pytest.approx(lineage.cost.total.cost)
    assert run.metrics["cost.train"] == pytest.approx(lineage.cost.step("train").cost)
    assert run.metrics["usage.cpu_seconds"] == 3630.0
    assert run.metrics["usage.peak_rss_gib"] == 1.0
    assert run.tags["trainyard.cost_steps"] == "ingest, features, train"
    assert run.tags["trainyard.cost_currency"] == settings.cost.currency


# -- the report ---------------------------------------------------------------------------------


def test_the_summary_has_one_line_of_usage_and_cost() -> None:
    run = RecordedRun(
        ingest=replace(ingest_manifest(), run_id="r1"),
        train=replace(
            train_manifest("abc", "runs:/abc/model"), metrics={"val_auc": 0.7, "val_loss": 0.4}
        ),
        usage=[record("ingest", attempt(cpu_s=7200, rss=0))],
    )
    line = [x for x in summarise(run, rates=RATES) if "usage and cost" in x]
    assert line == [
        "  usage and cost       0.0800 EUR over 1 step: wall 10 s, CPU 7200 s, GPU 0.0 s, "
        "peak RSS 0.00 GiB; not recorded: train"
    ]
    bare = summarise(replace(run, usage=[]))
    assert "usage and cost       no usage recorded" in bare[-1]


def _record_run(settings, run_id: str, day: date, usage_records: list[StepUsage]) -> None:
    ctx = RunContext(run_id=run_id, logical_date=day, settings=settings)
    ctx.record(replace(ingest_manifest(), logical_date=day.isoformat()))
    for one in usage_records:
        name = usage.usage_file(one.step, one.rank)
        ctx.lake.write_json(to_json(one), ctx.run_dir, "usage", name)


def test_report_costs_lists_each_run_of_the_range_per_step(make_settings, monkeypatch, capsys):
    settings = make_settings()
    home = settings.lake.root.rsplit("/", 1)[0]
    monkeypatch.setenv("TRAINYARD_HOME", home)
    monkeypatch.setenv("TRAINYARD_COST__CURRENCY", "EUR")
    _record_run(
        settings,
        "manual__2013-06-04T00:00:00+00:00",
        DAY,
        [
            record("ingest", attempt(cpu_s=3600, rss=0)),
            record("train", attempt(cpu_s=3600, rss=0, outcome="failed"), attempt(rss=0)),
        ],
    )
    _record_run(settings, "older", date(2013, 6, 3), [])
    _record_run(settings, "out-of-range", date(2013, 6, 9), [record("ingest", attempt())])

    assert main(["report", "--costs", "--start", "2013-06-01", "--end", "2013-06-05"]) == 0
    out = capsys.readouterr().out
    assert "cost of 2 runs for logical dates 2013-06-01..2013-06-05" in out
    assert "out-of-range" not in out
    lines = out.splitlines()
    header = next(i for i, x in enumerate(lines) if x.startswith("run manual__2013-06-04"))
    table = [x.split() for x in lines[header + 1 : header + 6]]
    assert table[0][:2] == ["step", "processes"] and table[0][-2:] == ["cost", "EUR"]
    assert table[1][0] == "ingest" and table[1][-1] == "0.0400"
    assert table[2][:4] == ["train", "2", "(1", "failed)"]
    assert table[3] == ["total", "3", *table[3][2:]] and table[3][-1] == "0.0801"
    older = lines.index("run older  (logical date 2013-06-03)")
    assert lines[older + 1].startswith("  no usage recorded (its steps ran before")
    assert lines[-1] == "total of 1 run: 0.0801 EUR; 1 without usage records"


def test_report_refuses_a_backwards_range(make_settings, monkeypatch, capsys) -> None:
    monkeypatch.setenv("TRAINYARD_HOME", make_settings().lake.root.rsplit("/", 1)[0])
    assert main(["report", "--costs", "--start", "2013-06-05", "--end", "2013-06-01"]) == 2
    assert "--end 2013-06-01 is before --start 2013-06-05" in capsys.readouterr().err
    assert main(["report", "--logical-date", "2013-06-05", "--start", "2013-06-01"]) == 2
    assert main(["report", "--costs"]) == 0
    said = capsys.readouterr().out.strip()
    assert said.startswith("no recorded runs of domain flight_delay in "), said
    assert said.endswith("(another domain: --config its settings file)"), said


def test_usage_records_are_json_a_person_can_read(ctx) -> None:
    with recording_usage(UsageMeter(), ctx, "validate"):
        pass
    text = ctx.lake.fs.cat(ctx.lake.path(ctx.run_dir, "usage", "validate.json")).decode()
    payload = json.loads(text)
    assert payload["step"] == "validate" and payload["attempts"][0]["peak_rss_bytes"] > 0
    assert {"cpu_s", "wall_s", "gpu_s", "gpus_visible", "peak_gpu_memory_bytes"} <= set(
        payload["attempts"][0]
    )


def test_a_tuning_runs_trials_are_counted_together(ctx, monkeypatch) -> None:
    for number in (0, 1):
        trial = replace(ctx, trial=TrialRef(study="s", number=number))
        with recording_usage(UsageMeter(), trial, "train"):
            pass
        assert trial.lake.exists(trial.run_dir, "usage", "train.json")
    with recording_usage(UsageMeter(), ctx, "features"):
        pass
    records = read_usage(ctx.lake, ctx.run_dir)
    assert sorted((r.step, r.trial) for r in records) == [
        ("features", None),
        ("train", 0),
        ("train", 1),
    ]
    two_trials = [
        replace(record("train", attempt(wall_s=30)), trial=0),
        replace(record("train", attempt(wall_s=40)), trial=1),
        replace(record("train", attempt(wall_s=45), rank=1), trial=1),
    ]
    cost = summarise_usage(two_trials, RATES, expected=["features"])
    [trials] = cost.steps
    assert trials.step == "trials" and trials.processes == 3
    assert trials.wall_s == 75  # trial-seconds: each trial's longest rank, summed
    assert cost.not_counted == ["features"]


def test_a_replay_does_not_report_new_rates_as_a_difference(tmp_path) -> None:
    from pipeline_steps.commands.replay import diff

    def recorded(overrides: list[str]) -> Lineage:
        settings = load_settings(overrides=overrides, environ={"TRAINYARD_HOME": str(tmp_path)})
        return lineage(
            logical_date=DAY.isoformat(),
            settings_fingerprint=settings.fingerprint(),
            settings=to_json(settings.to_dict()),
        )

    lake = Lake(str(tmp_path / "lake"))
    repriced = diff(recorded([]), recorded(["cost.gpu_hour=9"]), lake)
    assert next(line for line in repriced if line.item == "settings").identical
    retrained = diff(recorded([]), recorded(["train.epochs=9"]), lake)
    assert "train.epochs" in next(line for line in retrained if line.item == "settings").detail
