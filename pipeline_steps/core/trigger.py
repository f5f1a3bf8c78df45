"""How a run started: the trigger record of ``runs/<run>/trigger.json``, also kept in the run's
lineage and MLflow tags. Airflow-free; the Airflow side that builds it from a DAG run is
:mod:`pipeline_steps.orchestration.trigger`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

TriggerKind = Literal["scheduled", "manual", "backfill", "drift", "replay", "cli"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SettingOverride:
    """A setting a run's trigger set to a value other than its default."""

    setting: str
    """``section.key``"""
    value: Any
    default: Any


@dataclass(frozen=True, kw_only=True, slots=True)
class Trigger:
    """How a run started (``runs/<run>/trigger.json``; also in lineage and MLflow tags).

    ``scheduled``, ``manual`` and ``backfill`` are Airflow's run types; ``drift`` is a run
    scheduled by the drift asset, whose events' ``extra`` is the ``evidence``; ``replay`` is
    ``trainyard replay``; ``cli`` is a step run by hand."""

    kind: TriggerKind = "cli"
    run_type: str | None = None
    """Airflow's ``dag_run.run_type`` when Airflow started the run."""
    user: str | None = None
    """Who triggered it (Airflow's triggering user), when someone did."""
    evidence: dict[str, Any] = field(default_factory=dict)
    """Why it ran: the drift events' evidence, or the run a replay reproduces."""
    overrides: list[SettingOverride] = field(default_factory=list)
    """Trigger-form values that differ from the defaults."""

    def describe(self) -> str:
        """One line: the kind, who, and why."""
        text = self.kind + (f" by {self.user}" if self.user else "")
        features = self.evidence.get("features")
        if self.kind == "drift" and self.evidence.get("rollback"):
            text += ": the champion was rolled back"
            if self.evidence.get("logical_date"):
                text += f" on {self.evidence['logical_date']}"
        elif self.kind == "drift" and isinstance(features, list):
            names = [
                str(f.get("name", f)) if isinstance(f, dict) else str(f)
                for f in features
                if not isinstance(f, dict) or f.get("trigger", True)
            ]
            text += f": {', '.join(names) or 'drift'} crossed"
            if self.evidence.get("logical_date"):
                text += f" on the window ending {self.evidence['logical_date']}"
        elif self.kind == "replay" and self.evidence.get("replays"):
            text += f" of run {self.evidence['replays']}"
        return text

    def describe_overrides(self) -> str:
        """``key=value (default d)`` per override, or ``defaults``."""
        if not self.overrides:
            return "defaults"
        return ", ".join(f"{o.setting}={o.value!r} (default {o.default!r})" for o in self.overrides)
