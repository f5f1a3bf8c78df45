"""Shared fixtures. Airflow and trainyard state go to a temporary home, never to ~/airflow."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import date, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
_SESSION_HOME = Path(tempfile.mkdtemp(prefix="trainyard-tests-"))
# Set before anything imports airflow: its configuration is read once, at import.
os.environ["AIRFLOW_HOME"] = str(_SESSION_HOME / "airflow")
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__EXECUTOR"] = "LocalExecutor"
os.environ["TRAINYARD_HOME"] = str(_SESSION_HOME / "trainyard")
for key in [k for k in os.environ if k.startswith("TRAINYARD_") and "__" in k]:
    del os.environ[key]
# The default domain of the tests, as of `make`: the flights example (pipeline_steps names none).
FLIGHTS_CONFIG = ROOT / "examples" / "flight_delay" / "settings.yaml"
os.environ["TRAINYARD_CONFIG"] = str(FLIGHTS_CONFIG)
# Every JVM the suite starts (Spark's local sessions, a cluster's master, workers, drivers and
# executors) lives for seconds over a few days of rows: the client compiler alone and one GC
# thread halve the CPU they spend (the cluster test: 693 -> 361 CPU seconds alone) and change no
# result. Deployments keep the JVM's defaults, tuned for long jobs.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ["JAVA_TOOL_OPTIONS"] = f"{os.environ.get('JAVA_TOOL_OPTIONS', '')} {JVM_OPTIONS}".strip()
# One compute thread per process (torch's intra-op pool, OpenMP, BLAS), set before torch or
# numpy is imported and inherited by every step, DAG run and training the suite starts: three
# workers on two cores, each with a thread per core, kept OpenMP's threads spinning for one
# another (the in-process training and data modules: 302 -> 215 CPU seconds, 157 -> 123 s).
# A user's training keeps torch's defaults (torchrun sets its own for several ranks).
for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[variable] = "1"

# The seeded history: HISTORY_DAYS validated days before FIRST_DAY, window of WINDOW days.
FIRST_DAY = date(2013, 6, 4)
WINDOW = 4
HISTORY = [FIRST_DAY - timedelta(days=n) for n in range(WINDOW - 1, 0, -1)]


_SHARED = "TRAINYARD_TESTS_SHARED"
"""The folder of what the run's test processes build once and share (:func:`built_once`): made
by the process pytest starts, which pytest-xdist's workers inherit it from, and removed by it."""


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and _SHARED not in os.environ:
        os.environ[_SHARED] = str(_SESSION_HOME / "shared")
        config.stash[_OWNS_SHARED] = True


_OWNS_SHARED = pytest.StashKey[bool]()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if session.config.stash.get(_OWNS_SHARED, False):
        shutil.rmtree(os.environ.pop(_SHARED), ignore_errors=True)
    shutil.rmtree(_SESSION_HOME, ignore_errors=True)


def built_once(name: str, build: Callable[[Path], object]) -> Path:
    """The folder ``name`` that ``build(folder)`` fills, built by the first of the run's test
    processes that asks for it and then shared, read-only, by all of them (each pytest-xdist
    worker built its own before)."""
    from filelock import FileLock

    root = Path(os.environ.get(_SHARED) or _SESSION_HOME / "shared")
    root.mkdir(parents=True, exist_ok=True)
    folder, done = root / name, root / f"{name}.built"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            build(folder)
            done.touch()
    return folder


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, outside the kernel's ephemeral
    range (:mod:`pipeline_steps.services.ports`): no outgoing connection takes it meanwhile."""
    from pipeline_steps.services.ports import free_port as pick

    return pick()


def wait_until(
    what: str, check: Callable[[], Any], timeout_s: float = 60, every_s: float = 0.5
) -> Any:
    """``check()``'s first truthy answer, asked every ``every_s`` seconds; ``AssertionError``
    naming ``what`` when none came within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def stop_together(processes: list[subprocess.Popen[Any]], grace_s: float = 5) -> None:
    """SIGTERM each process's group, then SIGKILL what is left after ``grace_s`` together:
    for services whose own shutdown a test does not test (a scheduler took 20 s to stop)."""
    import signal

    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def sqlite_query(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` in the SQLite database ``db`` (an Airflow's metadata)."""
    import sqlite3

    with sqlite3.connect(db, timeout=30) as connection:
        return connection.execute(sql, args).fetchall()


def _create_mlflow_store(folder: Path) -> None:
    from mlflow import MlflowClient

    folder.mkdir(parents=True)
    MlflowClient(f"sqlite:///{folder / 'mlflow.db'}").search_experiments()


@cache
def _empty_mlflow_store() -> Path:
    """An MLflow tracking store as MLflow creates it on first use (its schema migrated, no
    experiment of ours), made once for the run: creating one costs seconds of CPU."""
    return built_once("mlflow", _create_mlflow_store) / "mlflow.db"


def with_mlflow_store(home: Path) -> Path:
    """``home`` with the default MLflow store in place (``home/mlflow.db``, as the embedded
    default names it), unless it has one: the empty store MLflow would create there."""
    store = home / "mlflow.db"
    if not store.exists():
        home.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_empty_mlflow_store(), store)
    return home


def environ_of(home: Path) -> dict[str, str]:
    """The environment of a test's own settings: its home and the default domain's file."""
    return {"TRAINYARD_HOME": str(home), "TRAINYARD_CONFIG": str(FLIGHTS_CONFIG)}


def settings_in(home: Path, *overrides: str) -> Any:
    """The tests' settings rooted in ``home`` (with an empty MLflow store), the short window,
    two epochs, no Data Docs, then ``overrides`` (``section.key=value``)."""
    from pipeline_steps.core.settings import load_settings

    with_mlflow_store(home)
    base = [f"features.window_days={WINDOW}", "train.epochs=2", "validation.data_docs=false"]
    return load_settings(overrides=[*base, *overrides], environ=environ_of(home))


@pytest.fixture
def make_settings(tmp_path: Path) -> Callable[..., object]:
    """Settings rooted in this test's tmp_path, with optional ``section.key=value`` overrides."""

    def make(*overrides: str, home: Path | None = None) -> object:
        return settings_in(home or tmp_path / "home", *overrides)

    return make


def _load(home: Path, days: list[date]) -> None:
    """What ``trainyard seed`` does for ``days`` in ``home``: ingest and validate each."""
    from pipeline_steps.core.settings import load_settings
    from tests.pipeline_runs import load_history

    settings = load_settings(overrides=["validation.data_docs=false"], environ=environ_of(home))
    load_history(settings, days)


def _seed(home: Path) -> None:
    _load(home, HISTORY)
    with_mlflow_store(home)


@pytest.fixture(scope="session")
def seeded_home() -> Path:
    """A trainyard home whose lake holds the validated history days (built once for the run,
    read-only)."""
    return built_once("seeded", _seed)


def _migrate_airflow(home: Path) -> None:
    env = {**os.environ, "AIRFLOW_HOME": str(home)}
    migrate = [sys.executable, "-m", "airflow", "db", "migrate"]
    subprocess.run(migrate, env=env, check=True, capture_output=True)


@pytest.fixture(scope="session")
def airflow_template() -> Path:
    """A freshly migrated Airflow metadata DB (SQLite), migrated once for the run: copy it to
    ``$AIRFLOW_HOME/airflow.db`` for an Airflow of one's own."""
    return built_once("airflow", _migrate_airflow) / "airflow.db"


@pytest.fixture(scope="session")
def airflow_db(airflow_template: Path) -> Path:
    """The run's one Airflow metadata DB (SQLite under ``AIRFLOW_HOME``)."""
    db = Path(os.environ["AIRFLOW_HOME"]) / "airflow.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(airflow_template, db)
    return db


@pytest.fixture
def lake_home(seeded_home: Path, tmp_path: Path) -> Iterator[Path]:
    """A private copy of the seeded home that a test may change."""
    home = tmp_path / "home"
    shutil.copytree(seeded_home, home)
    yield home


@pytest.fixture(scope="session")
def ready_home(seeded_home: Path) -> Path:
    """The seeded home with FIRST_DAY ingested and validated as well: what a run of FIRST_DAY
    finds once its data steps are done, for the tests of what comes after them (built once for
    the run, read-only). A run's own ingest and validate of FIRST_DAY find them done."""

    def build(home: Path) -> None:
        shutil.copytree(seeded_home, home)
        _load(home, [FIRST_DAY])

    return built_once("ready", build)


@pytest.fixture
def ready_lake_home(ready_home: Path, tmp_path: Path) -> Path:
    """A private copy of :func:`ready_home` that a test may change."""
    home = tmp_path / "home"
    shutil.copytree(ready_home, home)
    return home


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The run's one local Spark session (``local[2]``): every Spark test and every step a test
    runs on the Spark engine uses it (``spark_session`` takes a running session as it is)."""
    pytest.importorskip("pyspark")
    from pipeline_steps.core.settings import EngineSettings
    from pipeline_steps.engines.spark import spark_session

    with spark_session(EngineSettings(name="spark", spark_master="local[2]")) as session:
        yield session


@pytest.fixture
def postgres_url() -> str:
    """The local PostgreSQL (``TRAINYARD_TEST_POSTGRES``); required when ``CI=true``."""
    import psycopg2

    url = os.environ.get("TRAINYARD_TEST_POSTGRES", "postgresql+psycopg2://postgres@127.0.0.1/test")
    try:
        psycopg2.connect(url.replace("+psycopg2", ""), connect_timeout=3).close()
    except psycopg2.OperationalError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is required in CI: {exc}")
        pytest.skip(f"PostgreSQL not reachable: {exc}")
    return url


@pytest.fixture
def new_database(postgres_url: str) -> Iterator[str]:
    """A database of its own on the local PostgreSQL, no table in it yet; dropped afterwards."""
    import uuid

    import psycopg2

    name = f"test_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(postgres_url.replace("+psycopg2", ""))
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    yield postgres_url.rsplit("/", 1)[0] + f"/{name}"
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin.close()
