"""The multi-node training Job (``runtime: kubernetes``, ``kubernetes.train_nodes`` > 1): a
KubernetesJobOperator that waits for a queued Job and outlives its lost pods. Imported only
under that runtime (the Kubernetes client is heavy)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator
from airflow.providers.cncf.kubernetes.utils.pod_manager import PodManager
from kubernetes.client.rest import ApiException

from pipeline_steps.orchestration.gauges import removed_at_end

NODES_PARAM = "nodes"
"""The training form's field of a job's nodes (``kubernetes.train_nodes``)."""


class _LostPodsPodManager(PodManager):
    """Reads the logs of the pods it was given, passing over those gone since (a pod of a
    preempted node is removed, and the Job replaced it)."""

    def fetch_requested_container_logs(self, pod: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().fetch_requested_container_logs(pod, *args, **kwargs)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.log.warning("pod %s is gone (preempted?): its log is not here", pod.metadata.name)
            return []


class TrainingJobOperator(KubernetesJobOperator):
    """The training Job: its pods may appear long after the Job (Kueue admits a queued Job by
        unsuspending it), so it looks for them until they do (the task's execution timeout bounds
        the wait) instead of failing at once; a pod removed before its log is read is skipped; the
    training's gauges are removed from the Pushgateway when the task ends."""

    def __init__(self, *, gauges: Any = None, min_nodes: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.min_nodes = min_nodes
        """An elastic Job's fewest nodes; 0: a fixed size (no node may be lost)."""
        self.gauges = gauges
        """The training's Pushgateway group (``gauges.TrainingGauges``), removed when the task
        ends, however it ends; None without a Pushgateway."""

    def execute(self, context: Any) -> Any:
        self.size_for(context.get("params") or {})
        with removed_at_end(self.gauges, context):
            return super().execute(context)

    def size_for(self, params: Any) -> None:
        """The Job sized for the run: a job's own number of nodes (the form's ``nodes``)
        instead of the settings', as many pods and completions, and an elastic Job's failures
        of lost nodes allowed down to its fewest; the trigger task has checked the number."""
        asked = params.get(NODES_PARAM) if hasattr(params, "get") else None
        if not isinstance(asked, int) or isinstance(asked, bool) or asked == self.parallelism:
            return
        self.log.info("the job asked for %d node(s) (the settings: %d)", asked, self.parallelism)
        self.backoff_limit = asked - (self.min_nodes or asked)
        self.completions = self.parallelism = asked

    @cached_property
    def pod_manager(self) -> PodManager:
        return _LostPodsPodManager(kube_client=self.client, callbacks=self.callbacks)

    def get_pods(
        self, pod_request_obj: Any, context: Any, *, exclude_checked: bool = True
    ) -> Sequence[Any]:
        from airflow.providers.common.compat.sdk import AirflowException

        while True:
            try:
                return super().get_pods(pod_request_obj, context, exclude_checked=exclude_checked)
            except AirflowException:  # no pod with the Job's labels yet
                pass
            self.log.info(
                "job %s has no pods yet (waiting for admission or capacity); looking again in %d s",
                self.job.metadata.name if self.job else self.name,
                self.job_poll_interval,
            )
            time.sleep(self.job_poll_interval)
