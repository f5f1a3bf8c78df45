"""Training: the loop, its step functions, data path, model zoo, training state and
checkpoints, process group, tuning hooks, MLflow run, packaging and the recorded manifest."""

from pipeline_steps.steps.train.loop import train

__all__ = ["train"]
