"""Models-from-code entry point MLflow stores with every trained model (no pickled objects)."""

from mlflow.models import set_model

from pipeline_steps.steps.train.packaging import TrainedModel

set_model(TrainedModel())
