"""A multiclass task end to end: the real flights of June 2013, each arriving on time
(at most 15 minutes late), late (15-60 minutes) or very late (over an hour); the domain is
defined here, as a team would define its own over the shipped one."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from flight_delay.domain import DOMAIN as FLIGHTS
from flight_delay.domain import Flights

from pipeline_steps.commands.serving import PREDICTION, PROBABILITY, predict
from pipeline_steps.core.manifests import FeaturesManifest
from pipeline_steps.core.settings import FeatureSettings
from pipeline_steps.steps.evaluate import evaluate, score
from pipeline_steps.steps.promote import promote
from pipeline_steps.steps.train import train
from tests.conftest import FIRST_DAY

pytestmark = pytest.mark.slow
CLASSES = ("on time", "late", "very late")


@dataclass(frozen=True, kw_only=True)
class ArrivalClass(Flights):
    """The flights domain with a three-class label of the arrival delay."""

    def entity_rows(self, labelled: pd.DataFrame, settings: FeatureSettings) -> pd.DataFrame:
        flown = labelled[labelled["arr_delay"].notna()]
        rows = self._flight_rows(flown)
        delay = flown["arr_delay"].to_numpy()
        rows[self.label] = np.digitize(delay, [15.5, 60.5]).astype("int64")
        return rows.drop_duplicates(self.key).reset_index(drop=True)


DOMAIN = ArrivalClass(
    **{
        name: getattr(FLIGHTS, name)
        for name in FLIGHTS.__dataclass_fields__
        if name not in ("task", "classes", "label")
    },
    label="arrival_class",
    task="multiclass",
    classes=CLASSES,
)


def test_three_classes_are_trained_evaluated_promoted_and_served(
    prepare_run, ready_lake_home, monkeypatch
) -> None:
    ctx = prepare_run(
        "arrival_class",
        f"domain.module={__name__}",
        "train.epochs=3",
        "features.row_group_rows=256",
        "promotion.force=true",
        "promotion.reason=the multiclass test needs a champion",
    )
    features = ctx.upstream(FeaturesManifest)
    assert (features.task, features.classes) == ("multiclass", list(CLASSES))
    trained = train(ctx)
    assert "val_accuracy" in trained.metrics

    evaluation = evaluate(ctx)
    metrics = evaluation.challenger.metrics
    trivial = next(b for b in evaluation.baselines if b.name == "trivial")
    assert metrics.log_loss < trivial.metrics.log_loss  # better than the class prior
    assert set(metrics.class_recall) == set(CLASSES)
    assert 0 < metrics.macro_f1 <= 1

    holdout = pd.read_parquet(features.sets.holdout.path)
    probabilities = score(trained.model_uri, holdout, features.feature_columns)
    assert probabilities.shape == (len(holdout), 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-6)

    monkeypatch.setenv("TRAINYARD_HOME", str(ready_lake_home))
    assert promote(ctx).champion_after == "1"
    served = predict(ctx.settings, FIRST_DAY).rows
    assert set(served[PREDICTION]) <= set(CLASSES)
    columns = [f"{PROBABILITY}_{name}" for name in CLASSES]
    np.testing.assert_allclose(served[columns].sum(axis=1), 1.0, rtol=1e-6)
