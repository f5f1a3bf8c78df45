"""What a run needs recorded to be run again: the code, the installed packages, and its lineage.

``build_lineage`` gathers ``runs/<run>/lineage.json`` from the run's step manifests: the raw
versions read, the full settings, the Feast repository's fingerprint, the per-epoch metrics and
the weights' hash, the holdout scores, the code and package versions it ran with, and what its
steps used and cost so far (promote's own usage is recorded after it).
``trainyard replay`` reads it back (see :mod:`pipeline_steps.replay`).
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from functools import cache
from importlib import metadata
from typing import Any

from pipeline_steps import __version__
from pipeline_steps.context import RunContext
from pipeline_steps.fingerprints import json_sha256
from pipeline_steps.manifests import (
    CodeVersion,
    Decision,
    EvaluateManifest,
    FeaturesManifest,
    IngestManifest,
    Lineage,
    PartitionRef,
    PartitionRefs,
    TrainManifest,
    to_json,
)
from pipeline_steps.settings import PROJECT_ROOT
from pipeline_steps.usage import read_usage, summarise


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
    document: dict[str, Any] = to_json(ctx.settings.to_dict())
    if trained.tuned_from is not None:
        document["train"] |= to_json(trained.tuned_from.params)
    return document


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
