"""Training: data path, model zoo, checkpoints, packaging and the loop."""

from pipeline_steps.steps.train.loop import train

__all__ = ["train"]
