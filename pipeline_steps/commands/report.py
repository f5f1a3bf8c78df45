"""Readable summaries of recorded runs, from the step manifests in ``runs/<run>/``, the table of
what runs cost (``trainyard report --costs``, from ``runs/<run>/usage/``), and the champion's
history (``trainyard report --champion``, from the MLflow registry and monitoring experiment)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from pipeline_steps.core.deployment import DAG_KINDS
from pipeline_steps.core.domain import load_domain
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.lake import Lake, safe_run_key
from pipeline_steps.core.manifests import (
    EvaluateManifest,
    FeaturesManifest,
    HoldoutMetrics,
    IngestManifest,
    M,
    Manifest,
    ManifestError,
    MonitorManifest,
    PromoteManifest,
    ReleaseManifest,
    TrainManifest,
    ValidateManifest,
    load_manifest,
    load_record,
)
from pipeline_steps.core.settings import (
    CostSettings,
    Settings,
    changed_settings,
    without_retired,
)
from pipeline_steps.core.step_registry import STEPS
from pipeline_steps.core.tasks import task_spec
from pipeline_steps.core.trigger import Trigger
from pipeline_steps.core.usage import RunCost, StepUsage, UsageTotals, read_usage
from pipeline_steps.core.usage import summarise as summarise_usage
from pipeline_steps.evaluation.champion import ChampionHistory, MonitoredDay, Move, champion_history
from pipeline_steps.tasks import TaskError

log = logging.getLogger(__name__)
SEED_PREFIX = "seed__"


@dataclass(frozen=True, kw_only=True)
class RecordedRun:
    """The manifests one pipeline run recorded, as far as it got."""

    ingest: IngestManifest
    validate: ValidateManifest | None = None
    features: FeaturesManifest | None = None
    train: TrainManifest | None = None
    evaluate: EvaluateManifest | None = None
    promote: PromoteManifest | None = None
    monitor: MonitorManifest | None = None
    release: ReleaseManifest | None = None
    trigger: Trigger | None = None
    usage: list[StepUsage] = field(default_factory=list)
    """The usage records of its step processes (``runs/<run>/usage/``)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The settings document it trained with (``lineage.json``); empty before its promote."""

    @property
    def manifests(self) -> list[Manifest]:
        """Every step manifest the run recorded, in the pipeline's order."""
        steps = (self.ingest, self.validate, self.features, self.train, self.evaluate)
        later = (self.promote, self.monitor, self.release)
        return [m for m in (*steps, *later) if m is not None]

    @property
    def dag_ids(self) -> list[str]:
        """The Airflow DAGs whose tasks recorded its manifests (one run id may be a run of
        several DAGs: the training and the monitor of one scheduled day), oldest first."""
        return list(dict.fromkeys(m.dag_id for m in self.manifests if m.dag_id))

    @property
    def kind(self) -> str:
        """What the run was: ``training``, ``tuning``, ``monitoring``, ``serving`` (by its DAGs,
        else by what it recorded), or ``by hand`` (steps run without Airflow)."""
        kinds = [
            what
            for dag in self.dag_ids
            for kind, what in DAG_KINDS.items()
            if dag.endswith(f"_{kind}")
        ]
        if self.train or self.promote:
            kinds.insert(0, "training")
        return " + ".join(dict.fromkeys(kinds)) or "by hand"

    @property
    def steps_run(self) -> list[str]:
        """The pipeline's steps that recorded a manifest in this run."""
        return [step for step in STEPS if getattr(self, step) is not None]

    def cost(self, settings: CostSettings) -> RunCost | None:
        """Its usage and cost at ``settings``' rates; None when it recorded no usage."""
        if not self.usage:
            return None
        return summarise_usage(self.usage, settings, self.steps_run)


def read_run(lake: Lake, name: str) -> RecordedRun | None:
    """The manifests of ``runs/<name>/``; None when ingest never completed there."""

    def load(cls: type[M]) -> M | None:
        if not lake.exists("runs", name, f"{cls.STEP}.json"):
            return None
        payload = lake.read_json("runs", name, f"{cls.STEP}.json")
        return load_manifest(cls, payload, lake.path("runs", name, f"{cls.STEP}.json"))

    ingest = load(IngestManifest)
    if ingest is None:
        return None
    return RecordedRun(
        ingest=ingest,
        validate=load(ValidateManifest),
        features=load(FeaturesManifest),
        train=load(TrainManifest),
        evaluate=load(EvaluateManifest),
        promote=load(PromoteManifest),
        monitor=load(MonitorManifest),
        release=load(ReleaseManifest),
        trigger=load_record(Trigger, lake.read_json("runs", name, "trigger.json"), name)
        if lake.exists("runs", name, "trigger.json")
        else None,
        usage=read_usage(lake, f"runs/{name}"),
        settings=_recorded_settings(lake, name),
    )


def _recorded_settings(lake: Lake, name: str) -> dict[str, Any]:
    if not lake.exists("runs", name, "lineage.json"):
        return {}
    settings = lake.read_json("runs", name, "lineage.json").get("settings")
    return settings if isinstance(settings, dict) else {}


def describe_settings(document: dict[str, Any]) -> str:
    """What the settings a run trained with changed from the package defaults (its settings
    file, environment and form together), or ``defaults``."""
    changed = changed_settings(without_retired(document))
    if not changed:
        return "defaults"
    values = ", ".join(f"{k}={v!r}" for k, v in sorted(changed.items()))
    return f"{len(changed)} changed from the defaults: {values}"


def recorded_runs(lake: Lake) -> list[RecordedRun]:
    """Every run folder's step manifests, oldest first (by when ingest was recorded). A run
    whose manifests this version cannot read is left out with a warning naming the file."""
    if not lake.exists("runs"):
        return []
    runs = []
    for folder in lake.fs.ls(lake.path("runs"), detail=False):
        name = folder.rstrip("/").rsplit("/", 1)[-1]
        if name.startswith(SEED_PREFIX):  # history loaded by `trainyard seed`, not a run
            continue
        try:
            run = read_run(lake, name)
        except ManifestError as exc:
            log.warning("left out of the report: %s", exc)
            continue
        if run is not None:
            runs.append(run)
    return sorted(runs, key=lambda r: r.ingest.recorded_at or "")


def _metrics(metrics: HoldoutMetrics) -> str:
    """The task's metrics (``TaskSpec.metrics``) in report order; each class's recall
    (``multiclass``) or the holdout's mean label (``regression``) after them."""
    text = ", ".join(f"{m} {getattr(metrics, m):.4f}" for m in task_spec(metrics.task).metrics)
    if metrics.class_recall:
        text += "; recall " + ", ".join(f"{c} {r:.4f}" for c, r in metrics.class_recall.items())
    if task_spec(metrics.task).real_valued:
        text += f" (mean label {metrics.label_mean:.4f})"
    return text


def _differences(evaluation: EvaluateManifest) -> list[str]:
    """Challenger minus champion and minus each baseline, with their intervals."""
    level = f"{2 * evaluation.confidence - 1:.0%}"
    against = [("champion", evaluation.differences)] if evaluation.differences else []
    against += [(b.name.replace("_", " "), b.differences) for b in evaluation.baselines]
    task = evaluation.challenger.metrics.task
    shown_metrics = task_spec(task).summary_metrics
    lines = []
    for name, differences in against:
        shown = ", ".join(
            f"{m} {differences[m].describe()}" for m in shown_metrics if m in differences
        )
        lines.append(f"    {name:<17} {shown}")
    if lines:
        lines.insert(0, f"  challenger minus     ({level} intervals)")
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


def describe_usage(cost: RunCost | None) -> str:
    """One line of a run's usage and cost, or why there is none."""
    if cost is None:
        return (
            "no usage recorded (its steps ran before trainyard recorded usage, "
            "or not through `trainyard step`)"
        )
    total, currency = cost.total, cost.rates.currency
    text = (
        f"{total.cost:.4f} {currency} over {_count(len(cost.steps), 'step')}: "
        f"wall {_seconds(total.wall_s)}, "
        f"CPU {_seconds(total.cpu_s)}, GPU {_seconds(total.gpu_s)}, "
        f"peak RSS {total.peak_rss_gib:.2f} GiB"
    )
    if cost.not_counted:
        text += f"; not recorded: {', '.join(cost.not_counted)}"
    return text


VALIDATION_METRICS = {"val_auc": "val AUC", "val_accuracy": "val accuracy", "val_rmse": "val RMSE"}
"""The task's validation metric of a training run (the head's), as the summary names it."""


def summarise(
    run: RecordedRun, rows_label: str = "rows", rates: CostSettings | None = None
) -> list[str]:
    """The run's lines: rows ingested (counted in ``rows_label``), then what each step did, then
    what its steps used and cost at ``rates`` (default: the ``cost`` settings' defaults)."""
    ingest = run.ingest
    lines = [
        f"run {ingest.run_id or '?'}  (logical date {ingest.logical_date}; {run.kind}"
        + (f", DAG {', '.join(run.dag_ids)})" if run.dag_ids else ")"),
    ]
    if run.trigger:
        lines.append(f"  trigger              {run.trigger.describe()}")
        lines.append(f"  trigger form         {run.trigger.describe_overrides()}")
    if run.settings:
        lines.append(f"  settings             {describe_settings(run.settings)}")
    lines.append(f"  rows ingested        {ingest.rows} {rows_label}")
    if run.validate:
        checks = sum(d.evaluated for d in run.validate.datasets.values())
        cached = all(d.status == "cached" for d in run.validate.datasets.values())
        how = (
            "cached: these partitions were validated before" if cached else f"{checks} expectations"
        )
        lines.append(f"  validation           {run.validate.verdict} ({how})")
    else:
        lines.append("  validation           not passed (see reports/validation/)")
    if run.features:
        sets = run.features.sets
        lines.append(
            f"  training set         {sets.train.rows} rows over "
            f"{len(run.features.train_days)} days; holdout {sets.holdout.rows}"
            f" rows ({run.features.holdout_day})"
        )
    if run.train:
        m = run.train.metrics
        validation = next(
            (f"{name} {m[key]:.4f}, " for key, name in VALIDATION_METRICS.items() if key in m), ""
        )
        lines.append(
            f"  training             {run.train.epochs} epochs, {validation}"
            f"val loss {m['val_loss']:.4f} (MLflow run {run.train.mlflow_run_id})"
        )
        tuned = run.train.tuned_from
        if tuned is not None:
            values = ", ".join(f"{k}={v}" for k, v in sorted(tuned.params.items()))
            lines.append(
                f"  tuned parameters     trial {tuned.trial} of study {tuned.study} "
                f"(validation loss {tuned.value:.5f}): {values}"
            )
    if run.evaluate:
        champion = run.evaluate.champion
        lines.append(f"  challenger           {_metrics(run.evaluate.challenger.metrics)}")
        lines.append(
            "  champion             "
            + (f"v{champion.version}: {_metrics(champion.metrics)}" if champion else "none yet")
        )
        lines += _differences(run.evaluate)
        if run.evaluate.report:
            lines.append(f"  evaluation report    {run.evaluate.report}")
    if run.promote:
        p = run.promote
        lines.append(f"  decision             {p.decision.upper()}: {'; '.join(p.reasons)}")
        registered = f"version {p.version}" if p.version else "nothing (identical)"
        lines.append(
            f"  registered           {p.registered_model} {registered}; "
            + (f"champion is now version {p.champion_after}" if p.champion_after else "no champion")
            + (
                f"; version {p.staging_after} is staged (the drift monitor releases it after "
                "its shadow days)"
                if p.staging_after
                else ""
            )
        )
    lines.append(f"  usage and cost       {describe_usage(run.cost(rates or CostSettings()))}")
    return lines


_COLUMNS = ("step", "processes", "wall s", "CPU s", "GPU s", "peak RSS GiB", "peak GPU GiB")


def _row(name: str, totals: UsageTotals) -> list[str]:
    processes = str(totals.processes) + (f" ({totals.failed} failed)" if totals.failed else "")
    return [
        name,
        processes,
        f"{totals.wall_s:.1f}",
        f"{totals.cpu_s:.1f}",
        f"{totals.gpu_s:.1f}",
        f"{totals.peak_rss_gib:.2f}",
        f"{totals.peak_gpu_memory_bytes / 2**30:.2f}",
        f"{totals.cost:.4f}",
    ]


def _table(rows: list[list[str]]) -> list[str]:
    """Aligned columns: the first to the left, the others to the right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  "
        + "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def cost_table(runs: list[RecordedRun], settings: CostSettings) -> list[str]:
    """Per run, one row per step (processes are ranks times attempts) and the run's total; then
    the total over the runs. A run without usage records says so."""
    currency = settings.currency
    lines = [
        f"rates: CPU {settings.cpu_core_hour} {currency}/core-hour, GPU {settings.gpu_hour} "
        f"{currency}/GPU-hour, memory {settings.memory_gib_hour} {currency}/GiB-hour "
        "(the cost settings)",
        "",
    ]
    total, without = 0.0, 0
    for run in runs:
        lines.append(f"run {run.ingest.run_id or '?'}  (logical date {run.ingest.logical_date})")
        cost = run.cost(settings)
        if cost is None:
            without += 1
            lines += [f"  {describe_usage(None)}", ""]
            continue
        rows = [[*_COLUMNS, f"cost {currency}"]]
        rows += [_row(part.step, part) for part in cost.steps]
        rows += [[step, "not recorded", *[""] * 6] for step in cost.not_counted]
        rows.append(_row("total", cost.total))
        lines += [*_table(rows), ""]
        total += cost.total.cost
    counted = len(runs) - without
    lines.append(
        f"total of {_count(counted, 'run')}: {total:.4f} {currency}"
        + (f"; {without} without usage records" if without else "")
    )
    return lines


def _when(at: str) -> str:
    try:
        return datetime.fromisoformat(at).strftime("%Y-%m-%d %H:%M:%S UTC")
    except ValueError:
        return at or "unknown time"


def _version(version: str | None) -> str:
    return f"v{version}" if version else "none"


def describe_move(move: Move) -> list[str]:
    """A move of the champion alias: when, from which version to which, the decision and who or
    which run; then its reasons, one per line."""
    head = f"  {_when(move.at)}  {_version(move.from_version)} -> {_version(move.to_version)}  "
    if move.kind == "rollback":
        lines = [head + f"ROLLBACK by {move.by}"]
    elif move.kind == "release":
        when = move.logical_date or "?"
        lines = [head + f"RELEASED from staging by {move.by}, logical date {when}"]
    else:
        lines = [
            head + f"{move.decision.upper()}  logical date {move.logical_date or '?'}",
            f"      run {move.run_id or '?'} (MLflow run {move.mlflow_run_id or '?'}), "
            f"trigger {move.by}",
        ]
    return lines + [f"      - {reason}" for reason in move.reasons]


def _score(value: float) -> str:
    return "n/a" if value != value else f"{value:.4f}"


def day_metrics(task: str) -> tuple[tuple[str, str], ...]:
    """The champion's daily metrics in the report (``Task.champion_columns``: its task's, and
    the day's base rate); a task that cannot be resolved any more reads as ``binary``, the
    metrics the monitor records of every champion."""
    try:
        return task_spec(task).champion_columns
    except TaskError:
        return task_spec("binary").champion_columns


def _day_row(day: MonitoredDay, task: str) -> list[str]:
    m = day.metrics
    return [
        day.day,
        day.version,
        *[_score(getattr(m, name)) for name, _ in day_metrics(task)],
        str(m.rows),
        _score(day.mean_score),
        ", ".join(day.crossed) if day.drift_detected else "none",
    ]


def _day_columns(task: str) -> list[str]:
    return [
        "date",
        "version",
        *[title for _, title in day_metrics(task)],
        "rows",
        "mean score",
        "drift",
    ]


def champion_report(history: ChampionHistory, monitoring_experiment: str) -> list[str]:
    """The champion and challenger now, every move of the champion alias (oldest first) and the
    champion's score per monitored day (from ``monitoring_experiment``)."""
    lines = [
        f"registered model {history.registered_model}: champion {_version(history.champion)}, "
        f"challenger {_version(history.challenger)}"
        + (f", staging {_version(history.staging)}" if history.staging else ""),
        "",
        f"moves of the champion alias, oldest first ({_count(len(history.moves), 'move')})",
    ]
    for move in history.moves:
        lines += describe_move(move)
    if not history.moves:
        lines.append("  none: no run has promoted a version yet")
    lines += [
        "",
        f"the champion day by day (monitoring experiment {monitoring_experiment}, "
        f"{_count(len(history.days), 'day')})",
    ]
    if history.days:
        task = history.days[-1].metrics.task
        lines += _table([_day_columns(task), *[_day_row(day, task) for day in history.days]])
    else:
        lines.append("  none: the drift monitor has not scored the champion on these days")
    return lines


def select_runs(
    runs: list[RecordedRun],
    logical_date: date | None = None,
    start: date | None = None,
    end: date | None = None,
) -> list[RecordedRun]:
    """The runs of ``logical_date``, or of logical dates in [``start``, ``end``] (either bound
    open when None). Raises ``StepError`` when ``end`` is before ``start``."""
    if start and end and end < start:
        raise StepError(f"--end {end} is before --start {start}")
    if logical_date:
        start = end = logical_date
    first, last = (start or date.min).isoformat(), (end or date.max).isoformat()
    return [r for r in runs if first <= r.ingest.logical_date <= last]


def _range(logical_date: date | None, start: date | None, end: date | None) -> str:
    if logical_date:
        return f" for {logical_date}"
    if start or end:
        return f" for logical dates {start or '...'}..{end or '...'}"
    return ""


def print_report(
    settings: Settings,
    logical_date: date | None = None,
    start: date | None = None,
    end: date | None = None,
    costs: bool = False,
    champion: bool = False,
    run_id: str | None = None,
) -> None:
    """Print the recorded runs to stdout: the run ``run_id``; else for each logical date (of
    ``logical_date``, or in [``start``, ``end``]) every run of it (its DAG and kind) and the
    latest training run's summary (the latest run's when none trained); with ``costs``, the cost
    table of every run there instead; with ``champion``, the champion's history instead: every
    move of its alias, and its daily score on the monitored days of that date or range. Raises
    ``StepError`` when ``end`` is before ``start`` or the run ``run_id`` is not recorded; what
    MLflow raises when the registry cannot be reached."""
    lake = Lake(settings.lake_root)

    def summary(run: RecordedRun) -> str:
        labelled = load_domain(settings.domain.module).labelled_dataset
        return "\n".join(summarise(run, rows_label=labelled, rates=settings.cost))

    if run_id:
        run = read_run(lake, safe_run_key(run_id))
        if run is None:
            raise StepError(
                f"no recorded run {run_id!r} in {lake.path('runs')} (its ingest never completed; "
                "`trainyard report --logical-date D` lists the runs of a day)"
            )
        print(summary(run))
        return
    if champion:
        if start and end and end < start:
            raise StepError(f"--end {end} is before --start {start}")
        if logical_date:
            start = end = logical_date
        history = champion_history(settings, start, end)
        print("\n".join(champion_report(history, settings.mlflow.monitoring_experiment)))
        return
    runs = select_runs(recorded_runs(lake), logical_date, start, end)
    if not runs:
        print(
            f"no recorded runs{_range(logical_date, start, end)} of domain "
            f"{settings.domain.name} in {lake.path('runs')} (another domain: --config its "
            "settings file)"
        )
        return
    if costs:
        print(f"cost of {_count(len(runs), 'run')}{_range(logical_date, start, end)}")
        print("\n".join(cost_table(runs, settings.cost)))
        return
    by_day: dict[str, list[RecordedRun]] = {}
    for run in runs:
        by_day.setdefault(run.ingest.logical_date, []).append(run)
    for day, of_day in sorted(by_day.items()):
        shown = pick_run(of_day)
        if len(of_day) > 1:
            print(f"{_count(len(of_day), 'run')} of {day}, oldest first (the one marked * below):")
            print("\n".join(_table([list(_RUN_COLUMNS), *[_run_row(r, shown) for r in of_day]])))
            print("  another: trainyard report --run-id RUN")
            print()
        print(summary(shown))
        print()


_RUN_COLUMNS = ("run", "kind", "DAG", "recorded")


def _run_row(run: RecordedRun, shown: RecordedRun) -> list[str]:
    mark = "* " if run is shown else "  "
    at = _when(run.ingest.recorded_at) if run.ingest.recorded_at else "?"
    return [mark + (run.ingest.run_id or "?"), run.kind, ", ".join(run.dag_ids) or "-", at]


def pick_run(runs: list[RecordedRun]) -> RecordedRun:
    """The run of a day a report shows: the latest that trained (a tuning or monitoring run of
    the same day does not hide the training's decision), else the latest."""
    trained = [run for run in runs if "training" in run.kind]
    return (trained or runs)[-1]
