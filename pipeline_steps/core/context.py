"""What every step receives (the run context) and how step manifests are kept in the lake."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from functools import cached_property
from typing import TypeVar

from pipeline_steps.core.domain import Domain, load_domain
from pipeline_steps.core.errors import StepError
from pipeline_steps.core.lake import Lake
from pipeline_steps.core.manifests import Manifest, TrialRef, load_manifest, load_record, to_json
from pipeline_steps.core.settings import Settings, SettingsError
from pipeline_steps.core.trigger import Trigger

M = TypeVar("M", bound=Manifest)
TRIGGER_FILE = "trigger.json"


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """Identity of one pipeline run: the Airflow run id, the logical date and the settings."""

    run_id: str
    logical_date: date
    settings: Settings
    trigger: Trigger = field(default_factory=Trigger)
    """How the run started (``--trigger``; a step run by hand is ``cli``)."""
    trial: TrialRef | None = None
    """Set when the step runs as a trial of a tuning study: it reads the run's manifests (the
    study's frozen training set) and writes its own under ``runs/<run>/trials/<number>/``."""

    @cached_property
    def lake(self) -> Lake:
        return Lake(self.settings.lake_root, self.settings.ingest.pins)

    @cached_property
    def domain(self) -> Domain:
        """The data's domain (``domain.module``): datasets, label, entity rows, sources. A
        ``file`` source must count days in the domain's zone (``ingest.time_zone``)."""
        domain = load_domain(self.settings.domain.module)
        ingest = self.settings.ingest
        declared = domain.time_zone is not None
        if declared and ingest.source == "file" and ingest.time_zone != domain.time_zone:
            raise SettingsError(
                f"ingest.time_zone {ingest.time_zone!r} differs from the time zone of domain "
                f"{domain.name} ({domain.time_zone!r}, TIME_ZONE in {self.settings.domain.module})"
                ": ingest and the holdout would count days differently; set both alike"
            )
        return domain

    @property
    def datasets(self) -> tuple[str, ...]:
        """The datasets of a run: ``ingest.datasets`` if set, else the domain's."""
        return self.settings.ingest.datasets or self.domain.datasets

    @property
    def run_dir(self) -> str:
        """Where this step records: the run's folder, or its trial's inside it."""
        run = Lake.run_dir(self.run_id)
        return f"{run}/trials/{self.trial.number}" if self.trial else run

    @property
    def run_key(self) -> str:
        """The run (or the run's trial) as MLflow tags name it."""
        return f"{self.run_id}#trial-{self.trial.number}" if self.trial else self.run_id

    def record_trigger(self) -> None:
        """Keep the trigger as ``runs/<run>/trigger.json`` (the same for every step of a run)."""
        self.lake.write_json(to_json(self.trigger), self.run_dir, TRIGGER_FILE)

    def recorded_trigger(self) -> Trigger:
        """The trigger this run recorded, or this context's when it recorded none."""
        if not self.lake.exists(self.run_dir, TRIGGER_FILE):
            return self.trigger
        where = self.lake.path(self.run_dir, TRIGGER_FILE)
        return load_record(Trigger, self.lake.read_json(self.run_dir, TRIGGER_FILE), where)

    def record(self, manifest: M) -> M:
        """Store a step's manifest as ``runs/<run>/<step>.json`` with the run id, the time and
        the Airflow DAG recording it, and return it as the step prints it (without those)."""
        recorded_at = datetime.now(UTC).isoformat(timespec="seconds")
        dag_id = os.environ.get("AIRFLOW_CTX_DAG_ID") or None  # set by Airflow for its tasks
        stored = replace(manifest, run_id=self.run_id, recorded_at=recorded_at, dag_id=dag_id)
        self.lake.write_json(stored.to_json(), self.run_dir, f"{manifest.STEP}.json")
        return manifest

    def upstream(self, step: type[M]) -> M:
        """The manifest an earlier step of this run recorded; a clear error when it has not run
        or its manifest is not one this version reads."""
        name = step.STEP
        folder = Lake.run_dir(self.run_id)  # a trial's too: it trains on its run's features
        if not self.lake.exists(folder, f"{name}.json"):
            raise StepError(
                f"step {name!r} has not completed for run {self.run_id!r} "
                f"(no {self.lake.path(folder, name + '.json')}); run it first"
            )
        payload = self.lake.read_json(folder, f"{name}.json")
        return load_manifest(step, payload, self.lake.path(folder, f"{name}.json"))
