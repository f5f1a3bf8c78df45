"""The runner factory: local subprocess tasks and Kubernetes pods run the same argv."""

import sys
from pathlib import Path

import pytest

from pipeline_steps.orchestration.launch import step_argv
from pipeline_steps.orchestration.runners import (
    DEFAULT_RUN_ARGS,
    LocalStepOperator,
    parse_manifest,
    step_task,
)
from tests.dags.templates import rendered


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
        assert rendered(container.resources.limits["nvidia.com/gpu"]) == "1"
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
    assert rendered(container.resources.limits["nvidia.com/gpu"]) == "8"
    assert container.security_context.read_only_root_filesystem is True
    assert container.security_context.allow_privilege_escalation is False
    assert container.security_context.capabilities.drop == ["ALL"]
    assert pod.security_context.run_as_non_root is True
    assert "/dev/shm" in {m.mount_path for m in container.volume_mounts}
    kubernetes_validate.validate(ApiClient().sanitize_for_serialization(spec), "1.30", strict=True)


def test_a_set_of_nproc_per_node_is_what_torchrun_starts(make_settings) -> None:
    settings = make_settings("train.nproc_per_node=4")
    run_args = (*DEFAULT_RUN_ARGS, "--set", "train.nproc_per_node=2", "--set", "train.epochs=3")
    argv = step_argv("train", settings, run_args)
    assert "--nproc-per-node=2" in argv and "--nproc-per-node=4" not in argv
    assert "--nproc-per-node=4" in step_argv("train", settings, DEFAULT_RUN_ARGS)


def test_one_gpu_node_runs_one_process_per_gpu(make_settings) -> None:
    settings = make_settings("orchestration.runtime=kubernetes", "kubernetes.train_gpus=4")
    argv = step_argv("train", settings, DEFAULT_RUN_ARGS)
    assert "--standalone" in argv and "--nproc-per-node=4" in argv


ELASTIC = (
    "orchestration.runtime=kubernetes",
    "kubernetes.train_nodes=4",
    "kubernetes.train_min_nodes=2",
    "kubernetes.train_gpus=8",
    "kubernetes.lake_pvc=trainyard-lake",
    "kubernetes.node_selector={gpu: h100}",
    "kubernetes.spot_node_selector={cloud.google.com/gke-spot: 'true'}",
    "kubernetes.spot_tolerations=[{key: cloud.google.com/gke-spot, operator: Equal, "
    "value: 'true', effect: NoSchedule}]",
    "kubernetes.queue_name=team-a",
    "train.max_restarts=10",
)


def _train_group(settings, monkeypatch) -> dict:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    from airflow.sdk import DAG

    monkeypatch.setattr(KubernetesHook, "is_in_cluster", False)  # rendered without a cluster
    with DAG(dag_id="multi_node", schedule=None):
        group = step_task("train", settings)
    return {t.task_id.removeprefix("train."): t for t in group}


def test_elastic_training_outlives_any_lost_pod(make_settings, monkeypatch) -> None:
    """MIN:MAX nodes: the rendezvous store runs apart from the training pods (off the spot
    nodes), the Job ignores disruptions and succeeds once MIN pods did, a budget keeps MIN
    pods through drains; every object is valid Kubernetes."""
    import kubernetes_validate
    import yaml
    from kubernetes.client import ApiClient

    settings = make_settings(*ELASTIC)
    tasks = _train_group(settings, monkeypatch)
    created = list(yaml.safe_load_all(tasks["create_rendezvous_service"].yaml_conf))
    assert created == list(yaml.safe_load_all(tasks["delete_rendezvous_service"].yaml_conf))
    for manifest in created:
        kubernetes_validate.validate(manifest, "1.30", strict=True)
    headless, store_service, store, budget = created
    assert [m["kind"] for m in created] == [
        "Service",
        "Service",
        "Deployment",
        "PodDisruptionBudget",
    ]
    assert headless["spec"]["clusterIP"] == "None"

    # the store: one TCPStore server in the step image, which the training pods do not host
    store_pod = store["spec"]["template"]
    assert store["spec"]["replicas"] == 1
    command = store_pod["spec"]["containers"][0]["command"]
    assert command[:2] == ["python", "-c"] and "is_master=True" in command[2]
    assert "wait_for_workers=False" in command[2] and command[3] == "29500"
    assert store_service["spec"]["ports"][0]["port"] == 29500
    assert store_service["spec"]["selector"].items() <= store_pod["metadata"]["labels"].items()
    avoid = store_pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"]
    assert avoid == [{"key": "cloud.google.com/gke-spot", "operator": "NotIn", "values": ["true"]}]
    assert "tolerations" not in store_pod["spec"]

    spec = tasks["job"].build_job_request_obj()
    job = ApiClient().sanitize_for_serialization(spec)
    for version in ("1.30", "1.33"):  # successPolicy: alpha in 1.30, GA in 1.33
        kubernetes_validate.validate(job, version, strict=True)
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 4
    assert job["spec"]["successPolicy"] == {"rules": [{"succeededCount": 2}]}
    assert job["spec"]["podFailurePolicy"] == {
        "rules": [
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            }
        ]
    }
    assert job["spec"]["backoffLimit"] == 2 and job["spec"]["podReplacementPolicy"] == "Failed"
    # Kueue admits the Job by its label, with as few as MIN pods when the quota is short
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["metadata"]["annotations"] == {"kueue.x-k8s.io/job-min-parallelism": "2"}

    template = job["spec"]["template"]
    pod_labels = template["metadata"]["labels"]
    assert budget["spec"]["minAvailable"] == 2
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert (
        not budget["spec"]["selector"]["matchLabels"].items()
        <= store_pod["metadata"]["labels"].items()
    )
    assert headless["spec"]["selector"].items() <= pod_labels.items()
    assert not store_service["spec"]["selector"].items() <= pod_labels.items()

    pod = template["spec"]
    assert pod["terminationGracePeriodSeconds"] == 60
    assert pod["nodeSelector"] == {"gpu": "h100", "cloud.google.com/gke-spot": "true"}
    assert {
        "key": "cloud.google.com/gke-spot",
        "operator": "Equal",
        "value": "true",
        "effect": "NoSchedule",
    } in pod["tolerations"]
    (wait,) = pod["initContainers"]
    assert wait["command"][3:5] == ["trainyard-rendezvous", "29500"]
    resources = pod["containers"][0]["resources"]
    gpus = resources["limits"]["nvidia.com/gpu"]
    assert resources["requests"]["nvidia.com/gpu"] == gpus and rendered(gpus) == "8"


def test_elastic_torchrun_joins_the_store_as_a_client(make_settings) -> None:
    settings = make_settings(*ELASTIC)
    argv = step_argv("train", settings, DEFAULT_RUN_ARGS)
    launch = argv[1 : argv.index("--no-python")]
    assert launch == [
        "--nnodes=2:4",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=trainyard-rendezvous:29500",
        "--rdzv-id=$(TRAINYARD_JOB_NAME)",
        "--rdzv-conf=is_host=false",
        "--nproc-per-node=8",
        "--max-restarts=10",
    ]
    # ranks come from the rendezvous: a pod's index is no rank, pod 0 is nothing special
    assert not any(a.startswith("--node-rank") for a in argv)


@pytest.mark.slow
def test_torchrun_agents_rendezvous_through_the_store_alone(make_settings, tmp_path) -> None:
    """The store script and the elastic flags, for real on CPU: two agents as clients of the
    store form one world of two; the init container's wait passes once the store listens."""
    import socket
    import subprocess

    from pipeline_steps.orchestration.elastic import STORE_SCRIPT, WAIT_SCRIPT
    from pipeline_steps.orchestration.launch import executable

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = make_settings(*ELASTIC, f"kubernetes.rendezvous_port={port}")
    argv = step_argv("train", settings, DEFAULT_RUN_ARGS)
    launch = [
        a.replace("trainyard-rendezvous", "127.0.0.1").replace("$(TRAINYARD_JOB_NAME)", "t1")
        for a in argv[1 : argv.index("--no-python")]
        if not a.startswith(("--nproc-per-node", "--nnodes", "--max-restarts"))
    ]
    worker = tmp_path / "worker.py"
    worker.write_text(
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.ones(1); dist.all_reduce(t)\n"
        "print('world', dist.get_world_size(), 'sum', int(t.item()), flush=True)\n"
        "dist.destroy_process_group()\n"
    )
    store = subprocess.Popen([sys.executable, "-c", STORE_SCRIPT, str(port)])
    agents: list[subprocess.Popen] = []
    try:
        wait = [sys.executable, "-c", WAIT_SCRIPT, "127.0.0.1", str(port), "60"]
        assert subprocess.run(wait, timeout=90).returncode == 0
        outputs = [tmp_path / f"agent{n}.log" for n in range(2)]
        for output in outputs:
            with output.open("w") as log:
                command = [
                    executable("torchrun"),
                    "--nnodes=2:2",  # both agents in the world, however late one starts
                    "--nproc-per-node=1",
                    "--max-restarts=0",  # a failure shows, instead of a new round alone
                    *launch,
                    str(worker),
                ]
                agents.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
        codes = [agent.wait(timeout=180) for agent in agents]
    finally:
        for process in (*agents, store):
            process.kill()
            process.wait()
    for code, output in zip(codes, outputs, strict=True):
        log = output.read_text()
        assert code == 0, log
        assert "world 2 sum 2" in log
        assert "hosts the TCP store" not in log


def test_a_fixed_size_job_stays_as_it_was(make_settings, monkeypatch) -> None:
    import yaml

    settings = make_settings(
        "orchestration.runtime=kubernetes",
        "kubernetes.train_nodes=3",
        "kubernetes.train_min_nodes=3",
    )
    tasks = _train_group(settings, monkeypatch)
    assert len(list(yaml.safe_load_all(tasks["create_rendezvous_service"].yaml_conf))) == 1
    spec = tasks["job"].build_job_request_obj().spec
    assert spec.backoff_limit == 0 and spec.completions == 3
    assert spec.success_policy is None and spec.pod_failure_policy is None
    assert spec.template.spec.init_containers in (None, [])
    argv = spec.template.spec.containers[0].command
    assert "--nnodes=3" in argv and "--node-rank=$(JOB_COMPLETION_INDEX)" in argv


def _secret_refs(container) -> list[str]:
    return [source.secret_ref.name for source in container.env_from or []]


def test_a_team_s_pods_take_its_mlflow_login_from_its_secret(make_settings, monkeypatch) -> None:
    """Step pods, tuning trials and every pod of a training Job authenticate to MLflow as the
    team's user: ``envFrom`` the team's Secret (``trainyard-mlflow-<team>``), or the one
    ``kubernetes.mlflow_secret`` names; a domain without a team carries none."""
    import kubernetes_validate
    from kubernetes.client import ApiClient

    from pipeline_steps.orchestration.tuning import trial_tasks, tuning_run_args

    team = make_settings("orchestration.runtime=kubernetes", "domain.team=alpha")
    pod = step_task("validate", team).build_pod_request_obj(dry_run=True)
    assert _secret_refs(pod.spec.containers[0]) == ["trainyard-mlflow-alpha"]
    manifest = ApiClient().sanitize_for_serialization(pod) | {"apiVersion": "v1", "kind": "Pod"}
    kubernetes_validate.validate(manifest, "1.30", strict=True)
    # a Secret's keys become variables: nothing of the login is in the pod spec itself
    assert not {e.name for e in pod.spec.containers[0].env} & {"MLFLOW_TRACKING_PASSWORD"}

    trials = trial_tasks(team, tuning_run_args(), [0, 1]).partial_kwargs
    assert [source.secret_ref.name for source in trials["env_from"]] == ["trainyard-mlflow-alpha"]

    nodes = make_settings(
        "orchestration.runtime=kubernetes", "domain.team=alpha", "kubernetes.train_nodes=2"
    )
    job = _train_group(nodes, monkeypatch)["job"].build_job_request_obj()
    assert _secret_refs(job.spec.template.spec.containers[0]) == ["trainyard-mlflow-alpha"]

    named = make_settings(
        "orchestration.runtime=kubernetes", "domain.team=alpha", "kubernetes.mlflow_secret=ml-b"
    )
    pod = step_task("promote", named).build_pod_request_obj(dry_run=True)
    assert _secret_refs(pod.spec.containers[0]) == ["ml-b"]
    alone = make_settings("orchestration.runtime=kubernetes")
    pod = step_task("train", alone).build_pod_request_obj(dry_run=True)
    assert _secret_refs(pod.spec.containers[0]) == []


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["kubernetes.mlflow_secret=Team_B"], "kubernetes.mlflow_secret"),
        (["kubernetes.train_min_nodes=5"], "kubernetes.train_min_nodes"),
        (["kubernetes.queue_name=Team A!"], "kubernetes.queue_name"),
        (["kubernetes.termination_grace_s=0"], "kubernetes.termination_grace_s"),
        (["orchestration.train_priority=0"], "orchestration.train_priority"),
        (["orchestration.gpu_pool_slots=0"], "orchestration.gpu_pool_slots"),
    ],
)
def test_settings_refuse_bad_values_and_name_them(make_settings, overrides, named) -> None:
    from pipeline_steps.core.settings import SettingsError

    with pytest.raises(SettingsError, match=named.replace(".", r"\.")):
        make_settings("kubernetes.train_nodes=4", *overrides)


def test_a_pod_killed_before_its_checkpoint_is_refused(make_settings) -> None:
    """The pod's grace must leave the training its time to checkpoint after SIGTERM."""
    from pipeline_steps.core.settings import SettingsError

    settings = make_settings(
        "orchestration.runtime=kubernetes",
        "kubernetes.termination_grace_s=20",
        "train.preemption_grace_s=25",
    )
    with pytest.raises(SettingsError, match=r"termination_grace_s \(20\).*preemption_grace_s"):
        step_task("train", settings)
    step_task("ingest", settings)  # other steps have nothing to checkpoint
    longer = make_settings("orchestration.runtime=kubernetes", "kubernetes.termination_grace_s=26")
    pod = step_task("train", longer).build_pod_request_obj(dry_run=True)
    assert pod.spec.termination_grace_period_seconds == 26


def test_a_step_pod_loads_the_settings_the_dag_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pod's environment alone (its own home, no config file) gives the DAG's settings:
    what the DAG's config changed, and an empty MLflow artifact root stays empty."""
    from pipeline_steps.core.settings import load_settings
    from pipeline_steps.orchestration.runners import pod_environment

    scheduler = {"TRAINYARD_HOME": str(tmp_path / "scheduler")}
    monkeypatch.setenv("TRAINYARD_HOME", scheduler["TRAINYARD_HOME"])
    settings = load_settings(
        overrides=[
            "orchestration.runtime=kubernetes",
            "kubernetes.lake_pvc=lake",
            "mlflow.tracking_uri=http://mlflow:5000",
            "train.epochs=3",
            "train.hidden_dims=[32, 16]",
            "validation.data_docs=false",
        ],
        environ=scheduler,
    )
    assert settings.mlflow.artifact_root == ""  # the server decides
    pod = load_settings(environ={"TRAINYARD_HOME": "/tmp/trainyard", **pod_environment(settings)})
    assert pod.lake.root == "/lake" and pod.mlflow.artifact_root == ""
    assert pod.train == settings.train and pod.validation == settings.validation
    assert pod.kubernetes == settings.kubernetes and pod.mlflow == settings.mlflow


def test_a_jobs_own_nodes_gpus_and_memory_size_its_training_job(make_settings, monkeypatch) -> None:
    """A job of a multi-node domain asking for 2 nodes of 4 GPUs with 64Gi each: the Job's
    pods, completions and failure allowance, torchrun's world and each pod's GPUs and memory
    limit, as the train task renders and sizes them when it runs."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    from airflow.sdk import DAG

    from pipeline_steps.orchestration.params import form_defaults
    from pipeline_steps.orchestration.trigger import training_run_args

    settings = make_settings(
        "orchestration.runtime=kubernetes",
        "kubernetes.train_nodes=3",
        "kubernetes.train_gpus=8",
        "kubernetes.train_min_nodes=2",
    )
    with DAG(dag_id="sized", schedule=None):
        group = step_task("train", settings, training_run_args())
    job = {t.task_id: t for t in group}["train.job"]
    own = {"nodes": 2, "gpus_per_node": 4, "memory_per_node": "64Gi"}
    params = form_defaults(settings) | own
    job.size_for(params)
    monkeypatch.setattr(KubernetesHook, "is_in_cluster", False)
    spec = job.build_job_request_obj()
    assert spec.spec.completions == spec.spec.parallelism == 2
    assert spec.spec.backoff_limit == 0  # 2 nodes, 2 at the least: no node may be lost
    bigger = form_defaults(settings) | {"nodes": 5}
    job.size_for(bigger)
    assert (job.parallelism, job.completions, job.backoff_limit) == (5, 5, 3)
    container = spec.spec.template.spec.containers[0]
    launch = _with(container.command, params)
    assert "--nnodes=2:2" in launch and "--nproc-per-node=4" in launch
    assert "kubernetes.train_gpus=4" in launch and "kubernetes.train_nodes=2" in launch
    resources = container.resources
    assert rendered(resources.limits["nvidia.com/gpu"], **params) == "4"
    assert rendered(resources.requests["nvidia.com/gpu"], **params) == "4"
    assert rendered(resources.limits["memory"], **params) == "64Gi"
    # a run asking nothing of its own: the settings' size
    defaults = form_defaults(settings)
    assert [rendered(resources.limits[k], **defaults) for k in ("nvidia.com/gpu", "memory")] == [
        "8",
        settings.kubernetes.memory_limit,
    ]
    assert "--nnodes=2:3" in _with(container.command, defaults)


def _with(argv: list[str], params: dict) -> list[str]:
    """The arguments the run's Params decide, rendered (the others need a running task)."""
    return [rendered(a, **params) if "params." in a else a for a in argv]


def test_a_fixed_size_job_of_fewer_nodes_may_lose_none(make_settings) -> None:
    from airflow.sdk import DAG

    from pipeline_steps.orchestration.params import form_defaults
    from pipeline_steps.orchestration.trigger import training_run_args

    settings = make_settings(
        "orchestration.runtime=kubernetes", "kubernetes.train_nodes=3", "kubernetes.train_gpus=8"
    )
    with DAG(dag_id="fixed", schedule=None):
        group = step_task("train", settings, training_run_args())
    job = {t.task_id: t for t in group}["train.job"]
    job.size_for(form_defaults(settings) | {"nodes": 2})
    assert (job.parallelism, job.completions, job.backoff_limit) == (2, 2, 0)
    launch = _with(job.cmds, form_defaults(settings) | {"nodes": 2})
    assert "--nnodes=2" in launch and "--node-rank=$(JOB_COMPLETION_INDEX)" in launch
