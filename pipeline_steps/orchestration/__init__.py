"""The Airflow-facing layer: the runner factory and the drift asset the DAG files call. The only
package that imports Airflow; the steps never do.

Imports the steps' registry and the layers below it (foundation, domain, libraries); only the
DAG files and the commands import it.
"""

from pipeline_steps.orchestration.assets import drift_asset, drift_event_task, training_schedule
from pipeline_steps.orchestration.runners import step_task

__all__ = ["drift_asset", "drift_event_task", "step_task", "training_schedule"]
