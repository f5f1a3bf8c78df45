"""The domains one deployment runs: each a settings file (and the package it names).

The default domain (no file: ``TRAINYARD_CONFIG``, when it names a domain), the shipped
examples (``examples/*/settings.yaml``, ``orchestration.example_domains``), and every ``*.yaml`` of
``orchestration.domains_dir`` (``TRAINYARD_ORCHESTRATION__DOMAINS_DIR``), and the
``settings.yaml`` of each of its subfolders (a domain folder as ``init-domain`` writes it). Airflow
builds each
one's DAGs (:mod:`pipeline_steps.orchestration.domains`), its pools are created where Airflow is
set up (:mod:`pipeline_steps.services.gpu_pool`), ``trainyard domains`` lists them.

Settings only: DAG parsing imports this.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from pipeline_steps.core.settings import (
    PROJECT_ROOT,
    Settings,
    SettingsError,
    TeamQuota,
    load_settings,
)

EXAMPLES = PROJECT_ROOT / "examples"
"""The shipped examples, a folder each with its ``settings.yaml``
(``orchestration.example_domains``)."""
DAG_KINDS = {
    "training": "training",
    "drift_monitor": "monitoring",
    "tuning": "tuning",
    "serving": "serving",
}
"""Every domain's DAGs, ``<domain.name>_<kind>``, and what each does in a word (its tag, and
the kind of run ``trainyard report`` names)."""


@dataclass(frozen=True)
class DomainFile:
    """One domain of the deployment: its settings file (None: the default domain) and its
    settings."""

    path: Path | None
    settings: Settings

    @property
    def name(self) -> str:
        return self.settings.domain.name

    @property
    def config(self) -> str | None:
        return str(self.path) if self.path is not None else None

    @property
    def dag_ids(self) -> list[str]:
        """Its DAGs' ids, one per :data:`DAG_KINDS`."""
        return [f"{self.name}_{kind}" for kind in DAG_KINDS]

    @property
    def owned(self) -> dict[str, tuple[str, str]]:
        """What the domain's runs write and no other domain may, by the setting naming it:
        ``{setting: (kind, value)}`` for its registered model, its experiments (one namespace:
        MLflow's) and its lake folder."""
        s = self.settings
        return {
            "mlflow.registered_model": ("model", s.mlflow.registered_model),
            "mlflow.experiment": ("experiment", s.mlflow.experiment),
            "mlflow.monitoring_experiment": ("experiment", s.mlflow.monitoring_experiment),
            "tuning.experiment": ("experiment", s.tuning.experiment),
            "lake.root": ("lake folder", posixpath.normpath(s.lake_root)),
        }

    def claim_of_another(self, owners: dict[tuple[str, str], str]) -> str | None:
        """Why this domain may not run beside the domains of ``owners`` (``{(kind, value):
        who}``): the first thing it would write that one of them owns; None when it names only
        its own."""
        for setting, (kind, value) in self.owned.items():
            for (owned_kind, owned), who in owners.items():
                # a lake folder is another's when it is, holds or lies in that one's
                nested = kind == "lake folder" and (
                    value.startswith(f"{owned}/") or owned.startswith(f"{value}/")
                )
                if owned_kind == kind and (owned == value or nested):
                    what = f"{value!r}, which overlaps {owned!r}," if nested else repr(value)
                    return (
                        f"{setting}: the {kind} {what} belongs to {who}; a domain writes only "
                        "its own registered model, experiments and lake folder (name another, "
                        "or leave the setting empty for the one its domain.name gives)"
                    )
        return None


def team_quota(settings: Settings) -> TeamQuota | None:
    """The quota of the domain's team in ``orchestration.quotas``; None without a team or a
    quota for it."""
    return settings.orchestration.quotas.get(settings.domain.team)


def under_deployment(domain: Settings, deployment: Settings) -> Settings:
    """A domain's settings under the deployment's: ``orchestration.quotas`` and
    ``team_queues`` as the deployment sets them, and its team's GPU pool the size of the team's
    GPU quota."""
    orch = dataclasses.replace(
        domain.orchestration,
        quotas=deployment.orchestration.quotas,
        team_queues=deployment.orchestration.team_queues,
    )
    quota = orch.quotas.get(domain.domain.team)
    if quota is not None and quota.gpus:
        orch = dataclasses.replace(orch, gpu_pool_slots=quota.gpus)
    return dataclasses.replace(domain, orchestration=orch)


DEPLOYMENT_SETTINGS = ("quotas", "team_queues")
"""Settings of ``orchestration`` that are the deployment's alone: the teams' quotas and where
their tasks run. A domain's file may not set them; each domain runs under the default
settings' (:func:`under_deployment`)."""


def _deployment_settings_set(path: Path) -> list[str]:
    """The deployment's settings (:data:`DEPLOYMENT_SETTINGS`) the settings file ``path`` sets."""
    document = yaml.safe_load(path.read_text()) or {}
    section = document.get("orchestration") or {}
    return [f"orchestration.{key}" for key in DEPLOYMENT_SETTINGS if key in section]


def load_domain_settings(path: Path | None, environ: Mapping[str, str] | None = None) -> Settings:
    """The settings of the domain of file ``path`` (None: the default domain); a refusal names
    the file."""
    try:
        return load_settings(path, environ=environ)
    except SettingsError as exc:
        where = path if path is not None else "the default domain (TRAINYARD_CONFIG)"
        raise SettingsError(f"{where}: {exc}") from exc


def domain_settings_files(
    environ: Mapping[str, str] | None = None, refused: list[str] | None = None
) -> list[DomainFile]:
    """The deployment's domains: the default one (``TRAINYARD_CONFIG``; none when the
    default settings name no ``domain.module``), the shipped examples (``examples/*/
    settings.yaml``) when ``orchestration.example_domains`` is on, and each
    ``*.yaml`` of ``orchestration.domains_dir`` and ``settings.yaml`` of its subfolders (a
    domain folder as ``trainyard init-domain`` writes it), sorted by path.

    A file the settings loader refuses, one naming a domain an earlier one named, or one whose
    registered model, experiments or lake folder an earlier one owns (:attr:`DomainFile.owned`:
    a team cannot write another team's model by naming it), or that sets its team's quota
    (``orchestration.quotas``, the deployment's: each domain runs under the default settings'
    quotas, :func:`under_deployment`) raises
    ``SettingsError`` naming it; with ``refused``, its message goes there instead and the
    other domains are returned (one team's bad file does not take the others' DAGs down). The
    default domain's own settings always raise."""
    environ = os.environ if environ is None else environ
    base = load_domain_settings(None, environ)
    # Without a domain module the defaults are only the deployment's settings, no domain.
    found = [DomainFile(None, under_deployment(base, base))] if base.domain.module else []
    orch = base.orchestration
    paths = sorted(EXAMPLES.glob("*/settings.yaml")) if orch.example_domains else []
    if orch.domains_dir:
        folder = Path(orch.domains_dir).expanduser().resolve()
        if not folder.is_dir():
            raise SettingsError(
                f"orchestration.domains_dir {folder} is not a folder (of domain settings files)"
            )
        # a settings file per domain, or a folder per domain as init-domain writes it
        paths += sorted(
            [*folder.glob("*.yaml"), *folder.glob("*.yml"), *folder.glob("*/settings.yaml")]
        )
    seen: dict[str, Path | None] = {base.domain.name: None} if found else {}
    owners = {key: "the default domain" for d in found for key in d.owned.values()}
    config = environ.get("TRAINYARD_CONFIG")
    default_file = Path(config).resolve() if config else None
    for path in dict.fromkeys(p.resolve() for p in paths):
        if default_file is not None and path == default_file:
            continue  # the default domain's own file, already there
        try:
            domain = DomainFile(path, load_domain_settings(path, environ))
            if not domain.settings.domain.module:
                raise SettingsError(
                    f"{path}: domain.module is not set: a domain's settings file names the module "
                    "holding its DOMAIN (e.g. domain.module: my_team.domain)"
                )
            taken = _deployment_settings_set(path)
            if taken:
                raise SettingsError(
                    f"{path}: {', '.join(taken)} is the deployment's: a domain's file may not set "
                    "its team's quota or where its tasks run (set it in the default settings, "
                    "TRAINYARD_CONFIG)"
                )
            domain = DomainFile(path, under_deployment(domain.settings, base))
            if domain.name in seen:
                other = seen[domain.name] or "the default domain"
                raise SettingsError(
                    f"{path}: domain.name {domain.name!r} is also the name of {other}; each "
                    "domain needs its own (it names the DAGs, assets and lake folder)"
                )
            claimed = domain.claim_of_another(owners)
            if claimed is not None:
                raise SettingsError(f"{path}: {claimed}")
        except SettingsError as exc:
            if refused is None:
                raise
            refused.append(str(exc))
            continue
        seen[domain.name] = path
        owners |= {key: f"domain {domain.name!r} ({path})" for key in domain.owned.values()}
        found.append(domain)
    return found
