"""The pod of one step (``runtime: kubernetes``): a KubernetesPodOperator whose failures keep
their class. Imported only when that runtime is configured (the Kubernetes client is heavy)."""

from __future__ import annotations

from typing import Any

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

from pipeline_steps.orchestration.failures import pod_outcome, step_failure
from pipeline_steps.orchestration.gauges import removed_at_end


class StepPodOperator(KubernetesPodOperator):
    """Runs a step's argv in the step image. A permanent failure (exit code 2, or the step's
    failure line as the container's termination message) fails the task at once; any other
    (a preempted pod, a refused connection) is retried."""

    def __init__(self, *, step: str, gauges: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step = step
        self.gauges = gauges
        """A training's Pushgateway group (``gauges.TrainingGauges``), removed when the task
        ends; None for another step."""

    def execute(self, context: Any) -> Any:
        with removed_at_end(self.gauges, context):
            return super().execute(context)

    def cleanup(self, pod: Any, remote_pod: Any, *args: Any, **kwargs: Any) -> None:
        try:
            super().cleanup(pod, remote_pod, *args, **kwargs)
        except Exception as exc:
            if type(exc).__name__ == "AirflowSkipException":
                raise
            code, message = pod_outcome(remote_pod, self.base_container_name)
            raise step_failure(self.step, code, [message], message or str(exc)) from exc
