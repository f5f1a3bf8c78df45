"""``trainyard``: the one entry point of every step, locally and in a pod.

    trainyard step <name> --run-id R --logical-date D [--config FILE] [--set key=value ...]
    trainyard seed --start D1 --end D2 [--keep-going]
                                            ingest + validate history before a first run
    trainyard report [--run-id R | --logical-date D | --start D1 --end D2] [--costs | --champion]
                                            summarise the recorded runs, list their costs, or
                                            show the champion's moves and daily score
    trainyard rollback --to-version N --reason TEXT [--user NAME]
                                            move the champion back to version N, recorded
    trainyard replay (--run-id R | --logical-date D) [--promote]
                                            run a recorded run again from its lineage and diff
    trainyard tuning [--study NAME]         summarise a tuning study (default: the newest)
    trainyard predict --logical-date D [--rows FILE] [--output FILE]
                                            score a day's rows with the champion from
                                            features read in the Feast online store
    trainyard services up|down|status|env   the production profile on this machine
    trainyard init-domain NAME --sample FILE [--label COL] [--task T] [--time-column COL]
                          [--key COL] [--classes A,B,C] [--time-zone ZONE] [--date-format F]
                          [--out DIR] [--force]
                                            draft a new domain, its first suite, a Feast
                                            repository and settings from a sample file

``step`` prints the step's manifest as one JSON line, last on stdout; the DAG passes only that
line through XCom. A step that cannot go on exits 2 with a readable message and no traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path

from pipeline_steps.commands.report import SEED_PREFIX
from pipeline_steps.core import pipeline_gauges
from pipeline_steps.core.context import RunContext
from pipeline_steps.core.errors import (
    EXIT_EMPTY_DAY,
    EXIT_PERMANENT,
    EXIT_TRANSIENT,
    EmptyDay,
    StepError,
    is_transient,
)
from pipeline_steps.core.manifests import (
    Manifest,
    ManifestError,
    SeedSummary,
    StepOutput,
    TrialRef,
    load_record,
)
from pipeline_steps.core.settings import SettingsError, load_settings
from pipeline_steps.core.step_registry import INGEST, REGISTRY, TRAIN
from pipeline_steps.core.tasks import TASKS
from pipeline_steps.core.trigger import Trigger
from pipeline_steps.core.usage import UsageMeter, recording_usage
from pipeline_steps.steps.registry import step_function

# Kubernetes pods running under KubernetesPodOperator hand their result to the xcom sidecar here.
KPO_XCOM_FILE = Path("/airflow/xcom/return.json")
TERMINATION_LOG = Path("/dev/termination-log")


def _date(text: str) -> date:
    try:
        return date.fromisoformat(text[:10])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO date (YYYY-MM-DD): {text!r}") from exc


def _trigger(text: str) -> Trigger:
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--trigger is not JSON: {exc}") from exc
    try:
        return load_record(Trigger, payload, "--trigger")
    except ManifestError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainyard", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", help="YAML settings file (default: env TRAINYARD_CONFIG)")
        p.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="SECTION.KEY=VALUE",
            help="override one setting; repeatable",
        )

    step = sub.add_parser(
        "step",
        help="run one pipeline step",
        epilog="steps:\n" + "\n".join(f"  {s.name:<10} {s.help}" for s in REGISTRY.values()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    step.add_argument("name", choices=list(REGISTRY), help="the step to run (see below)")
    step.add_argument("--run-id", required=True, help="Airflow run id (or any unique name)")
    step.add_argument("--logical-date", required=True, type=_date, help="partition date D")
    step.add_argument(
        "--trigger",
        type=_trigger,
        help="how the run started, as JSON (the DAG's trigger task writes it); default: cli",
    )
    step.add_argument(
        "--study", help="train as a trial of this Optuna study (with --trial; <domain>_tuning)"
    )
    step.add_argument("--trial", type=int, help="the trial's number in --study")
    common(step)

    seed = sub.add_parser("seed", help="ingest and validate a range of dates (history)")
    seed.add_argument("--start", required=True, type=_date)
    seed.add_argument("--end", required=True, type=_date)
    seed.add_argument(
        "--keep-going",
        action="store_true",
        help="record a refused day and go on to the next; the summary lists every refused day "
        "and its reason, and the command exits 2 when there is one",
    )
    common(seed)

    check = sub.add_parser("validate", help="check a CSV or parquet file against a suite")
    check.add_argument("--path", required=True, help="file path or fsspec URL")
    check.add_argument("--suite", help="suite name: a dataset (default: the domain's labelled one)")
    check.add_argument(
        "--date", type=_date, help="partition date (default: the file's; it must hold one)"
    )
    check.add_argument(
        "--split-by-date",
        action="store_true",
        help="without --date: validate the rows of each date in the file on their own",
    )
    check.add_argument(
        "--lake",
        help="lake whose trailing validated days give the bounds (default: lake.root, "
        "under $TRAINYARD_HOME)",
    )
    common(check)

    cal = sub.add_parser(
        "calibrate", help="set the allowances of a suite's history checks on real days"
    )
    cal.add_argument("--suite", required=True, help="the dataset whose suite to calibrate")
    cal.add_argument("--start", required=True, type=_date, help="first day calibrated on")
    cal.add_argument("--end", required=True, type=_date, help="last day calibrated on")
    cal.add_argument(
        "--columns", help="comma-separated columns to check (default: the suite's history checks)"
    )
    cal.add_argument(
        "--from",
        dest="source",
        choices=["lake", "domain"],
        default="lake",
        help="the lake's validated days (default) or the domain's own source",
    )
    cal.add_argument("--write", action="store_true", help="rewrite the suite's history checks")
    common(cal)

    report = sub.add_parser("report", help="summarise recorded runs, or list what they cost")
    report.add_argument("--run-id", help="this run only (the run ids: --logical-date D)")
    report.add_argument(
        "--logical-date",
        type=_date,
        help="only runs of this date: each listed, the training run summarised",
    )
    report.add_argument("--start", type=_date, help="only runs of logical dates from this one on")
    report.add_argument("--end", type=_date, help="only runs of logical dates up to this one")
    shown = report.add_mutually_exclusive_group()
    shown.add_argument(
        "--costs",
        action="store_true",
        help="list every selected run's usage and cost per step (rates: the cost settings)",
    )
    shown.add_argument(
        "--champion",
        action="store_true",
        help="every move of the champion alias (promotions, rollbacks) and the champion's score "
        "per monitored day (the dates select the days)",
    )
    common(report)

    back = sub.add_parser(
        "rollback", help="move the champion alias back to an earlier version, with a record"
    )
    back.add_argument(
        "--to-version", required=True, help="the registered version to make champion again"
    )
    back.add_argument("--reason", required=True, help="why; recorded on the version")
    back.add_argument("--user", help="who rolls back (default: the operating-system user)")
    common(back)

    tuning = sub.add_parser("tuning", help="summarise a tuning study (default: the newest)")
    tuning.add_argument("--study", help="the study's name (<domain>_tuning logs it)")
    common(tuning)

    serve = sub.add_parser(
        "predict", help="score a day's rows with the champion, features read online"
    )
    serve.add_argument(
        "--logical-date",
        required=True,
        type=_date,
        help="the day whose validated sources feed the online store",
    )
    serve.add_argument(
        "--rows",
        help="parquet or CSV file of that day's rows of the labelled dataset to score (default:"
        " its validated partition)",
    )
    serve.add_argument(
        "--output",
        help="write the predictions to this .parquet or .csv file (default: JSON lines on stdout)",
    )
    common(serve)

    again = sub.add_parser(
        "replay", help="run a recorded run again from its lineage and print what differs"
    )
    which = again.add_mutually_exclusive_group(required=True)
    which.add_argument("--run-id", help="the recorded run to replay")
    which.add_argument("--logical-date", type=_date, help="replay the newest run of this date")
    again.add_argument(
        "--promote",
        action="store_true",
        help="register the replayed model and let the gate move the champion (default: neither)",
    )
    common(again)

    draft = sub.add_parser(
        "init-domain", help="draft a domain, a first suite, Feast stubs and settings from a sample"
    )
    draft.add_argument("name", help="the domain's name: a lowercase Python identifier")
    draft.add_argument("--sample", required=True, help="CSV or parquet file of real rows")
    draft.add_argument("--label", help="the label column (default: one named label, target, y...)")
    draft.add_argument(
        "--task", choices=list(TASKS), help="what the model predicts (default: from the label)"
    )
    draft.add_argument("--time-column", help="the rows' dates or times (default: the first such)")
    draft.add_argument("--key", help="the unique key column (default: the first unique one)")
    draft.add_argument(
        "--classes",
        help="a multiclass label's classes in their order, comma-separated (default: numbers by "
        "value, words of a known scale, bands by their first number, else alphabetical)",
    )
    draft.add_argument(
        "--time-zone",
        default="",
        help="the zone whose midnight starts a day, e.g. America/Chicago (default: a zoned "
        "time's own, UTC for epochs); written to ingest.time_zone and the domain",
    )
    draft.add_argument(
        "--date-format",
        default=None,
        help="how the time column writes a time: a strptime format (%%Y%%m%%d also reads whole "
        "numbers such as 20130601; %%m/%%d/%%Y %%H:%%M:%%S), epoch_s or epoch_ms (default: "
        "ISO, typed columns and the common forms are recognised); written to ingest.date_format",
    )
    draft.add_argument("--out", help="folder to write (default: ./NAME)")
    draft.add_argument("--force", action="store_true", help="replace a folder with files in it")

    env = sub.add_parser(
        "airflow-env",
        help="print the exports the Airflow CLI needs to see the deployment's DAGs on the "
        'embedded default: eval "$(trainyard airflow-env)", then any airflow command',
    )
    env.add_argument("--port", type=int, help="the API server's port (default 8080)")
    env.add_argument("--dags", help="the DAG folder (default: the project's dags/)")
    env.add_argument(
        "--domains",
        help="a folder of domains' settings files, or of domain folders as init-domain writes "
        "them (orchestration.domains_dir)",
    )
    from pipeline_steps.commands.job_commands import add_parsers

    add_parsers(sub)
    sub.add_parser(
        "domains",
        help="list the deployment's domains (TRAINYARD_CONFIG, the examples, "
        "orchestration.domains_dir) with their DAGs; exit 2 naming a refused file",
    )
    return parser


def describe_domains() -> str:
    """One block per domain of the deployment: its name, team, settings file and DAGs."""
    from pipeline_steps.core.deployment import domain_settings_files

    lines = []
    for domain in domain_settings_files():
        s = domain.settings
        lines += [
            f"{domain.name}  team {s.domain.team or '-'}  empty days {s.domain.empty_days}",
            f"  settings  {domain.config or 'the default (TRAINYARD_CONFIG or the defaults)'}",
            f"  DAGs      {', '.join(domain.dag_ids)}",
            f"  lake      {s.lake_root}",
            f"  MLflow    {s.mlflow.experiment}, model {s.mlflow.registered_model}",
        ]
    return "\n".join(lines)


def emit(manifest: StepOutput) -> None:
    """Print the manifest as one JSON line, last on stdout (and where the pod's XCom sidecar
    reads it)."""
    line = json.dumps(manifest.to_json(), sort_keys=True, default=str, allow_nan=False)
    if KPO_XCOM_FILE.parent.is_dir():
        KPO_XCOM_FILE.write_text(line)
    sys.stdout.flush()
    print(line, flush=True)


def run_step(
    name: str,
    run_id: str,
    logical_date: date,
    config: str | None,
    overrides: list[str],
    trigger: Trigger | None = None,
    trial: TrialRef | None = None,
) -> Manifest | None:
    """Run one step. A given trigger is recorded with the run; without one the step keeps the
    trigger the run recorded earlier (or ``cli``). With ``trial`` the train step runs as that
    trial of a tuning study.

    The process's usage, from here to the step's end (succeeded or failed), is recorded in the
    run's ``usage/`` folder (``pipeline_steps.core.usage``); a step that fails before its settings
    load has no lake to record it in."""
    from pipeline_steps.steps.ingest import empty_day

    meter = UsageMeter()
    if trial is not None and name != TRAIN.name:
        raise StepError(f"--study/--trial apply to the {TRAIN.name} step only, not to {name!r}")
    settings = load_settings(config, overrides)
    ctx = RunContext(run_id=run_id, logical_date=logical_date, settings=settings, trial=trial)
    with recording_usage(meter, ctx, name):
        if trigger is not None:
            ctx = replace(ctx, trigger=trigger)
            if os.environ.get("RANK", "0") == "0":
                ctx.record_trigger()
        else:
            ctx = replace(ctx, trigger=ctx.recorded_trigger())
        try:
            output = step_function(name)(ctx)
        except EmptyDay:
            raise  # an ordinary day without rows: no failure
        except StepError as exc:  # bad data or settings: the retry would say the same
            skipped = None if name == INGEST.name else empty_day(ctx)
            if skipped is not None:  # ingest ended on an ordinary empty day: so does this step
                raise EmptyDay(
                    f"{skipped}; an ordinary day of this domain (domain.empty_days), which "
                    f"ingest skipped: the {name} step has nothing to do"
                ) from exc
            if os.environ.get("RANK", "0") == "0":
                pipeline_gauges.step_outcome(settings, name, failed_permanently=True)
            raise
        if os.environ.get("RANK", "0") == "0":
            pipeline_gauges.step_outcome(settings, name, failed_permanently=False)
        return output


def seed(
    start: date, end: date, config: str | None, overrides: list[str], keep_going: bool = False
) -> SeedSummary:
    """Ingest and validate every date in [start, end] in one process. The first refused day
    stops it, unless ``keep_going``: then every refused day is recorded with its reason
    (``refused``) and the next day follows."""
    if end < start:
        raise StepError(f"--end {end} is before --start {start}")
    from pipeline_steps.steps.ingest import ingest
    from pipeline_steps.steps.validate import validate

    settings = load_settings(config, overrides)
    days, empty, rows = [], [], 0
    refused: dict[str, str] = {}
    day = start
    while day <= end:
        ctx = RunContext(
            run_id=f"{SEED_PREFIX}{day.isoformat()}", logical_date=day, settings=settings
        )
        try:
            day_rows = ingest(ctx).rows
            validate(ctx)
        except EmptyDay as exc:  # ordinary in this domain (domain.empty_days: skip)
            empty.append(day.isoformat())
            print(f"skipped {day.isoformat()}: {exc}", file=sys.stderr, flush=True)
        except StepError as exc:
            if not keep_going:
                raise
            refused[day.isoformat()] = str(exc)
            print(f"refused {day.isoformat()}: {exc}", file=sys.stderr, flush=True)
        else:
            rows += day_rows
            days.append(day.isoformat())
            print(f"seeded {day.isoformat()}", file=sys.stderr, flush=True)
        day += timedelta(days=1)
    if not days:
        raise StepError(
            f"no day from {start} to {end} has rows that passed; {len(empty)} empty day(s) "
            f"skipped, {len(refused)} refused"
        )
    return SeedSummary(
        days=len(days),
        first=days[0],
        last=days[-1],
        rows=rows,
        empty_days=empty,
        refused=refused,
    )


def check_file_command(args: argparse.Namespace) -> int:
    """Exit 0 when the file passes its suite; 1 with the readable report when it does not, or
    with one line when it has no rows or not one partition date; 2 (raised) when it cannot be
    read."""
    from pipeline_steps.core.domain import load_domain
    from pipeline_steps.quality.file_check import FileRejected, check_file
    from pipeline_steps.quality.suites import describe

    overrides = [*(args.set or []), *([f"lake.root={args.lake}"] if args.lake else [])]
    settings = load_settings(args.config, overrides)
    suite = args.suite or load_domain(settings.domain.module).labelled_dataset
    try:
        checks = check_file(args.path, suite, settings, args.date, args.split_by_date)
    except FileRejected as exc:
        print(f"trainyard validate failed: {exc}", flush=True)
        return 1
    print(f"judged as the pipeline would, against the lake {settings.lake_root}")
    for check in checks:
        subject = f"file {args.path} (date {check.day})"
        outcome = check.outcome
        for change in check.schema_changes:
            if change.action != "kept" or change.against == "previous":
                print(f"{subject} schema change: {change.label}")
        for line in check.not_applied:
            print(f"{subject} not applied: {line}")
        if outcome.warnings:
            print(describe(subject, outcome.warnings, "warned on"))
        if outcome.failures:
            print(describe(subject, outcome.failures))
        if check.success:
            print(f"{subject} passed suite {suite!r} ({outcome.evaluated} expectations)")
    return 0 if all(check.success for check in checks) else 1


def predict_command(args: argparse.Namespace) -> int:
    """Print the predictions as JSON lines, or write them to ``--output`` and say where; the
    failures of ``serving.predict`` are raised (exit 2)."""
    from pipeline_steps.commands.serving import check_output, json_lines, predict, write_predictions

    if args.output:
        check_output(args.output)
    result = predict(load_settings(args.config, args.set), args.logical_date, args.rows)
    model = result.model
    summary = (
        f"{len(result.rows)} prediction(s) for {args.logical_date} by champion version "
        f"{model.version} (trained by run {model.run_id})"
    )
    if args.output:
        write_predictions(result.rows, args.output)
        print(f"{summary} written to {args.output}", file=sys.stderr, flush=True)
        return 0
    for line in json_lines(result.rows):
        print(line)
    sys.stdout.flush()
    print(summary, file=sys.stderr, flush=True)
    return 0


def fail(args: argparse.Namespace, exc: Exception) -> int:
    """Print the one failure line (with its class, see ``errors``) and return the exit code.
    In a Kubernetes pod the line is also the container's termination message. An ordinary
    empty day is no failure: its line says ``skipped (empty day)``."""
    transient = is_transient(exc)
    label = f"step {args.name}" if args.command == "step" else args.command
    kind = "transient" if transient else "permanent"
    line = f"trainyard {label} failed ({kind}): {exc}"
    if isinstance(exc, EmptyDay):
        line = f"trainyard {label} skipped (empty day): {exc}"
    print(line, file=sys.stderr, flush=True)
    if TERMINATION_LOG.exists():
        with contextlib.suppress(OSError):
            TERMINATION_LOG.write_text(line[:4000])  # Kubernetes keeps 4 KiB
    if isinstance(exc, EmptyDay):
        return EXIT_EMPTY_DAY
    return EXIT_TRANSIENT if transient else EXIT_PERMANENT


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["services"]:
        from pipeline_steps.services.cli import main as services

        return services(argv[1:])
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # GX narrates its own start-up at INFO; the step's own log says what matters.
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    try:
        manifest: StepOutput | None
        if args.command == "step":
            if (args.study is None) != (args.trial is None):
                raise StepError("--study and --trial go together")
            trial = None if args.study is None else TrialRef(study=args.study, number=args.trial)
            manifest = run_step(
                args.name,
                args.run_id,
                args.logical_date,
                args.config,
                args.set,
                args.trigger,
                trial,
            )
        elif args.command == "domains":
            print(describe_domains(), flush=True)
            return 0
        elif args.command in ("submit", "jobs", "cancel"):
            from pipeline_steps.commands.job_commands import run as job_command

            return job_command(args)
        elif args.command == "airflow-env":
            from pipeline_steps.services.airflow_env import airflow_environment, shell_exports

            env = airflow_environment(port=args.port, dags=args.dags, domains=args.domains)
            print(shell_exports(env), flush=True)
            return 0
        elif args.command == "seed":
            summary = seed(args.start, args.end, args.config, args.set, args.keep_going)
            emit(summary)
            if summary.refused:
                print(
                    f"trainyard seed refused {len(summary.refused)} day(s): "
                    + ", ".join(summary.refused)
                    + "; each reason is above and in the summary's refused",
                    file=sys.stderr,
                    flush=True,
                )
                return EXIT_PERMANENT
            return 0
        elif args.command == "validate":
            return check_file_command(args)
        elif args.command == "calibrate":
            from pipeline_steps.commands.calibrate import calibrate_suite

            calibration = calibrate_suite(
                load_settings(args.config, args.set),
                args.suite,
                args.start,
                args.end,
                columns=[c.strip() for c in (args.columns or "").split(",") if c.strip()],
                source=args.source,
                write=args.write,
            )
            print(calibration.render(), flush=True)
            return 0
        elif args.command == "tuning":
            from pipeline_steps.tuning.report import describe_study

            print(describe_study(load_settings(args.config, args.set), args.study), flush=True)
            return 0
        elif args.command == "rollback":
            from pipeline_steps.evaluation.champion import current_user, rollback

            move = rollback(
                load_settings(args.config, args.set),
                args.to_version,
                args.reason,
                current_user() if args.user is None else args.user,
            )
            print(
                f"champion moved back from version {move.from_version or 'none'} to version "
                f"{move.to_version} by {move.by} at {move.at}: {move.reasons[0]}",
                flush=True,
            )
            return 0
        elif args.command == "predict":
            return predict_command(args)
        elif args.command == "init-domain":
            from pipeline_steps.commands.init_domain import init_domain

            result = init_domain(
                args.name,
                args.sample,
                out=args.out,
                force=args.force,
                label=args.label,
                task=args.task,
                time_column=args.time_column,
                key=args.key,
                classes=args.classes,
                time_zone=args.time_zone,
                date_format=args.date_format,
            )
            print(result.render(), flush=True)
            return 0
        elif args.command == "replay":
            from pipeline_steps.commands.replay import replay

            outcome = replay(
                load_settings(args.config, args.set),
                run_id=args.run_id,
                logical_date=args.logical_date,
                promote=args.promote,
                overrides=args.set,
            )
            print(outcome.render(), flush=True)
            return 0
        else:
            from pipeline_steps.commands.report import print_report

            if args.logical_date and (args.start or args.end):
                raise StepError("--logical-date and --start/--end select runs two ways; use one")
            if args.run_id and (args.logical_date or args.start or args.end or args.champion):
                raise StepError("--run-id selects one run; leave out the dates and --champion")
            print_report(
                load_settings(args.config, args.set),
                args.logical_date,
                args.start,
                args.end,
                costs=args.costs,
                champion=args.champion,
                run_id=args.run_id,
            )
            return 0
    except (StepError, SettingsError) as exc:
        return fail(args, exc)
    except Exception as exc:
        if not is_transient(exc):
            raise  # a bug: the traceback is what helps (the orchestrator retries it)
        return fail(args, exc)
    # Under torchrun every rank runs this; rank 0 alone speaks for the step.
    if manifest is not None and os.environ.get("RANK", "0") == "0":
        emit(manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
