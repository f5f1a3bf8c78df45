"""Training equals serving: the champion's probabilities from online features are the evaluate
step's for the same flights, whether ``trainyard predict`` reads the day or a file of flights."""

import json

import numpy as np
import pandas as pd
import pyarrow.csv as pcsv
import pytest

from pipeline_steps.commands.cli import main
from pipeline_steps.commands.serving import PROBABILITY, predict
from pipeline_steps.core.manifests import FeaturesManifest, TrainManifest
from pipeline_steps.steps.evaluate import evaluate, score
from pipeline_steps.steps.promote import promote
from pipeline_steps.steps.train import train
from tests.conftest import FIRST_DAY

pytestmark = pytest.mark.slow
SMALL = ("train.epochs=2", "train.batch_size=256", "features.row_group_rows=256")
FORCED = ("promotion.force=true", "promotion.reason=the serving test needs a champion")


@pytest.fixture
def champion_run(prepare_run, ready_lake_home, monkeypatch):
    """A run of FIRST_DAY trained, evaluated and promoted: its model is the champion."""
    ctx = prepare_run("served", *SMALL, *FORCED)
    train(ctx)
    evaluate(ctx)
    assert promote(ctx).version == "1"
    monkeypatch.setenv("TRAINYARD_HOME", str(ready_lake_home))
    return ctx


def test_predictions_from_online_features_equal_the_evaluate_steps(champion_run, tmp_path, capsys):
    ctx = champion_run
    features = ctx.upstream(FeaturesManifest)
    holdout = pd.read_parquet(features.sets.holdout.path)
    # what the evaluate step computes for the challenger, which is now the champion
    offline = pd.Series(
        score(ctx.upstream(TrainManifest).model_uri, holdout, features.feature_columns),
        index=holdout[features.key],
    )

    served = predict(ctx.settings, FIRST_DAY)
    assert served.model.version == "1" and served.model.run_id == "served"
    assert served.model.features == features.feature_columns
    online = served.rows.set_index(features.key)[PROBABILITY]
    assert sorted(online.index) == sorted(offline.index)
    np.testing.assert_allclose(online.loc[offline.index], offline, rtol=1e-12, atol=0)
    assert offline.std() > 0.01  # the model tells flights apart: equality is not trivial

    # the command: JSON lines on stdout, one per flight, the same probabilities
    assert main(["predict", "--logical-date", FIRST_DAY.isoformat()]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    printed = pd.Series({x[features.key]: x[PROBABILITY] for x in lines})
    np.testing.assert_allclose(printed.loc[offline.index], offline, rtol=1e-12, atol=0)

    # one departure hour's flights as a request file without what only arrival tells (the
    # label's source): scored as the evaluate step scored them
    flights = ctx.lake.read_table(
        ctx.lake.validated_partition("flights", FIRST_DAY), "data.parquet"
    ).to_pandas()
    hour = flights["time_hour"].value_counts().idxmax()
    request = flights[flights["time_hour"] == hour].drop(
        columns=["arr_delay", "arr_time", "dep_delay", "dep_time", "air_time"]
    )
    path = tmp_path / "request.parquet"
    request.to_parquet(path)
    output = tmp_path / "scores.csv"
    day = FIRST_DAY.isoformat()
    argv = ["predict", "--logical-date", day, "--rows", str(path), "--output", str(output)]
    assert main(argv) == 0
    written = pcsv.read_csv(output).to_pandas().set_index(features.key)
    assert len(written) == len(request) > 10
    assert (pd.to_datetime(written["event_timestamp"], utc=True) == hour).all()
    # the model computes in float32: scored in another batch, the last bits may differ
    np.testing.assert_allclose(written[PROBABILITY], offline.loc[written.index], rtol=1e-6)
