"""``trainyard replay``: run a recorded run again from its lineage, and say what differs.

The replay runs the same steps under a new run id (``replay__<run>__<n>``) with the recorded
run's full settings document, its raw partition versions pinned (``ingest.pins``: the day's and
the whole window's, so a partition that gained a version since is read as it was), the same seeds
and Feast repository, and the champion the recorded run compared with. It never moves the
champion alias unless ``--promote`` is given; without it nothing is registered. Then it prints a
diff, one line per item: ``identical`` or what differs.

The steps run in this process except ``train``, which runs as the DAG runs it: ``torchrun ...
trainyard step train`` with the settings written to a file, and no ``TRAINYARD_*`` environment
override in between. Reproducing the DAG's own code needs a versioned DAG bundle; here the code
version is compared and a difference is flagged (``docs/reproducibility.md``).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.lake import Lake, safe_run_key
from pipeline_steps.core.manifests import ManifestError, PartitionRefs, load_record, to_json
from pipeline_steps.core.provenance import Lineage, build_lineage, code_version
from pipeline_steps.core.settings import (
    RETIRED_SETTINGS,
    Settings,
    load_settings,
    without_retired,
)
from pipeline_steps.core.step_registry import PROMOTE, STEPS, step
from pipeline_steps.core.trigger import Trigger
from pipeline_steps.orchestration.launch import local_argv, step_argv
from pipeline_steps.steps.registry import step_function

log = logging.getLogger(__name__)
REPLAY_PREFIX = "replay__"
LINEAGE = "lineage.json"
DIFF_FILE = "replay_diff.json"
# Settings a replay sets itself: they differ from the recorded run's by design.
REPLAY_SETTINGS = (
    "ingest.pins",
    "promotion.skip",
    "promotion.force",
    "promotion.reason",
    "train.params_from",  # a replay trains with the recorded values, tuned or not
)
# Rates that price a run's usage: they change nothing a replay reproduces.
PRICING_SECTION = "cost."
# Per-epoch metrics that measure the machine, not the model.
TIMING_METRICS = ("samples_per_s", "gpu_memory_peak_gib", "gpu_utilization_pct")


@dataclass(frozen=True, kw_only=True, slots=True)
class DiffLine:
    """One compared item: ``identical``, or what differs."""

    item: str
    identical: bool
    detail: str

    def render(self) -> str:
        return f"  {self.item:<24} {'identical' if self.identical else self.detail}"


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplayOutcome:
    original: Lineage
    replayed: Lineage
    diff: list[DiffLine]

    def render(self) -> str:
        head = (
            f"replay of run {self.original.run_id} (logical date {self.original.logical_date}) "
            f"as run {self.replayed.run_id}"
        )
        return "\n".join([head, *(line.render() for line in self.diff)])


# -- finding the recorded run -----------------------------------------------------------------


def read_lineage(lake: Lake, key: str) -> Lineage:
    where = lake.path("runs", key, LINEAGE)
    return load_record(Lineage, lake.read_json("runs", key, LINEAGE), where)


def find_recorded(lake: Lake, run_id: str | None, logical_date: date | None) -> Lineage:
    """The lineage of run ``run_id``, or of the newest run (not itself a replay) of
    ``logical_date``; a clear error when there is none or it lacks what a replay needs."""
    if run_id is not None:
        key = safe_run_key(run_id)
        if not lake.exists("runs", key, LINEAGE):
            raise StepError(f"run {run_id!r} recorded no lineage ({lake.path('runs', key)})")
        found = read_lineage(lake, key)
    else:
        assert logical_date is not None
        candidates = []
        for folder in lake.fs.ls(lake.path("runs"), detail=False) if lake.exists("runs") else []:
            key = folder.rstrip("/").rsplit("/", 1)[-1]
            if key.startswith(REPLAY_PREFIX) or not lake.exists("runs", key, LINEAGE):
                continue
            try:
                lineage = read_lineage(lake, key)
            except ManifestError as exc:
                log.warning("%s", exc)
                continue
            if lineage.logical_date == logical_date.isoformat():
                candidates.append(lineage)
        if not candidates:
            raise StepError(f"no recorded run of {logical_date} has a lineage to replay")
        found = max(candidates, key=lambda lineage: lineage.recorded_at)
    if not found.settings or not found.raw_versions:
        raise StepError(
            f"run {found.run_id!r} was recorded before lineage kept the full settings and the "
            "raw versions read; it cannot be replayed"
        )
    return found


def replay_run_id(lake: Lake, original: str) -> str:
    """``replay__<original key>__<n>``, n one more than the replays so far."""
    prefix = f"{REPLAY_PREFIX}{safe_run_key(original)}__"
    taken = 0
    if lake.exists("runs"):
        for folder in lake.fs.ls(lake.path("runs"), detail=False):
            suffix = folder.rstrip("/").rsplit("/", 1)[-1].removeprefix(prefix)
            if suffix.isdigit():
                taken = max(taken, int(suffix))
    return f"{prefix}{taken + 1}"


def pins_of(refs: PartitionRefs) -> dict[str, str]:
    """``ingest.pins`` for every partition of ``refs``."""
    return {
        f"{ds}/{day}": str(ref.version) for ds, days in refs.items() for day, ref in days.items()
    }


def replay_settings(original: Lineage, promote: bool, overrides: list[str], path: Path) -> Settings:
    """The recorded settings document with the raw versions pinned and promotion skipped
    (unless ``promote``), then ``overrides``; written to ``path`` for the train process. Settings
    this version retired are left out: they configured nothing a replay reproduces."""
    document: dict[str, Any] = without_retired(json.loads(json.dumps(original.settings)))
    document["ingest"]["pins"] = pins_of(original.raw_versions)
    document["promotion"] |= {"skip": not promote, "force": False, "reason": ""}
    # the lineage holds the values trained with (tuned ones included), not the newest study's
    document["train"]["params_from"] = "settings"
    path.write_text(yaml.safe_dump(document, sort_keys=True))
    settings = load_settings(path, overrides, environ={})
    path.write_text(yaml.safe_dump(settings.to_dict(), sort_keys=True))
    return settings


# -- running the steps --------------------------------------------------------------------------


def run_distributed(ctx: RunContext, name: str, config: Path) -> None:
    """A distributed step (``train``) as the DAG runs it (torchrun), with the settings file and
    no env overrides."""
    local = replace(
        ctx.settings, orchestration=replace(ctx.settings.orchestration, runtime="local")
    )
    run_args = [
        "--run-id",
        ctx.run_id,
        "--logical-date",
        ctx.logical_date.isoformat(),
        "--trigger",
        json.dumps(to_json(ctx.trigger)),
        "--config",
        str(config),
    ]
    argv = local_argv(step_argv(name, local, run_args))
    env = {
        k: v
        for k, v in os.environ.items()
        if not (k.startswith("TRAINYARD_") and "__" in k) and k != "TRAINYARD_CONFIG"
    }
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise StepError(f"{name} of {ctx.run_id} exited with code {done.returncode}:\n{tail}")


def run_steps(ctx: RunContext, steps: list[str], config: Path) -> None:
    """Run ``steps`` of ``ctx`` in order: in this process, a distributed step (``train``)
    through torchrun."""
    ctx.record_trigger()
    for name in steps:
        log.info("replay %s: step %s", ctx.run_id, name)
        if step(name).distributed:
            run_distributed(ctx, name, config)
        else:
            step_function(name)(ctx)


# -- the diff ---------------------------------------------------------------------------------


def _short(digest: str) -> str:
    return digest[:12] if digest else "none"


def _same(item: str, before: Any, after: Any, detail: Callable[[], str]) -> DiffLine:
    same = before == after
    return DiffLine(item=item, identical=same, detail="" if same else detail())


def _flatten(document: dict[str, Any]) -> dict[str, Any]:
    """``section.key`` → value, in JSON form (tuples as lists)."""
    plain = to_json(document)
    return {f"{s}.{k}": v for s, values in plain.items() for k, v in values.items()}


def diff(original: Lineage, replayed: Lineage, lake: Lake) -> list[DiffLine]:
    """One line per item of the two runs' lineages (and the lake's raw versions now)."""
    lines = []
    before_code, after_code = original.code, replayed.code
    lines.append(
        _same(
            "code version",
            before_code,
            after_code,
            lambda: (
                f"DIFFERS: recorded {before_code.describe() if before_code else 'unknown'}, "
                f"replayed with {after_code.describe() if after_code else 'unknown'}; results "
                "may differ because the code does (run the recorded commit: "
                "docs/reproducibility.md)"
            ),
        )
    )
    changed = sorted(
        name
        for name in set(original.packages) | set(replayed.packages)
        if original.packages.get(name) != replayed.packages.get(name)
    )
    lines.append(
        _same(
            "installed packages",
            original.packages_sha256,
            replayed.packages_sha256,
            lambda: (
                f"{len(changed)} differ: "
                + ", ".join(
                    f"{n} {original.packages.get(n, '-')} -> {replayed.packages.get(n, '-')}"
                    for n in changed[:8]
                )
                + (" ..." if len(changed) > 8 else "")
            ),
        )
    )
    before, after = _flatten(original.settings), _flatten(replayed.settings)
    keys = sorted(
        k
        for k in set(before) | set(after)
        if k not in REPLAY_SETTINGS
        and k not in RETIRED_SETTINGS
        and not k.startswith(PRICING_SECTION)
    )
    settings_changed = [k for k in keys if before.get(k) != after.get(k)]
    lines.append(
        DiffLine(
            item="settings",
            identical=not settings_changed,
            detail=", ".join(
                f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in settings_changed
            ),
        )
    )
    lines.append(
        _same(
            "feast repository",
            original.feature_repo_sha256,
            replayed.feature_repo_sha256,
            lambda: (
                f"fingerprint {_short(original.feature_repo_sha256)} -> "
                f"{_short(replayed.feature_repo_sha256)}"
            ),
        )
    )
    lines += _raw_lines(original, replayed, lake)
    lines.append(
        _same(
            "training set",
            original.training_set_sha256,
            replayed.training_set_sha256,
            lambda: (
                f"sha256 {_short(original.training_set_sha256)} -> "
                f"{_short(replayed.training_set_sha256)}"
            ),
        )
    )
    lines.append(_epoch_line(original.epochs, replayed.epochs))
    lines.append(
        _same(
            "final weights",
            original.weights_sha256,
            replayed.weights_sha256,
            lambda: (
                f"sha256 {_short(original.weights_sha256)} -> {_short(replayed.weights_sha256)}"
            ),
        )
    )
    lines.append(
        _same(
            "holdout metrics",
            _comparable(original.challenger),
            _comparable(replayed.challenger),
            lambda: _metrics_detail(original, replayed),
        )
    )
    return lines


def _raw_lines(original: Lineage, replayed: Lineage, lake: Lake) -> list[DiffLine]:
    """Identical in one line when every partition read is the same and has no newer version;
    else one line per partition that differs or gained a version since."""
    lines = []
    count = 0
    for dataset, days in original.raw_versions.items():
        for day, ref in days.items():
            count += 1
            now = replayed.raw_versions.get(dataset, {}).get(day)
            versions = lake.raw_versions(dataset, date.fromisoformat(day))
            newest = versions[-1] if versions else None
            item = f"raw {dataset} {day}"
            if now is None:
                lines.append(DiffLine(item=item, identical=False, detail="not read by the replay"))
            elif now != ref:
                lines.append(
                    DiffLine(
                        item=item,
                        identical=False,
                        detail=f"version {ref.version} (sha256 {_short(ref.sha256)}) -> version "
                        f"{now.version} (sha256 {_short(now.sha256)})",
                    )
                )
            elif newest is not None and newest != ref.version:
                latest = lake.partition_manifest(
                    Lake.raw_version(dataset, date.fromisoformat(day), newest)
                )
                lines.append(
                    DiffLine(
                        item=item,
                        identical=False,
                        detail=f"replayed as recorded (version {ref.version}, sha256 "
                        f"{_short(ref.sha256)}); the source changed since: the lake now has "
                        f"version {newest} (sha256 {_short(latest.sha256)}), which a new run "
                        "would read",
                    )
                )
    if lines:
        return lines
    return [DiffLine(item=f"raw partitions ({count})", identical=True, detail="")]


def _epoch_line(before: list[dict[str, float]], after: list[dict[str, float]]) -> DiffLine:
    def model_metrics(history: list[dict[str, float]]) -> list[dict[str, float]]:
        return [{k: v for k, v in h.items() if k not in TIMING_METRICS} for h in history]

    first, second = model_metrics(before), model_metrics(after)
    if first == second:
        return DiffLine(item=f"per-epoch metrics ({len(first)})", identical=True, detail="")
    if len(first) != len(second):
        detail = f"{len(first)} epochs -> {len(second)} epochs"
    else:
        pairs = enumerate(zip(first, second, strict=True))
        epoch, a, b = next((i, a, b) for i, (a, b) in pairs if a != b)
        keys = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        detail = f"from epoch {epoch}: " + ", ".join(f"{k} {a.get(k)} -> {b.get(k)}" for k in keys)
    return DiffLine(item="per-epoch metrics", identical=False, detail=detail)


def _comparable(metrics: Any) -> Any:
    """Holdout metrics as comparable values: a metric the task does not have is NaN in both
    runs, and NaN equals NaN here."""
    if metrics is None:
        return None
    return {k: None if isinstance(v, float) and v != v else v for k, v in asdict(metrics).items()}


def _metrics_detail(original: Lineage, replayed: Lineage) -> str:
    a, b = _comparable(original.challenger), _comparable(replayed.challenger)
    if a is None or b is None:
        return f"{a} -> {b}"
    return ", ".join(f"{k} {a[k]} -> {b[k]}" for k in a if a[k] != b.get(k))


# -- the command --------------------------------------------------------------------------------


def replay(
    settings: Settings,
    run_id: str | None = None,
    logical_date: date | None = None,
    promote: bool = False,
    overrides: list[str] | None = None,
) -> ReplayOutcome:
    """Run the recorded run (``run_id``, or the newest of ``logical_date``) again from its
    lineage under a new run id and diff the two. ``settings`` only locate the lake.

    Raises ``StepError`` when there is no such run, its lineage lacks what a replay needs, a
    pinned version is gone, or a step fails."""
    lake = Lake(settings.lake_root)
    original = find_recorded(lake, run_id, logical_date)
    new_id = replay_run_id(lake, original.run_id)
    current = code_version()
    if original.code is not None and original.code != current:
        log.warning(
            "the code differs from the recorded run's (%s, now %s): the replay may differ",
            original.code.describe(),
            current.describe(),
        )
    with tempfile.TemporaryDirectory(prefix="trainyard-replay-") as tmp:
        config = Path(tmp) / "settings.yaml"
        replayed_settings = replay_settings(original, promote, overrides or [], config)
        trigger = Trigger(
            kind="replay",
            evidence={
                "replays": original.run_id,
                "champion": original.champion.version if original.champion else None,
            },
        )
        ctx = RunContext(
            run_id=new_id,
            logical_date=date.fromisoformat(original.logical_date),
            settings=replayed_settings,
            trigger=trigger,
        )
        # the pipeline up to its promotion, which only --promote runs (the gate then decides)
        run_steps(ctx, list(STEPS[: STEPS.index(PROMOTE.name)]), config)
    if promote:
        step_function(PROMOTE.name)(ctx)
        replayed = read_lineage(lake, safe_run_key(new_id))
    else:
        replayed = build_lineage(ctx, "skipped", None)
        lake.write_json(to_json(replayed), ctx.run_dir, LINEAGE)
    lines = diff(original, replayed, lake)
    outcome = ReplayOutcome(original=original, replayed=replayed, diff=lines)
    lake.write_json(
        {
            "replays": original.run_id,
            "run_id": new_id,
            "diff": [to_json(line) for line in outcome.diff],
        },
        ctx.run_dir,
        DIFF_FILE,
    )
    return outcome
