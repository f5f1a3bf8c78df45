"""What a run needs recorded to be run again: the code, the installed packages, and its lineage.

``build_lineage`` gathers ``runs/<run>/lineage.json`` from the run's step manifests: the raw
versions read, the full settings, the Feast repository's fingerprint, the per-epoch metrics and
the weights' hash, the holdout scores, the code and package versions it ran with, and what its
steps used and cost so far (promote's own usage is recorded after it).
``trainyard replay`` reads it back (see :mod:`pipeline_steps.commands.replay`).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from importlib import metadata
from typing import Any

from pipeline_steps import __version__
from pipeline_steps.core.context import RunContext
from pipeline_steps.core.fingerprints import json_sha256
from pipeline_steps.core.manifests import (
    Decision,
    EvaluateManifest,
    FeaturesManifest,
    HoldoutMetrics,
    HoldoutRef,
    IngestManifest,
    PartitionRef,
    PartitionRefs,
    ScoredChampion,
    TrainManifest,
    TunedParameters,
    to_json,
)
from pipeline_steps.core.settings import PROJECT_ROOT
from pipeline_steps.core.trigger import Trigger
from pipeline_steps.core.usage import RunCost, read_usage, summarise


@dataclass(frozen=True, kw_only=True, slots=True)
class CodeVersion:
    """The code a run executed: the package version and, from a git checkout, the commit."""

    package: str
    commit: str | None = None
    dirty: bool = False
    """The checkout had uncommitted changes to tracked files."""

    def describe(self) -> str:
        if self.commit is None:
            return f"{self.package} (no git commit)"
        changes = " with local changes" if self.dirty else ""
        return f"{self.package} at {self.commit[:12]}{changes}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Lineage:
    """``runs/<run>/lineage.json``: what a run used and produced, partitions to model version,
    and what ``trainyard replay`` needs to run it again (fields after ``trigger``)."""

    run_id: str
    logical_date: str
    settings_fingerprint: str
    raw_partitions: dict[str, str]
    training_inputs: dict[str, Any]
    training_set_sha256: str
    mlflow_run_id: str
    model_uri: str
    registered_version: str | None
    """None when the run registered nothing (a replay without ``--promote``)."""
    decision: Decision
    trigger: Trigger
    recorded_at: str = ""
    code: CodeVersion | None = None
    packages_sha256: str = ""
    """sha256 of the installed distributions' names and versions (``packages``)."""
    packages: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    """The full settings document (``Settings.to_dict()``), not only its fingerprint."""
    feature_repo_sha256: str = ""
    raw_versions: PartitionRefs = field(default_factory=dict)
    """Every raw version the run read: the day's ingest and the training window's partitions."""
    epochs: list[dict[str, float]] = field(default_factory=list)
    weights_sha256: str = ""
    holdout: HoldoutRef | None = None
    tuned_from: TunedParameters | None = None
    """The tuning trial whose parameters trained the model (``train.params_from: tuning``)."""
    challenger: HoldoutMetrics | None = None
    champion: ScoredChampion | None = None
    """The champion the run compared with (as of its date in a backfill)."""
    cost: RunCost | None = None
    """What the run's steps used and cost, as recorded when promote wrote this file (promote's
    own usage is not in it: see ``RunCost.not_counted``)."""


@cache
def code_version() -> CodeVersion:
    """This package's version and, when it runs from a git checkout, the commit and whether
    tracked files differ from it (a dirty checkout cannot be reproduced from its commit)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(PROJECT_ROOT), *args],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no")) if commit else False
    return CodeVersion(package=__version__, commit=commit or None, dirty=dirty)


def model_fingerprint(config_hash: str) -> str:
    """What decides a trained model, hashed: ``config_hash`` (the train settings that change the
    result, the training set and its row groups), this package's version and commit, and
    torch's version. Two trainings with one fingerprint give the same model (training is
    deterministic for a seed); local changes to a checkout are not in it."""
    code = code_version()
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = None
    return json_sha256([config_hash, code.package, code.commit, torch])


@cache
def installed_packages() -> dict[str, str]:
    """Every installed distribution's name (normalised) and version, sorted by name."""
    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found[name.lower().replace("_", "-")] = dist.version
    return dict(sorted(found.items()))


def packages_sha256(packages: dict[str, str]) -> str:
    return json_sha256(packages)


def raw_versions(ingest: IngestManifest, features: FeaturesManifest) -> PartitionRefs:
    """Every raw version a run read: its day's ingested partitions and its window's."""
    refs: PartitionRefs = {ds: dict(days) for ds, days in features.partitions.items()}
    for dataset, partition in ingest.datasets.items():
        refs.setdefault(dataset, {})[partition.date] = PartitionRef(
            version=partition.version, sha256=partition.sha256
        )
    return {ds: dict(sorted(days.items())) for ds, days in sorted(refs.items())}


def trained_settings(ctx: RunContext, trained: TrainManifest) -> dict[str, Any]:
    """The run's settings document with the train section as trained: the tuned parameters
    over the configured values when the run took them from a study (``train.params_from``)."""
    settings = ctx.settings
    if trained.tuned_from is not None:  # as the train step took them (the model's own values)
        settings = settings.with_train(trained.tuned_from.params)
    document: dict[str, Any] = to_json(settings.to_dict())
    return document


LINEAGE_INPUTS = (IngestManifest, FeaturesManifest, TrainManifest, EvaluateManifest)
"""The manifests of a run's earlier steps that its lineage is built from."""


def build_lineage(ctx: RunContext, decision: Decision, version: str | None) -> Lineage:
    """What this run used and produced, from partitions to the registered ``version`` (None when
    it registered none), with what a replay needs, and the usage and cost its steps recorded
    until now (``cost.not_counted`` names the steps without a record: promote at least)."""
    ingest, features = ctx.upstream(IngestManifest), ctx.upstream(FeaturesManifest)
    trained, evaluation = ctx.upstream(TrainManifest), ctx.upstream(EvaluateManifest)
    packages = installed_packages()
    return Lineage(
        run_id=ctx.run_id,
        logical_date=ctx.logical_date.isoformat(),
        settings_fingerprint=ctx.settings.fingerprint(),
        raw_partitions={k: v.sha256 for k, v in ingest.datasets.items()},
        training_inputs=features.inputs,
        training_set_sha256=features.training_set_sha256,
        mlflow_run_id=trained.mlflow_run_id,
        model_uri=trained.model_uri,
        registered_version=version,
        decision=decision,
        trigger=ctx.trigger,
        recorded_at=datetime.now(UTC).isoformat(timespec="seconds"),
        code=code_version(),
        packages_sha256=packages_sha256(packages),
        packages=packages,
        settings=trained_settings(ctx, trained),
        feature_repo_sha256=str(features.inputs.get("feature_repo", "")),
        raw_versions=raw_versions(ingest, features),
        epochs=trained.history,
        weights_sha256=trained.weights_sha256,
        holdout=evaluation.holdout,
        tuned_from=trained.tuned_from,
        challenger=evaluation.challenger.metrics,
        champion=evaluation.champion,
        cost=summarise(read_usage(ctx.lake, ctx.run_dir), ctx.settings.cost),
    )
