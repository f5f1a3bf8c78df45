"""Pipeline runs driven step by step in the test process, as the DAG's tasks would run them."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.settings import Settings, load_settings
from pipeline_steps.core.step_registry import STEPS
from pipeline_steps.core.trigger import Trigger, TriggerKind
from pipeline_steps.steps.ingest import ingest
from pipeline_steps.steps.registry import step_function
from pipeline_steps.steps.validate import validate
from tests.conftest import ROOT, WINDOW, environ_of


def demo_settings(home: Path, *overrides: str) -> Settings:
    """The test profile: a short window, four epochs (one learns nothing the trivial model does
    not know, and is never promoted), a low AUC floor, no linear baseline to beat (a network of
    so few steps loses to it), no Data Docs."""
    return load_settings(
        overrides=[
            f"features.window_days={WINDOW}",
            "train.epochs=4",
            "gate.min_auc=0.5",
            "gate.baselines_must_beat=[]",
            "validation.data_docs=false",
            *overrides,
        ],
        environ=environ_of(home),
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


def dag_test(dag_id: str, day: date, conf: dict[str, Any] | None = None) -> Any:
    """``dag.test()`` of ``dag_id`` for logical date ``day``; the run, which succeeded."""
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(ROOT / "dags")).get_dag(dag_id)
    run = dag.test(logical_date=datetime.combine(day, datetime.min.time(), UTC), run_conf=conf)
    assert str(run.state) in ("success", "DagRunState.SUCCESS"), run.state
    return run
