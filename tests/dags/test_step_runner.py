"""The runner factory: local subprocess tasks and Kubernetes pods run the same argv."""

import sys
from pathlib import Path

import pytest

from pipeline_steps.orchestration.runners import (
    DEFAULT_RUN_ARGS,
    LocalStepOperator,
    parse_manifest,
    step_task,
)
from pipeline_steps.steps.registry import step_argv


def test_manifest_is_the_last_json_line_with_a_step() -> None:
    lines = ["INFO starting", '{"step": "ingest", "rows": 3}', '{"other": 1}', "bye"]
    assert parse_manifest(lines) == {"step": "ingest", "rows": 3}
    assert parse_manifest(["no json here"]) is None


def test_local_operator_streams_output_and_returns_the_manifest(tmp_path: Path) -> None:
    script = tmp_path / "fake_step.py"
    script.write_text('print(\'working\'); print(\'{"step": "x", "rows": 7}\')')
    op = LocalStepOperator(task_id="x", step="x", argv=[sys.executable, str(script)])
    assert op.execute(context={}) == {"step": "x", "rows": 7}


def test_local_operator_fails_with_the_step_message(tmp_path: Path) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    script = tmp_path / "failing_step.py"
    script.write_text(
        "import sys; print('trainyard step validate failed (permanent): column dest missing', "
        "file=sys.stderr); sys.exit(2)"
    )
    op = LocalStepOperator(task_id="x", step="validate", argv=[sys.executable, str(script)])
    with pytest.raises(AirflowFailException, match=r"exit code 2; .*column dest missing"):
        op.execute(context={})


@pytest.mark.parametrize("step", ["ingest", "train"])
def test_kubernetes_pod_runs_the_local_argv(make_settings, step: str) -> None:
    import kubernetes_validate
    from kubernetes.client import ApiClient

    settings = make_settings(
        "orchestration.runtime=kubernetes",
        "kubernetes.train_gpus=1",
        "kubernetes.lake_pvc=trainyard-lake",
    )
    op = step_task(step, settings)
    pod = op.build_pod_request_obj(dry_run=True)
    container = pod.spec.containers[0]
    assert container.command == step_argv(step, settings, DEFAULT_RUN_ARGS)
    assert container.image == settings.kubernetes.image
    env = {e.name: e.value for e in container.env}
    assert env["TRAINYARD_LAKE__ROOT"] == "/lake"
    assert container.security_context.read_only_root_filesystem is True
    assert container.security_context.capabilities.drop == ["ALL"]
    assert pod.spec.security_context.run_as_non_root is True
    if step == "train":
        assert container.resources.limits["nvidia.com/gpu"] == "1"
    manifest = ApiClient().sanitize_for_serialization(pod)
    manifest.setdefault("apiVersion", "v1")
    manifest.setdefault("kind", "Pod")
    kubernetes_validate.validate(manifest, "1.30", strict=True)


def test_multi_node_training_is_an_indexed_job_around_a_headless_service(
    make_settings, monkeypatch
) -> None:
    """Several nodes: create Service → Indexed Job (torchrun per pod, c10d rendezvous at pod 0)
    → delete Service whatever happened; every spec is valid Kubernetes."""
    import kubernetes_validate
    import yaml
    from airflow.sdk import DAG
    from kubernetes.client import ApiClient

    settings = make_settings(
        "orchestration.runtime=kubernetes",
        "kubernetes.train_nodes=3",
        "kubernetes.train_gpus=8",
        "kubernetes.lake_pvc=trainyard-lake",
        "kubernetes.node_selector={gpu: h100}",
        "train.collective_timeout_s=90",
    )
    with DAG(dag_id="multi_node", schedule=None):
        group = step_task("train", settings)
    tasks = {t.task_id: t for t in group}
    create, job, delete = (
        tasks[f"train.{n}"]
        for n in ("create_rendezvous_service", "job", "delete_rendezvous_service")
    )
    assert create.downstream_task_ids == {job.task_id}
    assert job.downstream_task_ids == {delete.task_id}
    assert delete.trigger_rule == "all_done"

    service = yaml.safe_load(create.yaml_conf)
    assert service == yaml.safe_load(delete.yaml_conf)
    assert service["spec"]["clusterIP"] == "None"
    kubernetes_validate.validate(service, "1.30", strict=True)

    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    monkeypatch.setattr(KubernetesHook, "is_in_cluster", False)  # rendered without a cluster
    spec = job.build_job_request_obj()
    assert spec.spec.completion_mode == "Indexed"
    assert spec.spec.completions == spec.spec.parallelism == 3
    pod = spec.spec.template.spec
    assert pod.subdomain == service["metadata"]["name"]
    assert pod.node_selector == {"gpu": "h100"}
    assert service["spec"]["selector"].items() <= spec.spec.template.metadata.labels.items()
    container = pod.containers[0]
    argv = container.command
    assert argv[0] == "torchrun" and "--nnodes=3" in argv and "--nproc-per-node=8" in argv
    assert "--rdzv-backend=c10d" in argv and "--node-rank=$(JOB_COMPLETION_INDEX)" in argv
    endpoint = next(a for a in argv if a.startswith("--rdzv-endpoint="))
    assert endpoint == "--rdzv-endpoint=$(TRAINYARD_JOB_NAME)-0.trainyard-train:29500"
    env = {e.name: e for e in container.env}
    assert (
        env["TRAINYARD_JOB_NAME"].value_from.field_ref.field_path == "metadata.labels['job-name']"
    )
    assert "job-completion-index" in env["JOB_COMPLETION_INDEX"].value_from.field_ref.field_path
    assert env["TRAINYARD_TRAIN__COLLECTIVE_TIMEOUT_S"].value == "90"
    assert container.resources.limits["nvidia.com/gpu"] == "8"
    assert container.security_context.read_only_root_filesystem is True
    assert container.security_context.allow_privilege_escalation is False
    assert container.security_context.capabilities.drop == ["ALL"]
    assert pod.security_context.run_as_non_root is True
    assert "/dev/shm" in {m.mount_path for m in container.volume_mounts}
    kubernetes_validate.validate(ApiClient().sanitize_for_serialization(spec), "1.30", strict=True)


def test_one_gpu_node_runs_one_process_per_gpu(make_settings) -> None:
    settings = make_settings("orchestration.runtime=kubernetes", "kubernetes.train_gpus=4")
    argv = step_argv("train", settings, DEFAULT_RUN_ARGS)
    assert "--standalone" in argv and "--nproc-per-node=4" in argv
