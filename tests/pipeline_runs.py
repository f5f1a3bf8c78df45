"""Pipeline runs driven step by step in the test process, as the DAG's tasks would run them."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from pipeline_steps.cli import step_function
from pipeline_steps.context import RunContext
from pipeline_steps.manifests import STEPS, Trigger, TriggerKind
from pipeline_steps.settings import Settings, load_settings
from pipeline_steps.steps.ingest import ingest
from pipeline_steps.steps.validate import validate
from tests.conftest import WINDOW


def demo_settings(home: Path, *overrides: str) -> Settings:
    """The test profile: a short window, one epoch, a low AUC floor, no Data Docs."""
    return load_settings(
        overrides=[
            f"features.window_days={WINDOW}",
            "train.epochs=1",
            "gate.min_auc=0.5",
            "validation.data_docs=false",
            *overrides,
        ],
        environ={"TRAINYARD_HOME": str(home)},
    )


def load_history(settings: Settings, days: list[date]) -> None:
    """What ``trainyard seed`` does: ingest and validate each day."""
    for day in days:
        ctx = RunContext(run_id=f"seed__{day}", logical_date=day, settings=settings)
        ingest(ctx)
        validate(ctx)


def run_context(settings: Settings, run_id: str, day: date, kind: TriggerKind) -> RunContext:
    """A run's context with its trigger recorded, as the DAG's trigger task leaves it."""
    trigger = Trigger(kind=kind, run_type=kind)
    ctx = RunContext(run_id=run_id, logical_date=day, settings=settings, trigger=trigger)
    ctx.record_trigger()
    return ctx


def run_step(ctx: RunContext, step: str) -> None:
    step_function(step)(ctx)


def run_all(ctx: RunContext) -> None:
    for step in STEPS:
        run_step(ctx, step)
