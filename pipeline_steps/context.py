"""What every step receives (the run context) and how step manifests are kept in the lake."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime
from functools import cached_property
from typing import Any

from pipeline_steps.lake import Lake
from pipeline_steps.settings import Settings


class StepError(RuntimeError):
    """A step cannot go on; the message says what is wrong and where, for the task log."""


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """Identity of one pipeline run: the Airflow run id, the logical date and the settings."""

    run_id: str
    logical_date: date
    settings: Settings

    @cached_property
    def lake(self) -> Lake:
        return Lake(self.settings.lake.root)

    @property
    def run_dir(self) -> str:
        return Lake.run_dir(self.run_id)

    def record(self, step: str, manifest: dict[str, Any]) -> dict[str, Any]:
        """Store a step's manifest as ``runs/<run>/<step>.json`` and return it."""
        stored = {
            **manifest,
            "run_id": self.run_id,
            "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        self.lake.write_json(stored, self.run_dir, f"{step}.json")
        return manifest

    def upstream(self, step: str) -> dict[str, Any]:
        """The manifest an earlier step of this run recorded; a clear error when it has not run."""
        if not self.lake.exists(self.run_dir, f"{step}.json"):
            raise StepError(
                f"step {step!r} has not completed for run {self.run_id!r} "
                f"(no {self.lake.path(self.run_dir, step + '.json')}); run it first"
            )
        return self.lake.read_json(self.run_dir, f"{step}.json")
