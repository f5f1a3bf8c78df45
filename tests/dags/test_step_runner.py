"""The runner factory: local subprocess tasks and Kubernetes pods run the same argv."""

import sys
from pathlib import Path

import pytest

from pipeline_steps.orchestration import LocalStepOperator, parse_manifest, step_argv, step_task


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
    from airflow.exceptions import AirflowException

    script = tmp_path / "failing_step.py"
    script.write_text(
        "import sys; print('trainyard step validate failed: column dest missing', "
        "file=sys.stderr); sys.exit(2)"
    )
    op = LocalStepOperator(task_id="x", step="validate", argv=[sys.executable, str(script)])
    with pytest.raises(AirflowException, match=r"exited with code 2: .*column dest missing"):
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
    assert container.command == step_argv(step, settings)
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
