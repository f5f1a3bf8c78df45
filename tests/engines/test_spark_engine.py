"""The Spark engine against the local one on the demo window: the validate step's verdicts
through GX's Spark datasource, and the training sets Feast's Spark offline store joins (the same
rows and hashes, so the same model comes out of them)."""

from __future__ import annotations

import pandas as pd
import pytest

from pipeline_steps.core.context import RunContext
from pipeline_steps.core.manifests import FeaturesManifest
from pipeline_steps.steps.features import build_features
from pipeline_steps.steps.ingest import ingest
from pipeline_steps.steps.monitor import monitor
from pipeline_steps.steps.train import train
from pipeline_steps.steps.validate import validate
from tests.conftest import FIRST_DAY

pytestmark = [pytest.mark.spark, pytest.mark.slow]
SPARK = ("engine.name=spark", "engine.spark_master=local[2]")
SMALL = ("train.epochs=1", "train.batch_size=256", "features.row_group_rows=256")


def test_a_spark_that_cannot_start_names_the_setting(lake_home, make_settings) -> None:
    """Nothing is validated or frozen. (It runs before the tests that start the session of the
    run: ``tests/scheduling.py`` puts a Spark test that does not ask for it first.)"""
    from pipeline_steps.core.errors import StepError
    from pipeline_steps.core.lake import Lake

    settings = make_settings(*SPARK[:1], "engine.spark_master=nowhere://", home=lake_home)
    ctx = RunContext(run_id="bad", logical_date=FIRST_DAY, settings=settings)
    ingest(ctx)
    with pytest.raises(StepError, match=r"engine.spark_master 'nowhere://'"):
        validate(ctx)
    assert not ctx.lake.exists(Lake.partition("validated", "flights", FIRST_DAY))
    validate(
        RunContext(run_id="bad", logical_date=FIRST_DAY, settings=make_settings(home=lake_home))
    )
    with pytest.raises(StepError, match=r"engine.spark_master 'nowhere://'"):
        build_features(ctx)
    assert not ctx.lake.exists("training_sets/bad")


def test_both_engines_freeze_the_same_sets_and_train_the_same_model(
    spark, lake_home, make_settings
) -> None:
    local = RunContext(
        run_id="local", logical_date=FIRST_DAY, settings=make_settings(*SMALL, home=lake_home)
    )
    ingest(local)
    validate(local)
    remote = RunContext(
        run_id="spark",
        logical_date=FIRST_DAY,
        settings=make_settings(*SMALL, *SPARK, home=lake_home),
    )
    on_local, on_spark = build_features(local), build_features(remote)
    assert on_spark.status == "built"
    assert on_spark.sets.train.rows == on_local.sets.train.rows > 2000
    assert on_spark.sets.holdout.rows == on_local.sets.holdout.rows > 500
    # the same rows, values, order and types: the same content hashes
    assert on_spark.training_set_sha256 == on_local.training_set_sha256
    pd.testing.assert_frame_equal(
        pd.read_parquet(on_spark.sets.holdout.path), pd.read_parquet(on_local.sets.holdout.path)
    )
    # the run's online store was materialised through the Spark store as well
    assert on_spark.materialized == on_local.materialized
    trained = {ctx.run_id: train(ctx) for ctx in (local, remote)}
    quality = {name: v for name, v in trained["local"].metrics.items() if "per_s" not in name}
    assert {"val_loss", "val_auc"} <= quality.keys()
    assert {k: trained["spark"].metrics[k] for k in quality} == pytest.approx(quality, rel=1e-6)
    assert remote.upstream(FeaturesManifest).training_set_sha256 == on_local.training_set_sha256

    # The drift monitor on the same window, the trained model as champion: the Spark engine
    # joins, scores (on the executors) and counts (Spark aggregates) to the same verdict.
    import mlflow

    cfg = local.settings.mlflow
    mlflow.set_tracking_uri(cfg.tracking_uri)
    version = mlflow.register_model(trained["local"].model_uri, cfg.registered_model).version
    mlflow.MlflowClient().set_registered_model_alias(
        cfg.registered_model, cfg.champion_alias, version
    )
    window = ("drift.current_days=1", "drift.reference_days=3", "drift.min_reference_days=2")
    verdicts = {}
    for name, extra in (("local", ()), ("spark", SPARK)):
        settings = make_settings(*SMALL, *window, *extra, home=lake_home)
        verdicts[name] = monitor(
            RunContext(run_id=f"monitor-{name}", logical_date=FIRST_DAY, settings=settings)
        )
    on_local_drift, on_spark_drift = verdicts["local"], verdicts["spark"]
    assert [s.name for s in on_spark_drift.signals] == [s.name for s in on_local_drift.signals]
    assert {"prediction", "label", "temp", "carrier"} <= {s.name for s in on_local_drift.signals}
    for a, b in zip(on_spark_drift.signals, on_local_drift.signals, strict=True):
        assert (a.name, a.statistic, a.crossed) == (b.name, b.statistic, b.crossed)
        assert a.value == pytest.approx(b.value, rel=1e-6, abs=1e-9), a.name
        assert a.threshold == pytest.approx(b.threshold, rel=1e-6, abs=1e-9), a.name
    assert on_spark_drift.champion is not None and on_local_drift.champion is not None
    assert on_spark_drift.champion.metrics == on_local_drift.champion.metrics
    assert on_spark_drift.champion.mean_score == pytest.approx(on_local_drift.champion.mean_score)


def test_both_engines_give_the_same_verdicts_on_a_real_day(
    spark, lake_home, make_settings, tmp_path
) -> None:
    """The validate step on Spark (GX's Spark datasource) judges each dataset of the day as the
    local engine does: same expectations evaluated, failed and warned on."""
    import shutil

    from pipeline_steps.core.lake import Lake

    local_home = tmp_path / "local"
    shutil.copytree(lake_home, local_home)
    verdicts = {}
    for name, home, extra in (("local", local_home, ()), ("spark", lake_home, SPARK)):
        ctx = RunContext(
            run_id=name, logical_date=FIRST_DAY, settings=make_settings(*extra, home=home)
        )
        ingest(ctx)
        verdicts[name] = validate(ctx).datasets
        assert ctx.lake.exists(Lake.partition("validated", "flights", FIRST_DAY))
    assert verdicts["spark"].keys() == verdicts["local"].keys() == {"flights", "weather", "planes"}
    for dataset, local in verdicts["local"].items():
        on_spark = verdicts["spark"][dataset]
        assert (
            (on_spark.success, on_spark.status)
            == (local.success, local.status)
            == (
                True,
                "validated",
            )
        )
        assert on_spark.evaluated == local.evaluated > 10
        assert (on_spark.failed, on_spark.warnings) == (local.failed, local.warnings)
