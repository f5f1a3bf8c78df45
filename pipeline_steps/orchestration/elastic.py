"""What an elastic training Job adds (``kubernetes.train_min_nodes`` below ``train_nodes``).

torchrun runs with ``--nnodes=MIN:MAX`` and every agent a client of the c10d rendezvous store
(``--rdzv-conf=is_host=false``): the store runs in a Deployment of its own, kept off the spot
nodes, so the loss of any training pod loses no rendezvous state. The Indexed Job around the
agents:

- ignores disruptions (``podFailurePolicy``: a pod failed with the ``DisruptionTarget``
  condition, i.e. preempted, evicted or drained, counts against nothing and is recreated, and
  its agent rejoins the next rendezvous round);
- succeeds once ``MIN`` indexes succeeded (``successPolicy``): torchrun agents exit 0 only when
  the training finished, and together, so ``MIN`` successes mean a finished run even when the
  pods of lost nodes still wait for capacity; the Job then ends those;
- fails after ``MAX - MIN`` other pod failures (``backoffLimit``, set by the runner factory):
  the failures of nodes lost without that condition are absorbed as long as a minimal world
  could remain; a failure of the training itself fails every agent and so the Job;
- has a PodDisruptionBudget of ``minAvailable: MIN``: voluntary evictions (drains, upgrades,
  autoscaler) never take the run below its minimal world; a spot reclaim ignores it.

Rendered here as plain manifests (the store, the budget) and a Job template that the runner
factory (:mod:`pipeline_steps.orchestration.runners`) merges into its KubernetesJobOperator.
"""

from __future__ import annotations

from typing import Any

from pipeline_steps.core.settings import Settings
from pipeline_steps.orchestration.launch import RENDEZVOUS_STORE, TRAIN_SERVICE

ELASTIC_POD_LABELS = {"trainyard/training": "elastic"}
"""The label of an elastic Job's training pods (the disruption budget selects them)."""

STORE_LABELS = {"app.kubernetes.io/name": "trainyard", "trainyard/component": "rendezvous"}

KUEUE_MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
"""Kueue's partial admission: admit the Job with fewer pods (not below this) when the quota
has no room for all."""

STORE_SCRIPT = """\
import signal, sys
from torch.distributed import TCPStore

# the c10d rendezvous store: serves the agents until the Deployment is deleted
store = TCPStore("localhost", int(sys.argv[1]), is_master=True, wait_for_workers=False)
print(f"trainyard rendezvous store on port {sys.argv[1]}", flush=True)
while True:
    signal.pause()
"""

WAIT_SCRIPT = """\
import socket, sys, time

host, port, deadline = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
while True:
    try:
        socket.create_connection((host, port), timeout=5).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit(f"trainyard: rendezvous store {host}:{port} unreachable")
        time.sleep(2)
"""


def _store_affinity(settings: Settings) -> dict[str, Any] | None:
    """Keep the store off the nodes carrying any of the spot labels."""
    spot = settings.kubernetes.spot_node_selector
    if not spot:
        return None
    avoid = [{"key": k, "operator": "NotIn", "values": [v]} for k, v in spot.items()]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": avoid}]
            }
        }
    }


def rendezvous_store(settings: Settings, security: Any) -> list[dict[str, Any]]:
    """The store's Service and Deployment: one replica of the step image, ``security`` (a
    ``V1SecurityContext``) as its container's security context."""
    from kubernetes.client import ApiClient

    cfg = settings.kubernetes
    metadata = {"name": RENDEZVOUS_STORE, "namespace": cfg.namespace, "labels": STORE_LABELS}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "selector": STORE_LABELS,
            "ports": [{"name": "rendezvous", "port": cfg.rendezvous_port}],
        },
    }
    container = {
        "name": "store",
        "image": cfg.image,
        "imagePullPolicy": cfg.image_pull_policy,
        "command": ["python", "-c", STORE_SCRIPT, str(cfg.rendezvous_port)],
        "ports": [{"name": "rendezvous", "containerPort": cfg.rendezvous_port}],
        "readinessProbe": {"tcpSocket": {"port": cfg.rendezvous_port}, "periodSeconds": 5},
        # torch's import is most of it
        "resources": {
            "requests": {"cpu": "100m", "memory": "512Mi"},
            "limits": {"cpu": "1", "memory": "1Gi"},
        },
        "securityContext": ApiClient().sanitize_for_serialization(security),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
    }
    if affinity := _store_affinity(settings):
        pod["affinity"] = affinity
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # never two stores
            "selector": {"matchLabels": STORE_LABELS},
            "template": {"metadata": {"labels": STORE_LABELS}, "spec": pod},
        },
    }
    return [service, deployment]


def disruption_budget(settings: Settings) -> dict[str, Any]:
    """The training pods' PodDisruptionBudget: voluntary evictions leave ``min_nodes`` of them
    (an integer ``minAvailable``: the only kind a Job's pods can have)."""
    cfg = settings.kubernetes
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": TRAIN_SERVICE,
            "namespace": cfg.namespace,
            "labels": {"app.kubernetes.io/name": "trainyard"},
        },
        "spec": {
            "minAvailable": cfg.min_nodes,
            "selector": {"matchLabels": ELASTIC_POD_LABELS},
            # a pod that is not running anyway never blocks a drain
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def elastic_job_template(settings: Settings) -> Any:
    """The Job fields the operator has no arguments for: failure, success and replacement
    policies, and Kueue's partial admission when a queue is set."""
    from kubernetes.client import models as k8s

    cfg = settings.kubernetes
    annotations = {KUEUE_MIN_PARALLELISM: str(cfg.min_nodes)} if cfg.queue_name else None
    disrupted = k8s.V1PodFailurePolicyOnPodConditionsPattern(type="DisruptionTarget", status="True")
    return k8s.V1Job(
        metadata=k8s.V1ObjectMeta(annotations=annotations),
        spec=k8s.V1JobSpec(
            template=k8s.V1PodTemplateSpec(spec=k8s.V1PodSpec(containers=[])),
            pod_failure_policy=k8s.V1PodFailurePolicy(
                rules=[k8s.V1PodFailurePolicyRule(action="Ignore", on_pod_conditions=[disrupted])]
            ),
            success_policy=k8s.V1SuccessPolicy(
                rules=[k8s.V1SuccessPolicyRule(succeeded_count=cfg.min_nodes)]
            ),
            # a replacement starts once the lost pod is gone: never two pods of one index
            pod_replacement_policy="Failed",
        ),
    )


def store_wait(settings: Settings, security: Any) -> Any:
    """The training pod's init container: waits for the store to answer (it may start after
    the training pods), at most ``orchestration.step_timeout_s``."""
    from kubernetes.client import models as k8s

    cfg = settings.kubernetes
    small = {"cpu": "100m", "memory": "128Mi"}
    return k8s.V1Container(
        name="wait-for-rendezvous",
        image=cfg.image,
        image_pull_policy=cfg.image_pull_policy,
        command=[
            "python",
            "-c",
            WAIT_SCRIPT,
            RENDEZVOUS_STORE,
            str(cfg.rendezvous_port),
            str(settings.orchestration.step_timeout_s),
        ],
        resources=k8s.V1ResourceRequirements(requests=small, limits=small),
        security_context=security,
    )
