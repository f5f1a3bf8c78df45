"""Pipeline parallelism on CPU: the FT-Transformer cut into two stages on two torchrun ranks
(gloo) follows the unsplit model trained by one process, and a rank killed mid-epoch resumes
from the step checkpoint to the same end."""

import mlflow
import pytest
import torch

from pipeline_steps.steps.train import train
from tests.model import launch
from tests.model.conftest import final_weights, states_of
from tests.model.launch import manifest_of

pytestmark = pytest.mark.slow
BASE = (
    *launch.SMALL_SET,
    "train.epochs=2",
    "train.model=ft_transformer",
    "train.batch_size=64",
    "train.checkpoint_every=3",
    "train.keep_checkpoints=100",
    "train.patience=0",
)
PIPELINE = ("train.strategy=pipeline", "train.pipeline_stages=2", "train.pipeline_microbatches=4")


def test_two_stages_follow_the_unsplit_model_and_resume_after_a_killed_rank(prepare_run) -> None:
    unsplit = prepare_run("unsplit", *BASE)
    single = train(unsplit)
    assert single is not None

    staged = prepare_run("staged", *BASE, *PIPELINE)
    # rank 1: the last stage, which holds the head and computes the loss
    at, stdout, stderr = launch.run_killing_a_rank_mid_epoch(staged, 2, (*BASE, *PIPELINE))
    assert "pipeline: stage 1 of 2" in stderr
    manifest = manifest_of(stdout)
    assert manifest["world_size"] == 2 and manifest["steps"] == single.steps
    resumed = manifest["resumed_from"]
    assert resumed is not None and resumed["epoch"] == 1 and resumed["step"] >= at.step

    # the same rows in the same steps: the curve of one process, up to the micro-batches'
    # summation order
    ours, theirs = (list(states_of(c).values())[-1].history for c in (staged, unsplit))
    assert len(ours) == len(theirs) == 2
    for a, b in zip(ours, theirs, strict=True):
        for metric in ("train_loss", "val_loss"):
            assert a[metric] == pytest.approx(b[metric], rel=1e-3), (metric, a, b)
    # the checkpoint holds the unsplit model's state, gathered from both stages
    weights, reference = final_weights(staged), final_weights(unsplit)
    assert weights.keys() == reference.keys()
    for name, tensor in weights.items():
        other = reference[name]
        if name.endswith("self_attn.in_proj_bias"):
            # the keys' bias has a gradient of exactly 0 (softmax ignores what every key adds
            # alike), so AdamW turns the summation order's ~1e-10 into steps of the learning
            # rate: compare the queries' and values' thirds, which the outputs depend on
            third = len(tensor) // 3
            tensor = torch.cat([tensor[:third], tensor[2 * third :]])
            other = torch.cat([other[:third], other[2 * third :]])
        assert torch.allclose(tensor, other, rtol=1e-4, atol=1e-5), name
    # and the packaged model is the unsplit one, scoring as the registry serves it
    mlflow.set_tracking_uri(staged.settings.mlflow.tracking_uri)
    assert mlflow.pyfunc.load_model(manifest["model_uri"]) is not None
