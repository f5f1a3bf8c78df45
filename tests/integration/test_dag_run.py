"""The real DAG, run by dag.test() for two consecutive dates on the embedded default."""

from datetime import timedelta
from pathlib import Path

import pytest

from tests.conftest import FIRST_DAY
from tests.pipeline_runs import dag_test

pytestmark = pytest.mark.slow


@pytest.fixture
def airflow_env(airflow_env, monkeypatch):
    monkeypatch.setenv("TRAINYARD_TRAIN__EPOCHS", "4")
    monkeypatch.setenv("TRAINYARD_GATE__MIN_AUC", "0.5")
    return airflow_env


def _run(day, conf=None) -> str:
    return dag_test("flight_delay_training", day, conf).run_id


def test_two_days_first_promotes_second_is_judged_against_the_champion(airflow_env, capsys) -> None:
    """The second run is a manual one with the trigger form's values: fewer epochs, another
    learning rate, and promotion skipped; it trains with them and records them. Every step
    process of both runs records its usage; lineage, MLflow and ``report --costs`` sum them."""
    from mlflow import MlflowClient

    from pipeline_steps.commands.cli import main
    from pipeline_steps.core.context import RunContext
    from pipeline_steps.core.manifests import (
        EvaluateManifest,
        PromoteManifest,
        TrainManifest,
        load_record,
    )
    from pipeline_steps.core.provenance import Lineage
    from pipeline_steps.core.settings import load_settings
    from pipeline_steps.core.step_registry import STEPS
    from pipeline_steps.core.usage import read_usage

    settings = load_settings()
    first_run = _run(FIRST_DAY)
    form = {"epochs": 1, "learning_rate": 0.001, "skip_promotion": True}
    second_run = _run(FIRST_DAY + timedelta(days=1), conf=form)

    first = RunContext(run_id=first_run, logical_date=FIRST_DAY, settings=settings)
    second = RunContext(
        run_id=second_run, logical_date=FIRST_DAY + timedelta(days=1), settings=settings
    )
    assert first.upstream(PromoteManifest).decision == "promoted"
    assert first.upstream(EvaluateManifest).champion is None
    evaluation = second.upstream(EvaluateManifest)
    assert evaluation.champion.version == "1"
    assert evaluation.holdout.rows > 0
    # Against the champion: differences with intervals, baselines, slices, the report.
    auc = evaluation.differences["auc"]
    assert auc.low <= auc.estimate <= auc.high
    assert [b.name for b in evaluation.baselines] == ["trivial", "logistic_regression"]
    assert {s.value for s in evaluation.slices if s.column == "origin"} == {"EWR", "JFK", "LGA"}
    assert any(s.differences for s in evaluation.slices)  # the airports hold 200+ rows each
    assert evaluation.report.endswith("index.html")
    assert "Gate:" in (Path(evaluation.report)).read_text()
    decision = second.upstream(PromoteManifest)
    assert decision.decision == "skipped" and decision.champion_after == "1"
    assert "promotion skipped by request" in decision.reasons[-1]
    lineage = first.lake.read_json(second.run_dir, "lineage.json")
    assert lineage["trigger"]["kind"] == "manual"
    assert {o["setting"]: o["value"] for o in lineage["trigger"]["overrides"]} == {
        "train.epochs": 1,
        "train.learning_rate": 0.001,
        "promotion.skip": True,
    }
    assert second.upstream(TrainManifest).epochs == 1
    assert first.lake.exists(second.run_dir, "lineage.json")

    client = MlflowClient(settings.mlflow.tracking_uri, settings.mlflow.tracking_uri)
    experiment = client.get_experiment_by_name(settings.mlflow.experiment)
    runs = client.search_runs([experiment.experiment_id], order_by=["start_time ASC"])
    assert len(runs) == 2
    assert runs[1].data.params["train.epochs"] == "1"
    assert {"diff_auc", "diff_auc_low", "diff_auc_high", "baseline_trivial_log_loss"} <= set(
        runs[1].data.metrics
    )
    shown = {a.path for a in client.list_artifacts(runs[1].info.run_id, "evaluation")}
    assert {"evaluation/index.html", "evaluation/roc.png", "evaluation/slices.json"} <= shown
    assert runs[1].data.params["train.learning_rate"] == "0.001"
    assert runs[1].data.tags["trainyard.trigger"] == "manual"
    assert "train.epochs=1 (default 4)" in runs[1].data.tags["trainyard.overrides"]
    versions = client.search_model_versions(f"name = '{settings.mlflow.registered_model}'")
    assert sorted(v.version for v in versions) == ["1", "2"] or sorted(
        int(v.version) for v in versions
    ) == [1, 2]
    champions = [
        v
        for v in versions
        if "champion" in client.get_model_version("flight_delay", v.version).aliases
    ]
    assert len(champions) == 1
    assert str(champions[0].version) == "1"
    tags = client.get_model_version("flight_delay", "2").tags
    assert tags["trainyard.decision"] == decision.decision
    assert tags["trainyard.champion_version"] == "1"

    # cost per run: each step's process (train's under torchrun) left a record of its own
    costs = {}
    for ctx in (first, second):
        records = {record.step: record for record in read_usage(ctx.lake, ctx.run_dir)}
        assert sorted(records) == sorted(STEPS), ctx.run_id
        for step, record in records.items():
            [process] = record.attempts
            assert process.outcome == "succeeded", step
            assert process.cpu_s > 0 and process.wall_s > 0, step
            assert process.peak_rss_bytes > 50 * 2**20, step  # a Python process with pyarrow
        where = ctx.lake.path(ctx.run_dir, "lineage.json")
        lineage = load_record(Lineage, ctx.lake.read_json(ctx.run_dir, "lineage.json"), where)
        cost = lineage.cost
        assert cost is not None
        # promote writes the lineage before its own usage exists
        assert [part.step for part in cost.steps] == list(STEPS[:-1])
        assert cost.not_counted == ["promote"]
        counted = [a for step in STEPS[:-1] for a in records[step].attempts]
        assert cost.total.cpu_s == pytest.approx(sum(a.cpu_s for a in counted))
        assert cost.total.cost == pytest.approx(sum(part.cost for part in cost.steps))
        assert cost.total.cost > 0
        costs[ctx.run_id] = cost
    for run in runs:
        cost = costs[run.data.tags["trainyard.run_id"]]
        assert run.data.metrics["cost.total"] == pytest.approx(cost.total.cost)
        assert run.data.metrics["cost.train"] == pytest.approx(cost.step("train").cost)
        assert run.data.metrics["usage.cpu_seconds"] == pytest.approx(cost.total.cpu_s)

    capsys.readouterr()
    last = (FIRST_DAY + timedelta(days=1)).isoformat()
    assert main(["report", "--costs", "--start", FIRST_DAY.isoformat(), "--end", last]) == 0
    listed = capsys.readouterr().out
    assert "cost of 2 runs" in listed and "no usage recorded" not in listed
    for run_id in (first_run, second_run):
        assert f"run {run_id}  (logical date" in listed
    assert sum(line.lstrip().startswith("promote ") for line in listed.splitlines()) == 2
    assert "total of 2 runs:" in listed
