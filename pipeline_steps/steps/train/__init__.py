"""Training: the loop, its step functions, data path, model zoo, training state and
checkpoints, process group, MLflow run and packaging."""

from pipeline_steps.steps.train.loop import train

__all__ = ["train"]
