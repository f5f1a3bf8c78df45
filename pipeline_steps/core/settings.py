"""One typed, frozen settings object for the whole pipeline.

Precedence, lowest to highest: defaults here < YAML file (``TRAINYARD_CONFIG`` or ``--config``)
< environment ``TRAINYARD_<SECTION>__<KEY>`` < explicit ``--set section.key=value`` overrides.

Only the standard library and PyYAML are imported: DAG files load settings while parsing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import types
import typing
import zoneinfo
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from pipeline_steps.core.fingerprints import json_sha256
from pipeline_steps.core.models import ModelError
from pipeline_steps.core.models import resolve as resolve_model
from pipeline_steps.core.setting_spec import FormEntry, check_declared, path_settings, setting
from pipeline_steps.core.tasks import task_spec
from pipeline_steps.core.team_credentials import team_secret

ENV_PREFIX = "TRAINYARD_"
_ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_QUANTITY = re.compile(r"\d+(\.\d+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")


def _check_quantity(key: str, value: str) -> None:
    """``SettingsError`` unless ``value`` is a Kubernetes resource quantity (``2``, ``500m``,
    ``8Gi``)."""
    if not _QUANTITY.fullmatch(value):
        raise SettingsError(
            f"{key} must be a Kubernetes quantity such as 500m, 2, 512Mi or 8Gi, got {value!r}"
        )


_SECRET_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_DOMAIN_NAME = re.compile(r"[a-z][a-z0-9_]{0,47}")
_TEAM_NAME = re.compile(r"[a-z]([-a-z0-9]{0,30}[a-z0-9])?")
PROJECT_ROOT = Path(__file__).resolve().parents[2]


class SettingsError(ValueError):
    """A setting is unknown, has the wrong type or an invalid value; the message names it."""


_MONITOR_MEASURES_DRIFT = (
    "drift is measured by the drift monitor now (<domain>_drift_monitor, docs/drift.md), "
    "not by the validate step; remove the key (the monitor's drift.* settings: "
    "docs/configuration.md)"
)
PrecisionSetting = Literal["auto", "fp32", "bf16", "fp16"]
"""The values of ``train.precision`` (``pipeline_steps.steps.train.precision``)."""

RETIRED_SETTINGS: dict[str, str] = dict.fromkeys(
    (
        "drift.numeric",
        "drift.categorical",
        "drift.psi_threshold",
        "drift.js_threshold",
        "drift.missing_threshold",
        "drift.sample_size",
        "drift.batch_rows",
    ),
    _MONITOR_MEASURES_DRIFT,
) | {
    "train.amp": "train.amp is train.precision now: auto (bf16 on CUDA, fp32 on the CPU, as amp: "
    "true did), fp32 (amp: false), bf16 or fp16"
}
"""Settings earlier versions read, and why they are gone: setting one stops with that reason."""


def without_retired(document: Mapping[str, Any]) -> dict[str, Any]:
    """A settings document (``Settings.to_dict()``, as a run recorded it) without the retired
    settings, so that one recorded by an earlier version loads. A train section recorded
    before the model registry holds every built-in model's hyperparameters side by side; only
    the recorded model's are kept."""
    cleaned = {
        section: (
            {k: v for k, v in values.items() if f"{section}.{k}" not in RETIRED_SETTINGS}
            if isinstance(values, Mapping)
            else values
        )
        for section, values in document.items()
    }
    train = cleaned.get("train")
    if isinstance(train, dict) and "hyperparameters" not in train:
        _forget_other_models(train, str(train.get("model", "mlp")), recorded=True)
    return cleaned


def trainyard_home(environ: Mapping[str, str]) -> Path:
    """Where the embedded default keeps its state: ``TRAINYARD_HOME``, else ``./.trainyard``."""
    return Path(environ.get("TRAINYARD_HOME", Path.cwd() / ".trainyard")).resolve()


@dataclass(frozen=True, kw_only=True, slots=True)
class LakeSettings:
    root: str = setting(
        "",
        doc="""Local path or fsspec URL (``s3://bucket/lake``); default
        ``$TRAINYARD_HOME/lake``.""",
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class DomainSettings:
    module: str = setting(
        "",
        doc="""Importable module whose ``DOMAIN`` object describes the data: datasets and their
        types, the labelled dataset, entity rows and label, Feast sources and service
        (:mod:`pipeline_steps.core.domain`). No default: a domain's settings file names it (the
        shipped examples' ``examples/*/settings.yaml``; the Makefile's ``TRAINYARD_CONFIG`` names
        one of them).""",
    )
    name: str = setting(
        "trainyard",
        doc="""The domain's name, from which every name of its own derives: the DAGs
        (``<name>_training``, ``_drift_monitor``, ``_tuning``, ``_serving``), the drift and champion
        assets, the MLflow experiments and registered model left empty below, and its folder in the
        lake (``<lake.root>/<name>``). Lowercase letters, digits and ``_``, starting with a letter;
        unique on a deployment.""",
    )
    team: str = setting(
        "",
        doc="""The team that owns the domain: its DAGs are tagged ``team:<team>``, its tasks take
        the team's Airflow pools (``orchestration.pool``, ``orchestration.gpu_pool``), its pods the
        team's Kueue queue (``kubernetes.queue_name``). Lowercase letters, digits and ``-``. Empty:
        no team (the shared pools).""",
    )
    empty_days: Literal["fail", "skip"] = setting(
        "fail",
        doc="""A day whose source holds no row of the labelled dataset: ``fail`` (a broken feed: the
        run fails, as for any missing data) or ``skip`` (ordinary for this domain: the run ends
        skipped, ``seed`` passes it by, serving scores the next day with rows, the monitor and the
        release count only days with rows).""",
    )

    def __post_init__(self) -> None:
        check_declared(self, "domain", SettingsError)
        if not _DOMAIN_NAME.fullmatch(self.name):
            raise SettingsError(
                f"domain.name must be lowercase letters, digits and '_', starting with a letter "
                f"(at most 48), got {self.name!r}: it names the domain's DAGs, assets and lake "
                "folder"
            )
        if self.team and not _TEAM_NAME.fullmatch(self.team):
            raise SettingsError(
                f"domain.team must be lowercase letters, digits and '-', starting with a letter "
                f"(at most 32), got {self.team!r}: it names Airflow pools and a Kueue queue"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class MlflowSettings:
    tracking_uri: str = setting(
        "",
        doc="""MLflow tracking + registry URI; default ``sqlite:///$TRAINYARD_HOME/mlflow.db``.""",
    )
    artifact_root: str = setting(
        "",
        doc="""Artifact root of new experiments; default ``$TRAINYARD_HOME/mlartifacts`` for a local
        store, the server's choice for an ``http(s)://`` tracking server.""",
    )
    experiment: str = setting(
        "",
        doc="""Experiment that holds one run per training; empty: ``<domain.name>_training``.""",
    )
    registered_model: str = setting(
        "",
        doc="""Registered model the challenger is added to and the ``champion`` alias lives on;
        empty: ``domain.name``.""",
    )
    champion_alias: str = setting(
        "champion",
        doc="""Alias that marks the production model.""",
    )
    challenger_alias: str = setting(
        "challenger",
        doc="""Alias that marks the latest evaluated candidate: the promote step of every run but a
        backfill moves it to the version it registered, whatever the gate decided.""",
    )
    staging_alias: str = setting(
        "staging",
        doc="""Alias of the candidate in shadow (``release.mode: staged``): a challenger that passed
        the gate, scored by the drift monitor beside the champion on each new day until the release
        decides on it.""",
    )
    monitoring_experiment: str = setting(
        "",
        doc="""Experiment that holds one run per monitored day: the champion's score on that day and
        the drift statistics of the window ending there; empty: ``<domain.name>_monitoring``.""",
    )

    def __post_init__(self) -> None:
        check_declared(self, "mlflow", SettingsError)
        keys = ("champion_alias", "challenger_alias", "staging_alias")
        for key in keys:
            if not getattr(self, key).strip():
                raise SettingsError(f"mlflow.{key} must not be empty")
        for n, first in enumerate(keys):
            for second in keys[n + 1 :]:
                if getattr(self, first) == getattr(self, second):
                    raise SettingsError(
                        f"mlflow.{second} and mlflow.{first} are both "
                        f"{getattr(self, first)!r}: one version cannot mark both roles"
                    )


@dataclass(frozen=True, kw_only=True, slots=True)
class TeamQuota:
    """What one team's jobs may hold at once (``orchestration.quotas.<team>``)."""

    runs: int = setting(
        2,
        doc="""The team's trainings running at once: the size of its pool ``train-<team>``, which
        the train task of each of its CPU jobs takes a slot of; a job submitted beyond it waits
        in the team's queue, highest priority first.""",
        minimum=1,
    )
    gpus: int = setting(
        0,
        doc="""GPUs the team's jobs hold at once: the size of its GPU pool; a job asking for more
        than this alone is refused.""",
        minimum=0,
    )
    nodes: int = setting(
        1,
        doc="""Most nodes one job of the team may ask for.""",
        minimum=1,
    )
    queued: int = setting(
        50,
        doc="""Most jobs of the team waiting at once; a job submitted beyond it is refused.""",
        minimum=0,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class OrchestrationSettings:
    runtime: Literal["local", "kubernetes"] = setting(
        "local",
        doc="""``local`` runs each step as a subprocess; ``kubernetes`` runs it in a pod.""",
    )
    schedule: str = setting(
        "0 0 * * *",
        doc="""Cron expression of the daily retraining.""",
    )
    start_date: str = setting(
        "2013-01-01",
        doc="""First logical date of the schedule (ISO date).""",
    )
    catchup: bool = setting(
        False,
        doc="""Whether the scheduler creates runs for every missed interval.""",
    )
    max_active_runs: int = setting(
        1,
        doc="""Concurrent runs of one DAG; training runs share the registry, so one by default.""",
        minimum=1,
    )
    retries: int = setting(
        2,
        doc="""Retries per task.""",
        minimum=0,
    )
    retry_delay_s: int = setting(
        60,
        doc="""First retry delay; doubles on every retry (exponential backoff).""",
        minimum=0,
    )
    max_retry_delay_s: int = setting(
        900,
        doc="""Upper bound of the retry delay.""",
        minimum=0,
    )
    step_timeout_s: int = setting(
        7200,
        doc="""Execution timeout of one step.""",
        minimum=1,
    )
    data_wait_s: int = setting(
        21_600,
        doc="""How long a run waits for its day's data in the source before it ends skipped.""",
        minimum=0,
    )
    data_poke_s: int = setting(
        300,
        doc="""Seconds between two looks at the source while waiting (the sensor frees its worker
        slot in between: reschedule mode).""",
        minimum=1,
    )
    gpu_pool: str = setting(
        "gpu",
        doc="""Airflow pool of GPU slots: the train task and the tuning trials take one slot per GPU
        they use, so Airflow never starts more GPU work than ``gpu_pool_slots``; created with that
        size where Airflow is set up. Empty: no pool (GPU tasks use Airflow's default pool). With
        ``domain.team``, the default ``gpu`` becomes the team's own, ``gpu-<team>``.""",
    )
    pool: str = setting(
        "",
        doc="""Airflow pool every other task of the domain's DAGs takes a slot of, so one team's
        runs cannot crowd out another's worker slots; created with ``pool_slots`` slots where
        Airflow is set up. Empty: the team's pool ``team-<team>`` with ``domain.team``, else
        Airflow's ``default_pool``.""",
    )
    pool_slots: int = setting(
        16,
        doc="""Size of ``pool``: the tasks of the team's domains running at once.""",
        minimum=1,
    )
    domains_dir: str = setting(
        "",
        doc="""A folder of domain settings files (``*.yaml``, one domain each): Airflow builds
        every DAG of each (``dags/trainyard_domains.py``), beside the default domain's. Read
        from the default domain's settings (``TRAINYARD_CONFIG``,
        ``TRAINYARD_ORCHESTRATION__DOMAINS_DIR``).""",
        path=True,
    )
    example_domains: bool = setting(
        True,
        doc="""Whether the deployment runs the shipped examples (``examples/*/settings.yaml``)
        beside its own domains.""",
    )
    gpu_pool_slots: int = setting(
        64,
        doc="""Size of ``gpu_pool``: the GPUs this Airflow's tasks may hold at once (e.g. the GPUs
        of the team's Kueue quota); a task needing more is refused when the DAG is parsed.""",
        minimum=1,
    )
    train_priority: int = setting(
        10,
        doc="""Priority weight (rule ``absolute``) of the train task: scheduled and drift-triggered
        training goes before tuning trials waiting for the same GPU slots. A job submitted with
        a priority (the trigger form, ``trainyard submit --priority``) gives every task of its
        run that weight: among the jobs waiting for a team's slots, the highest goes first.""",
        minimum=1,
        maximum=2**31 - 1,
        form=FormEntry("Priority", "Resources", param="priority"),
    )
    tuning_priority: int = setting(
        1,
        doc="""Priority weight (rule ``absolute``) of each tuning trial.""",
        minimum=1,
        maximum=2**31 - 1,
    )
    team_queues: bool = setting(
        False,
        doc="""Whether each team's tasks go to a Celery queue of their own, ``team-<team>``, taken
        only by workers holding that team's credentials alone (the production profile starts
        one per team, ``airflow-worker-<team>``; docs/teams.md for compose and Kubernetes);
        the deployment's, like ``quotas``: a domain's own file may not set it. Off: every task
        goes to Airflow's default queue (the LocalExecutor ignores queues).""",
    )
    quotas: dict[str, TeamQuota] = setting(
        default_factory=dict,
        doc="""Each team's quota, ``{team: {runs, gpus, nodes, queued}}`` (:class:`TeamQuota`):
        the deployment's, read from the default settings (``TRAINYARD_CONFIG``) or the
        environment; a domain's own file may not set it. ``trainyard submit`` refuses a job
        beyond it, naming the limit; a team without one has no limit but its pools.""",
    )

    def __post_init__(self) -> None:
        check_declared(self, "orchestration", SettingsError)


@dataclass(frozen=True, kw_only=True, slots=True)
class IngestSettings:
    source: str = setting(
        "domain",
        doc="""``domain`` (the domain's own source, e.g. a package's real data), ``file`` or
        ``sql``. The domain's source may also be named (as the partition manifests record it).""",
    )
    datasets: tuple[str, ...] = setting(
        (),
        doc="""Datasets ingested per logical date (``raw/<dataset>/date=D``); empty: the domain's
        (``Domain.datasets``). Must include the domain's labelled dataset.""",
    )
    path: str = setting(
        "",
        doc="""file source: path or fsspec URL template with ``{dataset}`` and ``{date}``; globs
        allowed, e.g. ``s3://bucket/{dataset}/date={date}/*.parquet`` or
        ``/data/{dataset}/*.csv``.""",
        path=True,
    )
    date_column: str = setting(
        "",
        doc="""file source: column holding each row's date; empty when the path alone selects the
        day.""",
    )
    date_format: str = setting(
        "",
        doc="""file source: how ``date_column`` writes a time. Empty: ISO 8601 text, or parquet's
        date and timestamp types; ``epoch_s`` or ``epoch_ms``: epoch seconds or milliseconds (UTC);
        else a ``strptime`` format such as ``%m/%d/%Y %H:%M:%S``.""",
    )
    time_zone: str = setting(
        "",
        doc="""file source: the zone whose midnight starts a day (an IANA name such as
        ``America/Chicago``): zoned and epoch times are dated in it, so the evening of a city west
        of Greenwich stays on its own day. Empty: a zoned time's own zone, UTC for epochs.""",
    )
    row_key: str = setting(
        "",
        doc="""file source: the name of a key column made for rows without an id (``init-domain
        --key row``): each row's ``<file>:<row number>`` (the file's path as the source finds it,
        rows counted from 1). The same file and row give the same key on every re-ingest;
        moving or renaming the file, or rows inserted or removed above a row, change it.""",
    )
    sql_url: str = setting(
        "",
        doc="""sql source: SQLAlchemy URL, e.g. ``postgresql+psycopg2://user@host/db``.""",
    )
    sql_query: str = setting(
        "SELECT * FROM {dataset} WHERE day = :day",
        doc="""sql source: query per dataset (``{dataset}`` is substituted) with ``:day`` bound to
        D.""",
    )
    batch_rows: int = setting(
        65_536,
        doc="""Rows per batch read from a source; memory does not grow with the partition.""",
        minimum=1,
    )
    pin_version: int = setting(
        0,
        doc="""Use this raw version of the date instead of ingesting (0: ingest; latest version
        wins).""",
        minimum=0,
        form=FormEntry("Pin raw version", "Data", param="pin_raw_version"),
    )
    pins: dict[str, str] = setting(
        default_factory=dict,
        doc="""A pinned view of the lake: ``"<dataset>/<YYYY-MM-DD>": "<raw version>"`` for every
        partition the run may read (the day's ingest and the training window); partitions not named
        do not exist for the run, and nothing is ingested or published to ``validated/``.
        ``trainyard replay`` sets it from the replayed run's lineage.""",
    )

    def __post_init__(self) -> None:
        check_declared(self, "ingest", SettingsError)
        for key, version in self.pins.items():
            dataset, _, day = key.partition("/")
            if not dataset or not _ISO_DAY.fullmatch(day) or not str(version).isdigit():
                raise SettingsError(
                    f"ingest.pins entry {key!r}: {version!r} must read "
                    "'<dataset>/<YYYY-MM-DD>': '<version number>'"
                )
        if not self.source:
            raise SettingsError("ingest.source must name a source: domain, file or sql")
        custom = self.date_format not in ("", "epoch_s", "epoch_ms")
        if custom and "%" not in self.date_format:
            raise SettingsError(
                f"ingest.date_format {self.date_format!r} must be empty (ISO 8601), epoch_s, "
                "epoch_ms or a strptime format such as %m/%d/%Y %H:%M:%S"
            )
        if self.time_zone:
            try:
                zoneinfo.ZoneInfo(self.time_zone)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                raise SettingsError(
                    f"ingest.time_zone {self.time_zone!r} is not a time zone name; use an IANA "
                    "name such as America/Chicago or Europe/Lisbon"
                ) from None
        if self.source == "file" and not self.path:
            raise SettingsError("ingest.path is required when ingest.source is 'file'")
        if self.source == "sql" and not self.sql_url:
            raise SettingsError("ingest.sql_url is required when ingest.source is 'sql'")


@dataclass(frozen=True, kw_only=True, slots=True)
class ValidationSettings:
    expectations_dir: str = setting(
        "expectations",
        doc="""Folder holding one suite per dataset as JSON
        (``<expectations_dir>/<dataset>.json``).""",
        path=True,
    )
    trailing_days: int = setting(
        14,
        doc="""Validated days before D whose mean row count sets the day's row-count bounds.""",
        minimum=1,
    )
    row_count_low: float = setting(
        0.5,
        doc="""Lowest row count accepted, as a share of the trailing mean.""",
        minimum=0,
        below=1,
    )
    row_count_high: float = setting(
        2.0,
        doc="""Highest row count accepted, as a multiple of the trailing mean.""",
        above=1,
    )
    row_count_noise: float = setting(
        0.0,
        doc="""Standard deviations of a count's chance variation tolerated beyond
        ``row_count_low``..``row_count_high``: the larger of the trailing mean's square root (a
        Poisson count) and the trailing counts' own standard deviation; a day may also reach this
        many standard deviations of the trailing log counts above their mean (a source of sessions
        varies by multiples). A day of a few rows varies by far more than its ratio says
        (``init-domain`` drafts 3).""",
        minimum=0,
    )
    null_share_factor: float = setting(
        3.0,
        doc="""Highest missing share of a column before a warning, as a multiple of its trailing
        mean (plus ``null_share_floor``).""",
        minimum=1,
    )
    null_share_floor: float = setting(
        0.2,
        doc="""Missing share always tolerated above ``null_share_factor`` times the trailing mean:
        days with a few more cancellations than usual are ordinary.""",
        minimum=0,
        maximum=1,
    )
    share_noise: float = setting(
        0.0,
        doc="""How rare a chance share a day may show beyond the bounds of a column's missing share
        and of a drafted value set, in standard deviations of a normal variable (3: a day's count of
        missing or unseen values is judged against what a binomial count of its rows at the bound's
        rate exceeds on 0.13 % of days). A day of a few rows misses a value, or holds a rare one, in
        a share no fixed bound allows. 0: the fixed bounds alone. ``init-domain`` drafts 3.""",
        minimum=0,
    )
    history_min_days: int = setting(
        7,
        doc="""Trailing validated days needed before the suites' history checks (a day's mean,
        spread, distinct values and top share against the trailing days) are applied; with fewer
        their bounds stay open and the report says so.""",
        minimum=1,
    )
    history_floor: float = setting(
        0.02,
        doc="""Least spread of a history check's statistic, as a share of its trailing median (on
        the log scale: 0.02 is 2%), so that a statistic constant over the trailing days still
        tolerates a small change.""",
        minimum=0,
    )
    data_docs: bool = setting(
        True,
        doc="""Render GX Data Docs HTML per run under ``reports/validation/date=D/data_docs``: a
        passing day's pages, sharing GX's assets in ``reports/data_docs_assets``; a failed day's
        whole site.""",
    )
    chunk_rows: int = setting(
        1_000_000,
        doc="""Partitions with more rows are validated this many rows at a time (bounded
        memory).""",
        minimum=1,
    )
    added_columns: Literal["fail", "warn_and_drop"] = setting(
        "warn_and_drop",
        doc="""A column the source added (not in the dataset's schema): ``warn_and_drop`` reports it
        and leaves it out of the suite run and of ``validated/``, so training never sees it;
        ``fail`` stops the run.""",
    )
    removed_columns: Literal["fail"] = setting(
        "fail",
        doc="""A column of the dataset's schema the source no longer has (removed or renamed):
        always stops the run; the setting exists to say so.""",
    )
    widened_types: Literal["fail", "warn"] = setting(
        "fail",
        doc="""A column whose type widened (int → float, int32 → int64, string → large string):
        ``fail`` stops the run; ``warn`` reports it and lets the suite's type expectations
        judge.""",
    )
    schema_policy: dict[str, str] = setting(
        default_factory=dict,
        doc="""Per-dataset overrides of the three above, ``{"<dataset>.<setting>": value}``, e.g.
        ``{"weather.added_columns": "fail"}``.""",
    )

    def policy(self, dataset: str, name: str) -> str:
        """The schema-change setting ``name`` for ``dataset``, its override if any."""
        default: str = getattr(self, name)
        return self.schema_policy.get(f"{dataset}.{name}", default)

    def __post_init__(self) -> None:
        check_declared(self, "validation", SettingsError)
        choices = {
            "added_columns": ("fail", "warn_and_drop"),
            "removed_columns": ("fail",),
            "widened_types": ("fail", "warn"),
        }
        for key, value in self.schema_policy.items():
            dataset, _, name = key.rpartition(".")
            if not dataset or name not in choices:
                raise SettingsError(
                    f"validation.schema_policy key {key!r} must read '<dataset>.<setting>' with "
                    f"a setting in {', '.join(choices)}"
                )
            if value not in choices[name]:
                raise SettingsError(
                    f"validation.schema_policy[{key!r}] must be one of {choices[name]}, "
                    f"got {value!r}"
                )
        if self.history_min_days > self.trailing_days:
            raise SettingsError(
                f"validation.history_min_days ({self.history_min_days}) must not exceed "
                f"validation.trailing_days ({self.trailing_days})"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class DriftSettings:
    """The drift monitor's settings (``<domain.name>_drift_monitor``, the ``monitor`` step)."""

    reference_days: int = setting(
        14,
        doc="""Monitor: validated days before the current window used as reference when the
        champion's recorded training days before it are fewer than ``min_reference_days``.""",
        minimum=1,
    )
    bins: int = setting(
        10,
        doc="""Monitor: quantile bins of the reference for the PSI of numeric features and
        scores.""",
        minimum=2,
    )
    current_days: int = setting(
        7,
        doc="""Monitor: validated days ending at D that form the current window compared with the
        reference. One day is often too few rows (of the example's hourly weather, too few hours)
        to tell a shift from an ordinary day.""",
        minimum=1,
    )
    min_reference_days: int = setting(
        14,
        doc="""Monitor: fewest reference days (before the current window) the calibration accepts;
        with fewer the monitor reports no verdict rather than a noisy one.""",
        minimum=2,
    )
    calibration_samples: int = setting(
        500,
        doc="""Monitor: windows of ``current_days`` days drawn from the reference days to learn how
        far an ordinary window of that size strays from the rest of the reference (the null
        distribution).""",
        minimum=20,
    )
    calibration_quantile: float = setting(
        0.99,
        doc="""Monitor: a statistic crosses when it exceeds this quantile of its null distribution
        (and the effect-size floor); 0.99 expects one ordinary window in a hundred to cross per
        signal.""",
        above=0,
        below=1,
    )
    block_days: int = setting(
        3,
        doc="""Monitor: resampled windows are drawn in runs of this many consecutive reference days,
        so the null keeps the several-day persistence of weather and delays.""",
        minimum=1,
    )
    min_weighted_ratio: float = setting(
        1.0,
        doc="""Monitor: effect-size floor of the weighted input drift (each feature's statistic over
        its own threshold, averaged with the champion's sensitivity as weights).""",
        minimum=0,
    )
    min_psi: float = setting(
        0.1,
        doc="""Monitor: effect-size floor of PSI (features, prediction): smaller shifts never cross,
        however significant.""",
        minimum=0,
    )
    min_js: float = setting(
        0.05,
        doc="""Monitor: effect-size floor of the Jensen-Shannon distance of categorical features
        (and of a multiclass task's predicted and labelled classes).""",
        minimum=0,
    )
    min_rate_change: float = setting(
        0.04,
        doc="""Monitor: effect-size floor of a binary task's label drift, the absolute change of the
        positive-label (delay) rate (a regression label's drift is held to ``min_psi``, a multiclass
        one to ``min_js``).""",
        minimum=0,
    )
    min_importance: float = setting(
        0.05,
        doc="""Monitor: share of the champion's sensitivity a feature needs for its drift to count;
        drift of features the model hardly uses is reported, never a trigger.""",
        minimum=0,
    )
    triggers: tuple[str, ...] = setting(
        ("label", "prediction", "input"),
        doc="""Monitor: which signals may emit a drift event: ``label`` (delay rate), ``prediction``
        (the champion's score distribution), ``input`` (model features).""",
        choices=("label", "prediction", "input"),
    )
    cooldown_hours: float = setting(
        72.0,
        doc="""Monitor: no drift event within this many hours (of logical time) of the last one; the
        monitor logs why instead. 0 disables the cooldown.""",
        minimum=0,
    )

    def __post_init__(self) -> None:
        check_declared(self, "drift", SettingsError)


@dataclass(frozen=True, kw_only=True, slots=True)
class FeatureSettings:
    feature_repo: str = setting(
        "feature_repo",
        doc="""Feast repository whose definitions the features step applies.""",
        path=True,
    )
    project: str = setting(
        "trainyard",
        doc="""Feast project name; a config with a shared registry (``${TRAINYARD_FEAST_PROJECT}``)
        gets ``<project>_<run hash>``, one project per run.""",
    )
    store_config: str = setting(
        "feature_store.yaml",
        doc="""Feast config file inside ``feature_repo``: ``feature_store.yaml`` (a registry file
        and SQLite online store per run, beside its sources) or ``feature_store.production.yaml``
        (the SQL registry in PostgreSQL, ``$TRAINYARD_FEAST_REGISTRY``, and the online store in
        Redis, ``$TRAINYARD_FEAST_REDIS``).""",
    )
    window_days: int = setting(
        30,
        doc="""Trailing window of validated days, holdout day included.""",
        minimum=2,
        maximum=3660,
        form=FormEntry("Window (days)", "Data"),
    )
    min_train_days: int = setting(
        1,
        doc="""Fewest validated days before the holdout day that a training set may have.""",
        minimum=1,
    )
    row_group_rows: int = setting(
        4096,
        doc="""Rows per parquet row group of the frozen training sets: the block that training ranks
        shard and shuffle, so a set needs at least as many row groups as there are ranks.""",
        minimum=1,
    )
    join_memory_limit: str = setting(
        "128MB",
        doc="""Memory DuckDB may hold for the point-in-time join (e.g. ``512MB``, ``4GB``); it
        spills the rest to a scratch folder, so a longer window takes disk and time, not memory.""",
    )

    def __post_init__(self) -> None:
        check_declared(self, "features", SettingsError)
        if not re.fullmatch(r"\d+(\.\d+)?\s*(KB|MB|GB|TB|KiB|MiB|GiB|TiB)", self.join_memory_limit):
            raise SettingsError(
                f"features.join_memory_limit {self.join_memory_limit!r} is not a size like "
                "512MB or 4GB"
            )
        if self.min_train_days >= self.window_days:
            raise SettingsError(
                f"features.min_train_days ({self.min_train_days}) must be below "
                f"features.window_days ({self.window_days}): the window holds the holdout day too"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainSettings:
    model: str = setting(
        "mlp",
        doc="""The model: a registered name (``mlp``: categorical embeddings + MLP;
        ``ft_transformer``: feature tokenizer + Transformer encoder, Gorishniy et al. 2021) or the
        import path ``package.module:name`` of your own (:mod:`pipeline_steps.core.models`). Its
        hyperparameters are set as ``train.<name>`` (e.g. ``train.hidden_dims``).""",
        form=FormEntry("Model", "Training"),
    )
    hyperparameters: Mapping[str, Any] = setting(
        default_factory=dict,
        doc="""The model's hyperparameters, its declared defaults under the values given; set them
        as ``train.<name>``. ``mlp``: ``hidden_dims`` (128, 64), ``embedding_dim`` 8, ``dropout``
        0.1. ``ft_transformer``: ``token_dim`` 32, ``transformer_layers`` 2, ``attention_heads`` 4
        (dividing ``token_dim``), ``dropout`` 0.1.""",
    )
    epochs: int = setting(
        6,
        doc="""Most passes over the training set (early stopping may end sooner).""",
        minimum=1,
        maximum=1000,
        form=(
            FormEntry("Epochs", "Training"),
            FormEntry("Epochs per trial", "Training", form="tuning"),
        ),
    )
    batch_size: int = setting(
        512,
        doc="""Examples per forward pass on each process.""",
        minimum=1,
        maximum=65_536,
        form=FormEntry("Batch size", "Training"),
    )
    grad_accumulation: int = setting(
        1,
        doc="""Batches whose gradients are summed per optimizer step.""",
        minimum=1,
    )
    learning_rate: float = setting(
        2e-3,
        doc="""AdamW peak learning rate.""",
        above=0,
        maximum=1,
        form=FormEntry("Learning rate", "Training"),
    )
    weight_decay: float = setting(
        1e-4,
        doc="""AdamW weight decay.""",
        minimum=0,
    )
    warmup_fraction: float = setting(
        0.05,
        doc="""Share of all optimizer steps with a linear warmup; a cosine decay to zero
        follows.""",
        minimum=0,
        below=1,
    )
    grad_clip: float = setting(
        1.0,
        doc="""Largest gradient norm; 0 disables clipping.""",
        minimum=0,
    )
    precision: PrecisionSetting = setting(
        "auto",
        doc="""Numeric precision of the forward pass: ``fp32``; ``bf16`` (autocast to bfloat16, no
        loss scaling); ``fp16`` (autocast to float16 with a loss scaler, checkpointed; not with
        ``fsdp``); ``auto``: ``bf16`` on CUDA, ``fp32`` on the CPU. Weights and optimizer state
        stay float32; the run records the precision it trained in.""",
        form=FormEntry("Precision", "Training"),
    )
    patience: int = setting(
        3,
        doc="""Stop after this many epochs without a better validation loss; 0 never stops
        early.""",
        minimum=0,
    )
    restore_best: bool = setting(
        True,
        doc="""Register the weights of the epoch with the lowest validation loss, not the last
        epoch's.""",
    )
    calibrate: bool = setting(
        True,
        doc="""Temperature scaling of a classifier (``binary``, ``multiclass``, ``ordinal``): after
        training, one temperature dividing the model's logits is fitted on the validation rows (the
        ones early stopping watches, never the holdout the evaluation judges on) to minimise their
        log loss, and is recorded with the model, which predicts with it. A network trained to a
        low loss is often over-confident, which costs log loss and calibration error against the
        baselines. ``binary`` keeps its ranking (AUC) and ``multiclass`` its most probable class;
        ``ordinal`` scales its K-1 conditional logits alike, which may move a row's median class.
        ``regression``: ignored.""",
    )
    validation_fraction: float = setting(
        0.1,
        doc="""Share of the training set held back for the per-epoch validation loss (early
        stopping, the best epoch, the temperature): of its days (``validation_split: days``, at
        least one) or of its rows.""",
        above=0,
        below=0.5,
    )
    validation_split: str = setting(
        "rows",
        doc="""How the validation rows are chosen. ``rows``: rows drawn at random from every
        training day. ``days``: every row of a seeded share of the training days (at least one;
        a set of one day falls back to ``rows``), so the validation loss, early stopping and the
        temperature are judged on days the model did not fit, as the holdout is: for rows that
        come in clusters (incidents, sessions, a day's weather), whose random validation rows
        share their cluster with fitting rows and flatter the model. On the shipped binary example
        it did not beat ``rows`` over 20 holdout days (docs/benchmarks.md). Recorded in
        ``train.json`` (``validation``) and as tags of the MLflow run.""",
        choices=("rows", "days"),
    )
    min_steps_per_epoch: int = setting(
        100,
        doc="""Fewest batches in an epoch on each process: a training set of fewer batches is
        passed over again, shuffled anew, until the epoch has them (as Keras' ``steps_per_epoch``
        on a repeated dataset), so a set of a few thousand rows gets as many optimizer steps as
        a large one needs, while early stopping, the checkpoints and the schedule still count
        epochs. 0: an epoch is one pass.""",
        minimum=0,
    )
    shuffle_buffer: int = setting(
        65_536,
        doc="""Rows mixed by each process's seeded shuffle buffer.""",
        minimum=1,
    )
    prefetch: int = setting(
        2,
        doc="""Shuffle buffers converted and shuffled ahead of the training loop, ready to
        slice.""",
        minimum=0,
        runtime=True,
    )
    data_workers: int = setting(
        2,
        doc="""Threads converting and shuffling buffers in parallel (pyarrow, numpy and torch
        release the GIL); more than the spare cores only adds contention.""",
        minimum=1,
        runtime=True,
    )
    checkpoint_every: int = setting(
        200,
        doc="""Optimizer steps between checkpoints (one is also written at each epoch end); 0: epoch
        ends only.""",
        minimum=0,
    )
    keep_checkpoints: int = setting(
        3,
        doc="""Newest checkpoints kept.""",
        minimum=1,
        runtime=True,
    )
    log_every: int = setting(
        50,
        doc="""Optimizer steps between the training-loss points sent to MLflow
        (``train_loss_step``).""",
        minimum=1,
        runtime=True,
    )
    log_every_s: float = setting(
        10.0,
        doc="""Seconds between the live figures of a running training: rank 0 logs progress, ETA and
        throughput as one line of the task log and sends the latest step's loss, learning rate,
        samples/s, step time and data wait to MLflow (``live/...``), in the background.""",
        above=0,
        runtime=True,
    )
    system_metrics_s: float = setting(
        5.0,
        doc="""Seconds between samples of MLflow's system metrics (CPU, memory, disk, network; GPU
        through NVML), by the first process of each node; 0: none.""",
        minimum=0,
        runtime=True,
    )
    stall_timeout_s: float = setting(
        300.0,
        doc="""Seconds without a finished optimizer step after which a rank counts as stalled: its
        threads' stacks go to the log and ``<run>/stalls/`` in the lake, the MLflow run ends as
        failed and the process exits transient (75), so the retry resumes from the last checkpoint.
        0: no watchdog. Keep it well above the slowest step.""",
        minimum=0,
        runtime=True,
    )
    stall_allowance_s: float = setting(
        1800.0,
        doc="""The same limit for the first step of a (re)start or an epoch and for an epoch's
        validation and checkpoint, which take longer than a step.""",
        minimum=0,
        runtime=True,
    )
    seed: int = setting(
        13,
        doc="""Seed for weights, data order and dropout; the same seed gives the same model on
        CPU.""",
    )
    nproc_per_node: int = setting(
        1,
        doc="""torchrun processes per node.""",
        minimum=1,
        maximum=64,
        runtime=True,
        form=FormEntry("Processes per node", "Training"),
    )
    max_restarts: int = setting(
        2,
        doc="""torchrun restarts of failed workers; workers resume from the last checkpoint.""",
        minimum=0,
        runtime=True,
    )
    device: Literal["auto", "cpu", "cuda"] = setting(
        "auto",
        doc="""``auto`` (CUDA when present), ``cpu`` or ``cuda``.""",
    )
    collective_timeout_s: int = setting(
        120,
        doc="""Seconds a collective (all-reduce, barrier) may wait for a peer before the process
        fails, so a dead rank ends the attempt quickly instead of hanging (PyTorch's default is
        10-30 min).""",
        minimum=1,
        runtime=True,
    )
    preemption_grace_s: float = setting(
        25.0,
        doc="""Seconds from SIGTERM (a preempted pod, a reclaimed spot node) within which the ranks
        stop at a step boundary and checkpoint before exiting for a retry; past it the process exits
        at once and the retry resumes from the last periodic checkpoint. Below torchrun's 30 s
        between forwarding SIGTERM and killing its workers, and the pod's termination grace.""",
        above=0,
        below=30,
        runtime=True,
    )
    strategy: Literal["ddp", "fsdp", "pipeline"] = setting(
        "ddp",
        doc="""How several processes share the training: ``ddp`` (each holds the whole model,
        gradients are averaged), ``fsdp`` (PyTorch's FSDP2 ``fully_shard``: parameters, gradients
        and optimizer state sharded over the processes, for models that do not fit one device) or
        ``pipeline`` (``torch.distributed.pipelining``: the model's layers cut into
        ``pipeline_stages`` consecutive stages, one per process, each batch's micro-batches
        flowing through them; a model that can be cut, such as ``ft_transformer``). Same
        checkpoints and resume on any number of processes either way.""",
    )
    pipeline_stages: int = setting(
        0,
        doc="""Stages of a ``pipeline`` training: the processes are cut into pipelines of this
        many, each process one stage, and the pipelines share the rows as ``ddp`` processes do;
        0: one pipeline over every process.""",
        minimum=0,
        runtime=True,
    )
    pipeline_microbatches: int = setting(
        4,
        doc="""Micro-batches each ``pipeline`` step's batch is cut into, so that the stages work
        at once on different ones; at least the stages for ``1f1b``.""",
        minimum=1,
        runtime=True,
    )
    pipeline_schedule: Literal["1f1b", "gpipe"] = setting(
        "1f1b",
        doc="""Order of a ``pipeline`` step's forwards and backwards: ``1f1b`` (one forward,
        one backward: at most as many micro-batches' activations held as stages) or ``gpipe``
        (every forward, then every backward).""",
        runtime=True,
    )
    params_from: Literal["settings", "tuning"] = setting(
        "settings",
        doc="""``settings``: train with the values above. ``tuning``: take the parameters of the
        best trial of the newest ``<domain.name>_tuning`` study (``tuning/best/<registered
        model>.json`` in the lake) over the values above; the run records which study and trial they
        came from.""",
    )

    def __post_init__(self) -> None:
        if self.precision == "fp16" and self.strategy in ("fsdp", "pipeline"):
            raise SettingsError(
                "train.precision: fp16 needs a loss scaler over every shard or stage, which "
                f"{self.strategy} does not have here; use bf16 (same range as float32, no scaler) "
                "or train.strategy: ddp"
            )
        if self.strategy == "pipeline" and self.batch_size % self.pipeline_microbatches:
            raise SettingsError(
                f"train.batch_size ({self.batch_size}) must be a multiple of "
                f"train.pipeline_microbatches ({self.pipeline_microbatches}): a pipeline cuts "
                "each batch into micro-batches of equal size"
            )
        if self.pipeline_schedule == "1f1b" and self.pipeline_stages > self.pipeline_microbatches:
            raise SettingsError(
                f"train.pipeline_schedule: 1f1b needs at least as many micro-batches as stages: "
                f"train.pipeline_microbatches is {self.pipeline_microbatches}, "
                f"train.pipeline_stages {self.pipeline_stages}"
            )
        try:
            values = resolve_model(self.model).values(self.hyperparameters)
        except ModelError as exc:
            raise SettingsError(str(exc)) from exc
        object.__setattr__(self, "hyperparameters", values)
        check_declared(self, "train", SettingsError)
        if self.stall_timeout_s and self.stall_timeout_s < 10:
            raise SettingsError(
                f"train.stall_timeout_s must be 0 (no watchdog) or at least 10 seconds, got "
                f"{self.stall_timeout_s}: a step on a loaded machine can take seconds"
            )
        if self.stall_allowance_s < self.stall_timeout_s:
            raise SettingsError(
                f"train.stall_allowance_s ({self.stall_allowance_s}) must be at least "
                f"train.stall_timeout_s ({self.stall_timeout_s})"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class TuningSettings:
    storage: str = setting(
        "",
        doc="""Optuna RDB storage URL; default ``sqlite:///$TRAINYARD_HOME/optuna.db``. PostgreSQL
        in production (``postgresql+psycopg2://user@host/optuna``).""",
    )
    experiment: str = setting(
        "",
        doc="""MLflow experiment holding one parent run per study and a child run per trial; empty:
        ``<domain.name>_tuning``.""",
    )
    search_space: str = setting(
        "tuning.yaml",
        doc="""YAML file of the search space: which train settings a trial draws, and from what.""",
        form=FormEntry("Search space file", "Study", form="tuning"),
        path=True,
    )
    sampler: Literal["tpe", "random", "grid", "gp"] = setting(
        "tpe",
        doc="""``tpe`` (multivariate, constant liar for parallel trials), ``random``, ``grid``
        (every parameter needs ``choices`` or ``grid`` in the space) or ``gp`` (Gaussian
        process).""",
        form=FormEntry("Sampler", "Study", form="tuning"),
    )
    pruner: Literal["none", "median", "hyperband"] = setting(
        "median",
        doc="""Stops unpromising trials from their per-epoch validation loss: ``median`` (worse than
        the median of earlier trials at the same epoch), ``hyperband`` or ``none``. On the shipped
        example's data the median rule saved as many epochs as Hyperband without its bracket-draw
        misses (docs/benchmarks.md).""",
        form=FormEntry("Pruner", "Study", form="tuning"),
    )
    trials: int = setting(
        20,
        doc="""Finished trials (complete or pruned) the study should hold: a run adds only the
        missing ones, so a study stopped midway and run again continues where it stopped.""",
        minimum=1,
        maximum=1000,
        form=FormEntry("Trials", "Study", form="tuning"),
    )
    parallel_trials: int = setting(
        2,
        doc="""Trials of one tuning run training at the same time (at most
        ``max_parallel_trials``).""",
        minimum=1,
        form=FormEntry("Parallel trials", "Study", form="tuning"),
    )
    max_parallel_trials: int = setting(
        4,
        doc="""Upper bound of ``parallel_trials``: the trial task's ``max_active_tis_per_dagrun``,
        fixed when the DAG is parsed.""",
        minimum=1,
    )
    time_budget_s: int = setting(
        0,
        doc="""No trial starts later than this many seconds after the study's run began (running
        trials finish); 0: no budget.""",
        minimum=0,
        form=FormEntry("Time budget (s)", "Study", form="tuning"),
    )
    min_epochs: int = setting(
        1,
        doc="""Epochs every trial trains before a pruner may stop it.""",
        minimum=1,
    )
    startup_trials: int = setting(
        5,
        doc="""Trials before TPE models the results and before the median pruner prunes.""",
        minimum=0,
    )
    seed: int = setting(
        0,
        doc="""Seed of the sampler: the same seed and results give the same proposals.""",
        minimum=0,
    )
    heartbeat_s: int = setting(
        30,
        doc="""Seconds between a running trial's heartbeats in the study storage.""",
        minimum=1,
    )
    stale_after_s: int = setting(
        1800,
        doc="""A running trial without a heartbeat for this long is failed (its process died and no
        retry took it up); longer than ``orchestration.max_retry_delay_s``.""",
        minimum=1,
    )
    schedule: str = setting(
        "",
        doc="""Cron of a scheduled tuning (``0 3 1 * *``: monthly); empty: only manual runs.""",
    )

    def __post_init__(self) -> None:
        check_declared(self, "tuning", SettingsError)
        if self.parallel_trials > self.max_parallel_trials:
            raise SettingsError(
                f"tuning.parallel_trials ({self.parallel_trials}) must not exceed "
                f"tuning.max_parallel_trials ({self.max_parallel_trials})"
            )
        if self.stale_after_s <= self.heartbeat_s:
            raise SettingsError(
                f"tuning.stale_after_s ({self.stale_after_s}) must be above "
                f"tuning.heartbeat_s ({self.heartbeat_s})"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class EvaluateSettings:
    holdout_days: int = setting(
        1,
        doc="""Last days of the features window (ending at D) that form the holdout; the days before
        them are the training set. More days give the gate more rows to decide on.""",
        minimum=1,
    )
    confidence: float = setting(
        0.95,
        doc="""Confidence of each one-sided bound of the paired-bootstrap intervals: the gate's "not
        worse beyond the margin" and "better" hold with this confidence; the printed interval (both
        bounds) is two-sided at ``2 * confidence - 1``.""",
        above=0.5,
        below=1,
    )
    resamples: int = setting(
        1000,
        doc="""Bootstrap resamples of the holdout behind every interval (stratified by class for the
        classification tasks, of rows for ``regression``).""",
        minimum=100,
    )
    seed: int = setting(
        2013,
        doc="""Seed of the resamples: the same holdout, predictions and seed give the same
        intervals.""",
    )
    slices: tuple[str, ...] = setting(
        (),
        doc="""Holdout columns to slice by besides the domain's (``Domain.slice_columns``, e.g. a
        carrier and a band of the hour); each value of each column is a slice.""",
    )
    logistic_baseline: bool = setting(
        True,
        doc="""Also fit a linear model on the training set's features as a reference (seconds on a
        month of the example's rows): a logistic regression (``binary``), a multinomial logistic
        regression (``multiclass`` and ``ordinal``) or a ridge regression (``regression``). The
        trivial model (the training window's positive rate, class prior or mean label) is always
        scored.""",
    )
    baseline_rows: int = setting(
        100_000,
        doc="""Training rows the linear baseline is fitted on: a seeded uniform sample (``seed``)
        when the training set has more, every row when it has no more. The step reads the set one
        batch at a time, so its memory stays flat as the window grows; the trivial model still sees
        every row's label.""",
        minimum=100,
    )
    report: bool = setting(
        True,
        doc="""Write the HTML evaluation report (``reports/evaluation/``) and log it to the
        challenger's MLflow run: ROC, precision-recall and calibration curves (``binary``), the
        confusion matrix (``multiclass``), residuals and predicted against actual values
        (``regression``).""",
    )

    def __post_init__(self) -> None:
        check_declared(self, "evaluate", SettingsError)


GATE_METRICS = (
    "auc",
    "log_loss",
    "brier",
    "accuracy",
    "macro_f1",
    "rmse",
    "mae",
    "r2",
    "class_mae",
    "qwk",
)
"""Metrics the gate can hold a challenger to (``gate.primary_metrics``), each with its margin;
a task allows those among its metrics (:data:`pipeline_steps.core.tasks.SPECS`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GateSettings:
    min_auc: float = setting(
        0.6,
        doc="""``binary``: absolute AUC floor a challenger must reach when there is no champion yet
        (the other tasks' floor is beating the trivial model).""",
        minimum=0,
        maximum=1,
    )
    primary_metrics: tuple[str, ...] = setting(
        (),
        doc="""Metrics on which the challenger must not be worse than the champion beyond their
        margin; empty: the task's (``binary``: ``auc``, ``log_loss``; ``multiclass``: ``log_loss``,
        ``macro_f1``; ``regression``: ``rmse``, ``mae``; ``ordinal``: ``class_mae``, ``qwk``).
        Each must be a metric of the domain's task: ``binary`` of ``auc``, ``log_loss``,
        ``brier``, ``accuracy``; ``multiclass`` of ``log_loss``, ``accuracy``, ``macro_f1``;
        ``regression`` of ``rmse``, ``mae``, ``r2``; ``ordinal`` of ``class_mae``, ``qwk``,
        ``accuracy``, ``log_loss``.""",
        choices=GATE_METRICS,
    )
    max_auc_drop: float = setting(
        0.01,
        doc="""Non-inferiority margin of AUC: the challenger is promoted only if, with
        ``evaluate.confidence``, its AUC is not lower than the champion's by more than this.""",
        minimum=0,
    )
    max_log_loss_rise: float = setting(
        0.01,
        doc="""Non-inferiority margin of log loss: with ``evaluate.confidence``, the challenger's
        holdout log loss is not higher than the champion's by more than this.""",
        minimum=0,
    )
    max_brier_rise: float = setting(
        0.005,
        doc="""Non-inferiority margin of the Brier score (when ``brier`` is a primary metric).""",
        minimum=0,
    )
    max_accuracy_drop: float = setting(
        0.01,
        doc="""Non-inferiority margin of accuracy (when ``accuracy`` is a primary metric).""",
        minimum=0,
    )
    max_macro_f1_drop: float = setting(
        0.01,
        doc="""``multiclass``: non-inferiority margin of macro-F1.""",
        minimum=0,
    )
    max_rmse_rise: float = setting(
        0.02,
        doc="""``regression``: non-inferiority margin of RMSE as a fraction of the champion's
        RMSE (the label's units vary by domain): 0.02 lets the challenger's RMSE be at most 2 %
        higher.""",
        minimum=0,
    )
    max_mae_rise: float = setting(
        0.02,
        doc="""``regression``: non-inferiority margin of MAE as a fraction of the champion's
        MAE.""",
        minimum=0,
    )
    max_r2_drop: float = setting(
        0.01,
        doc="""``regression``: non-inferiority margin of R² (when ``r2`` is a primary metric).""",
        minimum=0,
    )
    max_class_mae_rise: float = setting(
        0.02,
        doc="""``ordinal``: non-inferiority margin of the mean absolute class error, in classes.""",
        minimum=0,
    )
    max_qwk_drop: float = setting(
        0.01,
        doc="""``ordinal``: non-inferiority margin of the quadratic weighted kappa.""",
        minimum=0,
    )
    baselines_must_beat: tuple[str, ...] = setting(
        ("linear",),
        doc="""Baselines the challenger must not lose to: it is refused when, on a primary metric,
        it is worse than the baseline beyond that metric's margin (``max_log_loss_rise``, ...;
        RMSE's and MAE's as a fraction of the baseline's) with ``evaluate.confidence``, the whole
        interval beyond it (against the champion it must instead show it is not worse).
        ``linear``: the linear baseline on the same features (the task's: a logistic regression,
        or a ridge regression for ``regression``; needs
        ``evaluate.logistic_baseline``); ``trivial``: the trivial model. A baseline the evaluation
        did not score is not held to, and the reasons say so. Empty: only the champion and beating
        the trivial model gate the challenger. A network that a linear model on the same features
        matches is not worth its cost; how often the shipped one is held back on ordinary days is
        in docs/benchmarks.md.""",
        choices=("linear", "trivial"),
    )
    require_improvement: bool = setting(
        False,
        doc="""Also require the challenger to be better than the champion, with
        ``evaluate.confidence``, on at least one primary metric.""",
    )
    min_positives: int = setting(
        50,
        doc="""``binary``: fewest positive holdout rows the gate decides on; with fewer the
        decision is ``undecided`` and the champion stays (bootstrap intervals of AUC are
        unreliable below a few dozen events; 8 days of the shipped example have fewer than 50 late
        rows).""",
        minimum=1,
    )
    suspect_auc: float = setting(
        0.995,
        doc="""``binary``: a challenger (or a baseline) with an AUC of at least this on the holdout
        is near perfect, which usually means a leak (a column, or a combination of columns, that
        gives the label away): it is refused unless ``easy_task_reason`` says why the task is
        this easy.""",
        minimum=0,
        maximum=1,
    )
    suspect_accuracy: float = setting(
        0.99,
        doc="""``multiclass`` and ``ordinal``: the accuracy on the holdout from which a challenger
        (or a baseline) is near perfect (see ``suspect_auc``).""",
        minimum=0,
        maximum=1,
    )
    suspect_r2: float = setting(
        0.995,
        doc="""``regression``: the R² on the holdout from which a challenger (or a baseline) is
        near perfect (see ``suspect_auc``).""",
        maximum=1,
    )
    easy_task_reason: str = setting(
        "",
        doc="""Why a near-perfect score is genuine (the task is this easy): with a reason, a
        near-perfect challenger is judged as any other and the reason is recorded in its
        decision on the model version; empty: it is refused.""",
    )
    min_rows: int = setting(
        200,
        doc="""``multiclass`` and ``regression``: fewest holdout rows the gate decides on; with
        fewer the decision is ``undecided`` and the champion stays.""",
        minimum=1,
    )
    min_class_rows: int = setting(
        20,
        doc="""Classes with at least this many holdout rows are judged: a metric averaged over
        classes (``multiclass`` macro-F1) averages over them alone, and the decision names the
        classes it could not judge. Two rows of a 1 % class decide nothing; ``init-domain``
        sizes the holdout so the rarest class it can judge has this many.""",
        minimum=1,
    )
    min_slice_rows: int = setting(
        200,
        doc="""Slices with at least this many holdout rows (and, for ``binary``, both classes) are
        held to the slice margin of the task's slice metric.""",
        minimum=1,
    )
    max_slice_auc_drop: float = setting(
        0.03,
        doc="""``binary``: a challenger whose AUC on a slice is lower than the champion's by more
        than this, with ``evaluate.confidence``, is refused; its reason names the slice.""",
        minimum=0,
    )
    max_slice_accuracy_drop: float = setting(
        0.03,
        doc="""``multiclass``: the same for accuracy on a slice.""",
        minimum=0,
    )
    max_slice_rmse_rise: float = setting(
        0.1,
        doc="""``regression``: the same for RMSE on a slice, as a fraction of the champion's RMSE on
        that slice (where the champion errs more, the margin is wider): 0.1 lets the challenger's
        RMSE on a slice be at most 10 % above the champion's there.""",
        minimum=0,
    )
    max_slice_class_mae_rise: float = setting(
        0.1,
        doc="""``ordinal``: the same for the mean absolute class error on a slice, in classes.""",
        minimum=0,
    )

    def __post_init__(self) -> None:
        check_declared(self, "gate", SettingsError)

    def metrics_for(self, task: str) -> tuple[str, ...]:
        """The primary metrics for a ``task``: ``primary_metrics``, else the task's gate
        metrics. ``SettingsError`` naming the setting and the task's metrics when one is not a
        metric of the task."""
        spec = task_spec(task)
        if not self.primary_metrics:
            return spec.gate_metrics
        allowed = [m for m in spec.metrics if m in GATE_METRICS]
        foreign = [m for m in self.primary_metrics if m not in allowed]
        if foreign:
            raise SettingsError(
                f"gate.primary_metrics names {', '.join(foreign)}, not a metric of the {task} "
                f"task; its metrics: {', '.join(allowed)} (or leave it empty for "
                f"{', '.join(spec.gate_metrics)})"
            )
        return self.primary_metrics

    def baselines_for(self, task: str) -> tuple[str, ...]:
        """The names (``ScoredBaseline.name``) of the baselines ``baselines_must_beat`` holds a
        ``task``'s challenger to: ``linear`` is the task's ``linear_baseline``."""
        spec = task_spec(task)
        names = (
            spec.linear_baseline if kind == "linear" else kind for kind in self.baselines_must_beat
        )
        return tuple(dict.fromkeys(names))

    def margin(self, metric: str) -> float:
        """How much worse than the champion the challenger may be on ``metric``: in the
        metric's units, for ``rmse`` and ``mae`` as a fraction of the champion's value."""
        margins = {
            "auc": self.max_auc_drop,
            "log_loss": self.max_log_loss_rise,
            "brier": self.max_brier_rise,
            "accuracy": self.max_accuracy_drop,
            "macro_f1": self.max_macro_f1_drop,
            "rmse": self.max_rmse_rise,
            "mae": self.max_mae_rise,
            "r2": self.max_r2_drop,
            "class_mae": self.max_class_mae_rise,
            "qwk": self.max_qwk_drop,
        }
        return margins[metric]

    def slice_margin(self, metric: str) -> float:
        """How much worse than the champion the challenger may be on a slice's ``metric`` (a
        task's slice metric); for ``rmse`` as a fraction of the champion's RMSE on the slice."""
        return {
            "auc": self.max_slice_auc_drop,
            "accuracy": self.max_slice_accuracy_drop,
            "rmse": self.max_slice_rmse_rise,
            "class_mae": self.max_slice_class_mae_rise,
        }[metric]


@dataclass(frozen=True, kw_only=True, slots=True)
class PromotionSettings:
    """What a run does after the gate; set per run from the trigger form, rarely in a file."""

    skip: bool = setting(
        False,
        doc="""Register and evaluate the challenger but leave the champion alias where it is.""",
        form=FormEntry("Skip promotion", "Promotion", param="skip_promotion"),
    )
    force: bool = setting(
        False,
        doc="""Move the champion alias to the challenger whatever the gate says (needs ``reason``);
        the reason and the triggering user are recorded as model-version tags.""",
        form=FormEntry("Force promotion", "Promotion", param="force_promotion"),
    )
    reason: str = setting(
        "",
        doc="""Why a promotion is forced (required with ``force``).""",
        max_length=500,
        form=FormEntry("Reason for forcing", "Promotion", param="force_reason"),
    )
    lock: str = setting(
        "",
        doc="""What serialises promotions (the registry has no compare-and-set): a folder for file
        locks across the processes of one machine (default ``$TRAINYARD_HOME/locks``), or a
        ``postgresql+psycopg2://user@host/db`` URL for an advisory lock across machines (the
        production profile). One promotion of a registered model at a time, from reading the
        champion to moving the alias.""",
    )

    def __post_init__(self) -> None:
        check_declared(self, "promotion", SettingsError)
        if self.skip and self.force:
            raise SettingsError("promotion.skip and promotion.force cannot both be true")
        if self.force and not self.reason.strip():
            raise SettingsError(
                "promotion.force=true needs promotion.reason: say why the gate is overridden"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class ReleaseSettings:
    """How a challenger that passed the gate becomes the champion, and when the champion goes
    back (docs/champion.md)."""

    mode: Literal["direct", "staged"] = setting(
        "staged",
        doc="""``direct``: the gate's pass moves ``champion`` at once. ``staged``: it moves the
        ``mlflow.staging_alias``; the drift monitor scores the staged model beside the champion on
        each new day, and the release decides on the pooled shadow days. A first model (no champion
        yet) becomes the champion directly: there is nothing to shadow.""",
    )
    shadow_days: int = setting(
        3,
        doc="""Monitored days (with labels) the staged model is scored on beside the champion before
        the release decides; the gate's margins and ``evaluate.confidence`` apply to the pooled
        days.""",
        minimum=1,
    )
    max_shadow_days: int = setting(
        10,
        doc="""Shadow days after which a release still undecided retires the candidate (or, with
        ``approval: undecided``, asks a person).""",
        minimum=1,
    )
    approval: Literal["never", "undecided", "always"] = setting(
        "never",
        doc="""When the release waits for a person's Approve/Reject in the Airflow UI
        (human-in-the-loop task ``approve_release`` of the monitor DAG): ``never``; ``undecided``,
        when the pooled days could not decide by ``max_shadow_days``; ``always``, before every
        release.""",
    )
    approval_timeout_h: float = setting(
        24.0,
        doc="""Hours the approval waits; with no answer the champion stays and the candidate stays
        staged (asked again on the next monitored day).""",
        above=0,
    )
    rollback_days: int = setting(
        3,
        doc="""Consecutive monitored days on which the champion must be worse than the version it
        replaced, on the same rows, beyond ``rollback_margin`` with ``evaluate.confidence``, before
        the monitor rolls it back to that version and asks for retraining; 0 turns automatic
        rollback off. A first champion (none replaced) is never rolled back.""",
        minimum=0,
    )
    rollback_metric: str = setting(
        "",
        doc="""Metric the rollback watches; empty: the task's first gate metric (``binary``:
        ``auc``, ``multiclass``: ``log_loss``, ``regression``: ``rmse``).""",
        choices=("", *GATE_METRICS),
    )
    rollback_margin: float = setting(
        0.02,
        doc="""A day is degraded when the paired interval of champion minus replaced version lies
        entirely worse than this (in the metric's units; for ``rmse`` and ``mae`` a fraction of the
        replaced version's value). Calibrated on 2013 (docs/rollback_2013.md).""",
        minimum=0,
    )

    def __post_init__(self) -> None:
        check_declared(self, "release", SettingsError)
        if self.max_shadow_days < self.shadow_days:
            raise SettingsError(
                f"release.max_shadow_days ({self.max_shadow_days}) must be at least "
                f"release.shadow_days ({self.shadow_days})"
            )

    def metric_for(self, task: str) -> str:
        """The metric the rollback watches for ``task``; ``SettingsError`` when
        ``rollback_metric`` is not one of the task's."""
        spec = task_spec(task)
        if not self.rollback_metric:
            return spec.gate_metrics[0]
        if self.rollback_metric not in spec.metrics:
            raise SettingsError(
                f"release.rollback_metric {self.rollback_metric!r} is not a metric of the "
                f"{task} task; its metrics: {', '.join(spec.metrics)}"
            )
        return self.rollback_metric


@dataclass(frozen=True, kw_only=True, slots=True)
class CostSettings:
    """Rates that turn what a run's step processes used into a cost estimate. The defaults are
    examples of the order of on-demand cloud list prices: replace them with your own."""

    cpu_core_hour: float = setting(
        0.04,
        doc="""Price of one CPU core for an hour (user + system CPU time is what counts).""",
        minimum=0,
    )
    gpu_hour: float = setting(
        3.0,
        doc="""Price of one GPU for an hour (wall time of each process that used CUDA, per
        device).""",
        minimum=0,
    )
    memory_gib_hour: float = setting(
        0.005,
        doc="""Price of one GiB of memory for an hour (a process's peak RSS over its wall time).""",
        minimum=0,
    )
    currency: str = setting(
        "USD",
        doc="""Currency of the rates, shown beside every cost.""",
    )

    def __post_init__(self) -> None:
        check_declared(self, "cost", SettingsError)
        if not self.currency.strip():
            raise SettingsError("cost.currency must not be empty (e.g. USD)")


@dataclass(frozen=True, kw_only=True, slots=True)
class KubernetesSettings:
    namespace: str = setting(
        "trainyard",
        doc="""Namespace the step pods run in.""",
    )
    image: str = setting(
        "ghcr.io/trainyard/trainyard-step:0.1.0",
        doc="""Step image built from ``containers/Dockerfile``.""",
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = setting(
        "IfNotPresent",
        doc="""Kubernetes image pull policy.""",
    )
    service_account: str = setting(
        "trainyard-step",
        doc="""Service account of the step pods.""",
    )
    cpu_request: str = setting(
        "1",
        doc="""CPU request of a step pod.""",
    )
    memory_request: str = setting(
        "2Gi",
        doc="""Memory request of a step pod.""",
    )
    cpu_limit: str = setting(
        "4",
        doc="""CPU limit of a step pod.""",
    )
    memory_limit: str = setting(
        "8Gi",
        doc="""Memory limit of a step pod.""",
    )
    train_memory_limit: str = setting(
        "",
        doc="""Memory limit of each training pod (one per node); empty: ``memory_limit``. A job may
        ask for its own (the trigger form, ``trainyard submit --set memory_per_node=32Gi``).""",
        form=FormEntry("Memory per node (Kubernetes)", "Resources", param="memory_per_node"),
    )
    train_gpus: int = setting(
        0,
        doc="""GPUs per training node (``nvidia.com/gpu``); torchrun starts one process per GPU. A
        job may ask for another number when this is above 0 (the training pods go to GPU
        nodes); the train task takes that many slots of ``orchestration.gpu_pool`` per node.""",
        minimum=0,
        form=FormEntry("GPUs per node (Kubernetes)", "Resources", param="gpus_per_node"),
    )
    train_nodes: int = setting(
        1,
        doc="""Training nodes. One: a pod running torchrun. More: an Indexed Job of that many pods
        with a headless Service for torchrun's c10d rendezvous at pod 0, created and removed around
        it. A job of a domain training on several nodes may ask for another number of at least 2
        (at least ``train_min_nodes`` for an elastic one); one training on one node stays on
        one.""",
        minimum=1,
        form=FormEntry("Nodes (Kubernetes)", "Resources", param="nodes"),
    )
    train_min_nodes: int = setting(
        0,
        doc="""Fewest training nodes of an elastic Job; 0: ``train_nodes`` (a fixed size). Between 1
        and ``train_nodes - 1``: torchrun ``--nnodes=MIN:MAX`` with its rendezvous in a store of its
        own (a Deployment off the spot nodes), so training goes on while any node is lost and takes
        a returning one back (docs/deployment.md, "Spot nodes and elastic training").""",
        minimum=0,
    )
    rendezvous_port: int = setting(
        29500,
        doc="""Port of the c10d rendezvous store: on pod 0 of a multi-node training Job, or in the
        rendezvous store of an elastic one.""",
        minimum=1,
        maximum=65_535,
    )
    node_selector: dict[str, str] = setting(
        default_factory=dict,
        doc="""Node selector of the training pod.""",
    )
    tolerations: tuple[dict[str, str], ...] = setting(
        (),
        doc="""Tolerations of the training pod, as Kubernetes toleration objects.""",
    )
    spot_node_selector: dict[str, str] = setting(
        default_factory=dict,
        doc="""Labels of the spot (preemptible) nodes the training pods may run on, added to
        ``node_selector`` (``{cloud.google.com/gke-spot: "true"}``,
        ``{eks.amazonaws.com/capacityType: SPOT}``); the rendezvous store of an elastic Job is kept
        off the nodes carrying them.""",
    )
    spot_tolerations: tuple[dict[str, str], ...] = setting(
        (),
        doc="""Tolerations of the spot nodes' taints, added to the training pods' ``tolerations``
        (``[{key: cloud.google.com/gke-spot, operator: Equal, value: "true", effect:
        NoSchedule}]``).""",
    )
    termination_grace_s: int = setting(
        60,
        doc="""``terminationGracePeriodSeconds`` of the training pods: time from SIGTERM to SIGKILL,
        in which the training checkpoints; must exceed ``train.preemption_grace_s``.""",
        minimum=1,
    )
    queue_name: str = setting(
        "",
        doc="""Kueue LocalQueue of this team: the ``kueue.x-k8s.io/queue-name`` label on every step
        pod and training Job, so Kueue admits them within the team's quota. Empty: ``domain.team``
        (a LocalQueue named after the team), else no label.""",
    )
    priority_classes: dict[str, str] = setting(
        default_factory=dict,
        doc="""Kueue WorkloadPriorityClasses by the lowest job priority each takes, e.g. ``{high:
        "50", normal: "1"}``: each step pod and training Job of a training run is labelled
        ``kueue.x-k8s.io/priority-class`` with the class of its job's priority (the form's
        Priority, ``trainyard submit --priority``; ``orchestration.train_priority`` for a run
        without one), so Kueue orders and preempts the team's workloads by it. The lowest floor
        is 1. Empty: no label (Kueue's default priority).""",
    )
    mlflow_secret: str = setting(
        "",
        doc="""Secret of the namespace whose keys ``MLFLOW_TRACKING_USERNAME`` and
        ``MLFLOW_TRACKING_PASSWORD`` every step pod, trial pod and training Job takes as environment
        (``envFrom``): the MLflow user the domain's steps write as. Empty:
        ``trainyard-mlflow-<team>`` for a domain with ``domain.team`` (its team's user,
        ``team-<team>``), else none (the pods carry no MLflow login of the domain's own).""",
    )
    lake_pvc: str = setting(
        "",
        doc="""PVC mounted at ``lake_mount_path`` when the lake is a volume; empty for object
        storage.""",
    )
    lake_mount_path: str = setting(
        "/lake",
        doc="""Mount path of the lake volume inside the pod.""",
    )

    def __post_init__(self) -> None:
        check_declared(self, "kubernetes", SettingsError)
        for key in ("cpu_request", "cpu_limit", "memory_request", "memory_limit"):
            _check_quantity(f"kubernetes.{key}", getattr(self, key))
        if self.train_memory_limit:
            _check_quantity("kubernetes.train_memory_limit", self.train_memory_limit)
        if self.train_min_nodes > self.train_nodes:
            raise SettingsError(
                f"kubernetes.train_min_nodes must be from 1 to kubernetes.train_nodes "
                f"({self.train_nodes}), or 0 for a fixed size; got {self.train_min_nodes}"
            )
        if self.mlflow_secret and not _SECRET_NAME.fullmatch(self.mlflow_secret):
            raise SettingsError(
                "kubernetes.mlflow_secret must be a Kubernetes Secret name (at most 253 "
                "lowercase letters, digits, '-' or '.', starting and ending alphanumeric), got "
                f"{self.mlflow_secret!r}"
            )
        if self.queue_name and not _LABEL_VALUE.fullmatch(self.queue_name):
            raise SettingsError(
                f"kubernetes.queue_name must be a Kubernetes label value (at most 63 letters, "
                f"digits, '-', '_' or '.', starting and ending alphanumeric), got "
                f"{self.queue_name!r}"
            )
        for name, lowest in self.priority_classes.items():
            if not _LABEL_VALUE.fullmatch(name) or not lowest.isdigit() or int(lowest) < 1:
                raise SettingsError(
                    f"kubernetes.priority_classes: {name!r}: {lowest!r} must map a Kueue "
                    "WorkloadPriorityClass name to the lowest job priority it takes (a whole "
                    'number of at least 1), e.g. {high: "50", normal: "1"}'
                )
        if self.priority_classes and min(int(v) for v in self.priority_classes.values()) != 1:
            raise SettingsError(
                "kubernetes.priority_classes must give every priority a class: the lowest "
                f"floor must be 1, got {self.priority_classes}"
            )

    @property
    def priority_class_floors(self) -> list[tuple[int, str]]:
        """``(lowest priority, class)`` of ``priority_classes``, the highest first."""
        return sorted(((int(v), k) for k, v in self.priority_classes.items()), reverse=True)

    @property
    def min_nodes(self) -> int:
        """The fewest training nodes (``train_min_nodes``, or ``train_nodes`` when 0)."""
        return self.train_min_nodes or self.train_nodes

    @property
    def elastic(self) -> bool:
        """Whether training runs on anywhere from ``min_nodes`` to ``train_nodes`` nodes."""
        return self.min_nodes < self.train_nodes


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineSettings:
    name: Literal["local", "spark"] = setting(
        "local",
        doc="""What runs the data steps: ``local`` (DuckDB and Arrow in the step's own process) or
        ``spark`` (the step is the driver of a Spark application: validation through Great
        Expectations' Spark datasource, the point-in-time join through Feast's Spark offline store;
        ``pip install 'trainyard[spark]'``).""",
    )
    spark_master: str = setting(
        "local[*]",
        doc="""Spark master URL: ``local[*]``, ``spark://host:7077`` (a standalone cluster) or
        ``k8s://https://<api server>`` (Spark on Kubernetes).""",
    )
    spark_conf: dict[str, str] = setting(
        default_factory=dict,
        doc="""Further Spark properties (``spark.executor.memory``,
        ``spark.kubernetes.container.image``, ...), over trainyard's own (UTC session time zone,
        microsecond parquet timestamps).""",
    )
    spark_dir: str = setting(
        "",
        doc="""Where each step writes its entity rows, Feast offline sources and joined rows (empty:
        a temporary folder per step). On a cluster (any master but ``local``) an ``s3://`` folder:
        the executors share no disk with the step, and a local path is refused.""",
    )

    def __post_init__(self) -> None:
        check_declared(self, "engine", SettingsError)


@dataclass(frozen=True, kw_only=True, slots=True)
class MonitoringSettings:
    pushgateway_url: str = setting(
        "",
        doc="""The Prometheus Pushgateway the steps push their gauges to (``http://host:9091``): a
        training's progress and last step, a step failing for good, validation refusing days in a
        row, drift events, rollbacks; Prometheus scrapes it and evaluates
        ``containers/prometheus/alerts.yml``. Empty: nothing is pushed.""",
    )

    def __post_init__(self) -> None:
        check_declared(self, "monitoring", SettingsError)
        url = self.pushgateway_url
        if url and not url.startswith(("http://", "https://")):
            raise SettingsError(
                f"monitoring.pushgateway_url must be an http:// or https:// URL, got {url!r}"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    domain: DomainSettings = field(default_factory=DomainSettings)
    lake: LakeSettings = field(default_factory=LakeSettings)
    mlflow: MlflowSettings = field(default_factory=MlflowSettings)
    orchestration: OrchestrationSettings = field(default_factory=OrchestrationSettings)
    ingest: IngestSettings = field(default_factory=IngestSettings)
    validation: ValidationSettings = field(default_factory=ValidationSettings)
    drift: DriftSettings = field(default_factory=DriftSettings)
    features: FeatureSettings = field(default_factory=FeatureSettings)
    train: TrainSettings = field(default_factory=TrainSettings)
    tuning: TuningSettings = field(default_factory=TuningSettings)
    evaluate: EvaluateSettings = field(default_factory=EvaluateSettings)
    gate: GateSettings = field(default_factory=GateSettings)
    promotion: PromotionSettings = field(default_factory=PromotionSettings)
    release: ReleaseSettings = field(default_factory=ReleaseSettings)
    cost: CostSettings = field(default_factory=CostSettings)
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)
    monitoring: MonitoringSettings = field(default_factory=MonitoringSettings)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def lake_root(self) -> str:
        """The domain's own folder of the lake, ``<lake.root>/<domain.name>``: domains sharing a
        lake (one ``TRAINYARD_LAKE__ROOT`` for a deployment) never share a run folder or a
        dataset's partitions."""
        return f"{self.lake.root.rstrip('/')}/{self.domain.name}"

    def fingerprint(self) -> str:
        """sha256 of the canonical JSON form: equal settings give equal fingerprints."""
        return json_sha256(self.to_dict())

    def with_train(self, values: Mapping[str, Any]) -> Settings:
        """These settings with ``values`` (``{name: value}``) over the train section, checked
        as the loader checks them; ``SettingsError`` names the refused setting."""
        current = dataclasses.asdict(self.train)
        if values.get("model", self.train.model) != self.train.model:
            current["hyperparameters"] = {}  # another model: its own defaults
        merged = {**current, **values}
        return dataclasses.replace(self, train=build_section(TrainSettings, merged, "train"))


def coerce_setting(value: Any, annotation: Any, name: str) -> Any:
    """Convert a YAML/env value to the field's declared type, or raise naming the field."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        if value in args:
            return value
        choices = ", ".join(repr(a) for a in args)
        raise SettingsError(f"setting {name} must be one of {choices}, got {value!r}")
    if origin is dict and args[1] is TeamQuota:
        quotas = (yaml.safe_load(value) or {}) if isinstance(value, str) else value
        if not isinstance(quotas, dict):
            raise SettingsError(f"setting {name} expects a mapping of teams, got {value!r}")
        return team_quotas(quotas, name)
    try:
        if annotation is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
                return value.lower() in ("true", "1", "yes")
            raise TypeError
        if annotation is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise TypeError
            return int(value)
        if annotation is float:
            if isinstance(value, bool):
                raise TypeError
            return float(value)
        if annotation is str:
            if isinstance(value, dict | list):
                raise TypeError
            return str(value)
        if origin is tuple:
            if isinstance(value, str):
                value = yaml.safe_load(value)
            if not isinstance(value, list | tuple):
                raise TypeError
            item_type = args[0]
            return tuple(coerce_setting(v, item_type, f"{name}[]") for v in value)
        if origin is dict:
            if isinstance(value, str):
                value = yaml.safe_load(value) or {}
            if not isinstance(value, dict):
                raise TypeError
            return {str(k): str(v) for k, v in value.items()}
        if origin in (typing.Union, types.UnionType) or annotation is dict:
            return value
    except (TypeError, ValueError):
        pass
    else:
        return value
    raise SettingsError(f"setting {name} expects {annotation}, got {value!r}")


def team_quotas(value: Mapping[Any, Any], name: str) -> dict[str, TeamQuota]:
    """``{team: TeamQuota}`` from a mapping of each team to its limits; ``SettingsError``
    names the team or the limit refused."""
    quotas = {}
    for team, limits in value.items():
        where = f"{name}.{team}"
        if not _TEAM_NAME.fullmatch(str(team)):
            raise SettingsError(f"{where}: {team!r} is no team name (see domain.team)")
        if not isinstance(limits, Mapping):
            raise SettingsError(f"{where} expects a mapping of runs, gpus, nodes, queued")
        quota = build_section(TeamQuota, limits, where)
        check_declared(quota, where, SettingsError)
        quotas[str(team)] = quota
    return quotas


def build_section(cls: type, values: Mapping[str, Any], section: str) -> Any:
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    if cls is TrainSettings:
        return _build_train(values, known, hints)
    unknown = sorted(set(values) - known)
    _refuse_retired(section, unknown)
    if unknown:
        raise SettingsError(
            f"unknown setting(s) {', '.join(f'{section}.{k}' for k in unknown)}; "
            f"known in [{section}]: {', '.join(sorted(known))}"
        )
    kwargs = {k: coerce_setting(v, hints[k], f"{section}.{k}") for k, v in values.items()}
    return cls(**kwargs)


def _refuse_retired(section: str, keys: Iterable[str]) -> None:
    """``SettingsError`` naming the retired settings among ``keys`` of ``section`` and why."""
    retired = [f"{section}.{k}" for k in keys if f"{section}.{k}" in RETIRED_SETTINGS]
    if retired:
        why = "; ".join(dict.fromkeys(RETIRED_SETTINGS[k] for k in retired))
        raise SettingsError(f"retired setting(s) {', '.join(retired)}: {why}")


def _build_train(
    values: Mapping[str, Any], known: set[str], hints: Mapping[str, Any]
) -> TrainSettings:
    """The train section: its own settings, and ``train.<name>`` of the model's
    hyperparameters (also accepted as one ``hyperparameters`` mapping, as recorded)."""
    _refuse_retired("train", values)
    given = values.get("hyperparameters") or {}
    if not isinstance(given, Mapping):
        raise SettingsError(f"setting train.hyperparameters expects a mapping, got {given!r}")
    hyperparameters = {**given, **{k: v for k, v in values.items() if k not in known}}
    kwargs = {
        k: coerce_setting(v, hints[k], f"train.{k}")
        for k, v in values.items()
        if k in known and k != "hyperparameters"
    }
    model = kwargs.get("model", "mlp")
    try:
        spec = resolve_model(model)
    except ModelError as exc:
        raise SettingsError(str(exc)) from exc
    strangers = sorted(k for k in hyperparameters if spec.hyperparameter(k) is None)
    if strangers:
        declared = ", ".join(h.name for h in spec.hyperparameters) or "none"
        raise SettingsError(
            f"unknown setting(s) {', '.join(f'train.{k}' for k in strangers)}; known in "
            f"[train]: {', '.join(sorted(known - {'hyperparameters'}))}; hyperparameters of "
            f"model {model}: {declared}"
        )
    return TrainSettings(**kwargs, hyperparameters=hyperparameters)


def _forget_other_models(train: dict[str, Any], model: str, recorded: bool = False) -> None:
    """A layer that chooses another model (the trigger form, ``--set train.model=...``) drops
    what lower layers set for the previous model: hyperparameters the new one does not
    declare. Values the new model declares too (``dropout``) stay. ``recorded``: a recorded
    section of ``model`` itself, cleaned of the other models' values."""
    if train.get("model", "mlp") == model and not recorded:
        return
    try:
        spec = resolve_model(model)
    except ModelError:
        return  # refused with its reason when the section is built
    train.pop("hyperparameters", None)
    fields = {f.name for f in dataclasses.fields(TrainSettings)}
    for key in [k for k in train if k not in fields and spec.hyperparameter(k) is None]:
        del train[key]


def settings_environment(
    settings: Settings, baseline: Settings, *, paths: bool = True
) -> dict[str, str]:
    """``TRAINYARD_<SECTION>__<KEY>`` for every setting of ``settings`` that differs from
    ``baseline``, its value as :func:`env_value` writes it: what a process started elsewhere (a
    step's pod) needs in its environment to load the same settings. ``paths=False`` leaves out
    the settings declared ``path``: files on this machine, which a pod reads from the settings
    file its image holds."""
    env: dict[str, str] = {}
    base = baseline.to_dict()
    hints = typing.get_type_hints(Settings)
    for section, values in settings.to_dict().items():
        files = frozenset() if paths else path_settings(hints[section])
        for key, value in values.items():
            if key not in files and value != base[section].get(key):
                env[f"{ENV_PREFIX}{section.upper()}__{key.upper()}"] = env_value(value)
    return env


DEPLOYMENT_SETTINGS = frozenset(
    {
        "lake.root",
        "mlflow.tracking_uri",
        "mlflow.artifact_root",
        "tuning.storage",
        "promotion.lock",
    }
)
"""Where the deployment keeps its state: resolved per machine, never a domain's choice."""


def changed_settings(document: Mapping[str, Any]) -> dict[str, Any]:
    """``{section.key: value}`` of a settings document (``Settings.to_dict()``) for every
    setting that differs from the package defaults of a domain of the same name and team (so
    the names derived from them do not count), the deployment's paths and services left out:
    what its settings file, environment and ``--set`` values changed."""
    domain = document.get("domain", {})
    model = document.get("train", {}).get("model", "mlp")
    overrides = [f"domain.{k}={json.dumps(domain[k])}" for k in ("name", "team") if k in domain]
    # the same model's own hyperparameters are its defaults, not a change
    baseline = load_settings(overrides=[*overrides, f"train.model={model}"], environ={})
    defaults = json.loads(json.dumps(baseline.to_dict()))  # tuples as the document's lists
    changed: dict[str, Any] = {}
    for section, values in json.loads(json.dumps(document, default=str)).items():
        if not isinstance(values, Mapping):
            continue
        for key, value in values.items():
            name = f"{section}.{key}"
            default = defaults.get(section, {}).get(key)
            if name == "train.hyperparameters" and isinstance(value, Mapping):
                hyper = default if isinstance(default, Mapping) else {}
                changed |= {f"train.{k}": v for k, v in value.items() if hyper.get(k) != v}
            elif name not in DEPLOYMENT_SETTINGS and value != default:
                changed[name] = value
    return changed


def env_value(value: Any) -> str:
    """A setting's value as ``TRAINYARD_<SECTION>__<KEY>`` holds it: a string as it is where
    the loader reads it back unchanged (``/lake``), else JSON (``""``, ``"0123"``, ``[32, 16]``),
    which the loader reads as YAML."""
    if isinstance(value, str) and _parse_scalar(value) == value:
        return value
    return json.dumps(value, ensure_ascii=False)


def _env_overrides(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    overrides: dict[str, dict[str, Any]] = {}
    for key, raw in environ.items():
        if not key.startswith(ENV_PREFIX) or "__" not in key:
            continue
        section, _, name = key[len(ENV_PREFIX) :].partition("__")
        overrides.setdefault(section.lower(), {})[name.lower()] = _parse_scalar(raw)
    return overrides


def _parse_scalar(raw: str) -> Any:
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


def _set_overrides(pairs: list[str]) -> dict[str, dict[str, Any]]:
    overrides: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot or not name:
            raise SettingsError(f"--set expects section.key=value, got {pair!r}")
        overrides.setdefault(section, {})[name] = _parse_scalar(raw)
    return overrides


def _resolve_defaults(settings: Settings, environ: Mapping[str, str]) -> Settings:
    home = trainyard_home(environ)
    lake_root = settings.lake.root or str(home / "lake")
    if "://" not in lake_root:
        lake_root = str(Path(lake_root).expanduser().resolve())
    tracking = settings.mlflow.tracking_uri or f"sqlite:///{home / 'mlflow.db'}"
    # A tracking server decides where artifacts go; a local store keeps them beside it.
    local_store = tracking.startswith(("sqlite:", "file:")) or "://" not in tracking
    artifacts = settings.mlflow.artifact_root or (str(home / "mlartifacts") if local_store else "")
    storage = settings.tuning.storage or f"sqlite:///{home / 'optuna.db'}"
    lock = settings.promotion.lock or str(home / "locks")
    name, team = settings.domain.name, settings.domain.team
    mlflow = settings.mlflow
    orch = settings.orchestration
    return dataclasses.replace(
        settings,
        promotion=dataclasses.replace(settings.promotion, lock=lock),
        tuning=dataclasses.replace(
            settings.tuning,
            storage=storage,
            experiment=settings.tuning.experiment or f"{name}_tuning",
        ),
        lake=dataclasses.replace(settings.lake, root=lake_root),
        mlflow=dataclasses.replace(
            mlflow,
            tracking_uri=tracking,
            artifact_root=artifacts,
            experiment=mlflow.experiment or f"{name}_training",
            registered_model=mlflow.registered_model or name,
            monitoring_experiment=mlflow.monitoring_experiment or f"{name}_monitoring",
        ),
        orchestration=dataclasses.replace(
            orch,
            pool=orch.pool or (f"team-{team}" if team else ""),
            gpu_pool=f"gpu-{team}" if team and orch.gpu_pool == "gpu" else orch.gpu_pool,
        ),
        kubernetes=dataclasses.replace(
            settings.kubernetes,
            queue_name=settings.kubernetes.queue_name or team,
            mlflow_secret=settings.kubernetes.mlflow_secret or team_secret(team),
        ),
    )


def _relative(value: Any) -> bool:
    """Whether ``value`` is a relative local path (not empty, not a URL such as ``s3://...``)."""
    return (
        isinstance(value, str)
        and bool(value)
        and "://" not in value
        and not Path(value).expanduser().is_absolute()
    )


def _paths_from(folder: Path, document: dict[str, Any]) -> dict[str, Any]:
    """``document`` (a settings file's sections) with each relative path of a setting declared
    ``path`` read from ``folder``, the file's own; URLs (``s3://...``) and absolute paths stay."""
    hints = typing.get_type_hints(Settings)
    resolved: dict[str, Any] = {}
    for section, values in document.items():
        cls = hints.get(section)
        paths = path_settings(cls) if isinstance(cls, type) else frozenset()
        resolved[section] = {
            key: str(folder / value) if key in paths and _relative(value) else value
            for key, value in values.items()
        }
    return resolved


def _absolute_paths(settings: Settings) -> Settings:
    """``settings`` with every relative path left (a default, the environment's, ``--set``'s)
    read from the working directory: loaded settings hold absolute paths, so a run's recorded
    settings mean the same files wherever they are loaded again."""
    sections = {}
    for field_ in dataclasses.fields(settings):
        section = getattr(settings, field_.name)
        paths = path_settings(type(section))
        changed = {
            key: str(Path.cwd() / getattr(section, key))
            for key in paths
            if _relative(getattr(section, key))
        }
        if changed:
            sections[field_.name] = dataclasses.replace(section, **changed)
    return dataclasses.replace(settings, **sections) if sections else settings


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    overrides: list[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Load settings: defaults < YAML < ``TRAINYARD_<SECTION>__<KEY>`` env < ``overrides``.

    ``config_file`` defaults to env ``TRAINYARD_CONFIG`` when set. Raises ``SettingsError``
    naming the file, section or key on any unknown key, wrong type or invalid value.
    """
    environ = os.environ if environ is None else environ
    config_file = config_file or environ.get("TRAINYARD_CONFIG") or None
    layers: list[dict[str, dict[str, Any]]] = []
    if config_file:
        path = Path(config_file)
        if not path.is_file():
            raise SettingsError(f"config file {path} does not exist")
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise SettingsError(f"config file {path} is not valid YAML: {exc}") from exc
        if not isinstance(loaded, dict) or not all(isinstance(v, dict) for v in loaded.values()):
            raise SettingsError(f"config file {path} must map sections to key/value mappings")
        layers.append(_paths_from(path.resolve().parent, loaded))
    layers.append(_env_overrides(environ))
    layers.append(_set_overrides(overrides or []))

    merged: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for section, values in layer.items():
            if section == "train" and isinstance(values, dict) and "model" in values:
                _forget_other_models(merged.get("train", {}), str(values["model"]))
            merged.setdefault(section, {}).update(values)

    sections = {f.name: f for f in dataclasses.fields(Settings)}
    unknown = sorted(set(merged) - set(sections))
    if unknown:
        raise SettingsError(
            f"unknown settings section(s) {', '.join(unknown)}; known: {', '.join(sections)}"
        )
    hints = typing.get_type_hints(Settings)
    built = {name: build_section(hints[name], values, name) for name, values in merged.items()}
    return _absolute_paths(_resolve_defaults(Settings(**built), environ))
