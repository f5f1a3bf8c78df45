"""MLflow's system metrics of the training's run, per node: CPU, memory, disk and network, and
on CUDA each GPU's utilisation and memory (through NVML), sampled every
``train.system_metrics_s`` seconds.

The first process of each node (local rank 0) samples its machine into the run, under the
node's id (``system/<node>/...`` is how MLflow keys them when a node id is set: ``node-0``,
``node-1``, ... by torchrun's node rank).
"""

from __future__ import annotations

import logging
from typing import Any

from pipeline_steps.steps.train.callbacks import Callback, Loop

log = logging.getLogger(__name__)


class SystemMetrics(Callback):
    """Samples this node into MLflow run ``run_id`` while the training runs."""

    def __init__(self, run_id: str, node: int, every_s: float) -> None:
        self.run_id, self.node, self.every_s = run_id, node, every_s
        self._monitor: Any = None

    def on_train_start(self, loop: Loop) -> None:
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        self._monitor = SystemMetricsMonitor(
            self.run_id,
            sampling_interval=self.every_s,
            samples_before_logging=1,
            resume_logging=True,
            node_id=f"node-{self.node}",
        )
        self._monitor.start()

    def on_train_end(self, loop: Loop, error: BaseException | None) -> None:
        if self._monitor is not None:
            self._monitor.finish()
            self._monitor = None
