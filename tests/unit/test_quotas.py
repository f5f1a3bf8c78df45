"""Team quotas: the deployment's ``orchestration.quotas``, the pools they size, the refusal of a
domain's file setting its own, the cluster policy giving a job's tasks its priority, and
``submit``'s checks against the quota."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline_steps.commands.jobs import JobRefused, check_queue, job_conf, job_resources
from pipeline_steps.core.deployment import DomainFile, domain_settings_files, team_quota
from pipeline_steps.core.settings import SettingsError, TeamQuota, load_settings
from pipeline_steps.orchestration import job_resources as job_resources_module
from pipeline_steps.orchestration.job_resources import Resources
from pipeline_steps.orchestration.policy import job_priority, task_instance_mutation_hook
from pipeline_steps.orchestration.pools import gpu_task_args, train_pool
from pipeline_steps.services.gpu_pool import domain_pools
from tests.conftest import ROOT

HOTEL = ROOT / "examples" / "hotel_rates" / "settings.yaml"
QUOTAS = "{revenue: {runs: 3, gpus: 4, nodes: 2, queued: 5}}"


def _deployment(tmp_path: Path, **env: str) -> dict[str, str]:
    domains = tmp_path / "domains"
    domains.mkdir(exist_ok=True)
    return {
        "TRAINYARD_HOME": str(tmp_path / "home"),
        "TRAINYARD_ORCHESTRATION__DOMAINS_DIR": str(domains),
        **env,
    }


def test_quotas_are_read_per_team_and_a_bad_one_is_named() -> None:
    settings = load_settings(overrides=[f"orchestration.quotas={QUOTAS}"], environ={})
    assert settings.orchestration.quotas == {
        "revenue": TeamQuota(runs=3, gpus=4, nodes=2, queued=5)
    }
    with pytest.raises(SettingsError, match=r"orchestration\.quotas\.revenue\.runs must be at"):
        load_settings(overrides=["orchestration.quotas={revenue: {runs: 0}}"], environ={})
    with pytest.raises(SettingsError, match=r"orchestration\.quotas\.revenue\.slots"):
        load_settings(overrides=["orchestration.quotas={revenue: {slots: 2}}"], environ={})
    with pytest.raises(SettingsError, match="'Revenue' is no team name"):
        load_settings(overrides=["orchestration.quotas={Revenue: {runs: 2}}"], environ={})


def test_every_domain_runs_under_the_deployments_quotas(tmp_path: Path) -> None:
    environ = _deployment(tmp_path, TRAINYARD_ORCHESTRATION__QUOTAS=QUOTAS)
    hotel = next(d for d in domain_settings_files(environ) if d.name == "hotel_rate")
    assert team_quota(hotel.settings) == TeamQuota(runs=3, gpus=4, nodes=2, queued=5)
    # the team's GPU pool is its GPU quota; its CPU trainings take the training pool
    assert hotel.settings.orchestration.gpu_pool_slots == 4
    assert train_pool(hotel.settings) == "train-revenue"
    assert gpu_task_args(hotel.settings, 0, 10, training=True) == {
        "priority_weight": 10,
        "weight_rule": "absolute",
        "pool": "train-revenue",
        "pool_slots": 1,
    }
    assert "pool" not in gpu_task_args(hotel.settings, 0, 1)  # a task that is no training
    pools = {p.name: p.slots for p in domain_pools(hotel.settings)}
    assert pools == {"gpu-revenue": 4, "team-revenue": 16, "train-revenue": 3}


def test_a_domain_file_setting_its_own_quota_is_refused(tmp_path: Path) -> None:
    environ = _deployment(tmp_path)
    own = Path(environ["TRAINYARD_ORCHESTRATION__DOMAINS_DIR"]) / "greedy.yaml"
    own.write_text(
        "domain: {module: hotel_rates.domain, name: greedy_rate, team: revenue}\n"
        "orchestration:\n  quotas: {revenue: {runs: 99}}\n"
    )
    refused: list[str] = []
    names = [d.name for d in domain_settings_files(environ, refused=refused)]
    assert "greedy_rate" not in names and "hotel_rate" in names
    assert len(refused) == 1 and "orchestration.quotas is the deployment's" in refused[0]
    assert str(own) in refused[0]


def test_the_policy_gives_each_task_of_a_job_its_priority() -> None:
    run = SimpleNamespace(dag_id="hotel_rate_training", conf={"priority": 40})
    ti = SimpleNamespace(priority_weight=3)
    task_instance_mutation_hook(ti, run)
    assert ti.priority_weight == 40
    # a scheduled run, another DAG, a value that is no priority: the task keeps its own
    for dag_id, conf in [
        ("hotel_rate_training", {}),
        ("hotel_rate_tuning", {"priority": 40}),
        ("hotel_rate_training", {"priority": True}),
        ("hotel_rate_training", {"priority": 0}),
    ]:
        assert job_priority(dag_id, conf) is None
    untouched = SimpleNamespace(priority_weight=3)
    task_instance_mutation_hook(untouched, None)
    assert untouched.priority_weight == 3


def _hotel(tmp_path: Path, quotas: str = QUOTAS) -> DomainFile:
    environ = _deployment(tmp_path, TRAINYARD_ORCHESTRATION__QUOTAS=quotas)
    return next(d for d in domain_settings_files(environ) if d.name == "hotel_rate")


def test_a_job_beyond_the_queue_is_refused_naming_the_limit(tmp_path: Path) -> None:
    hotel = _hotel(tmp_path)
    check_queue(hotel, waiting=4)  # within the limit
    with pytest.raises(JobRefused, match=r"5 job\(s\) waiting.*quotas\.revenue\.queued is 5"):
        check_queue(hotel, waiting=5)


def test_a_jobs_resources_and_form_values_are_checked_before_it_is_sent(tmp_path: Path) -> None:
    hotel = _hotel(tmp_path)
    assert job_resources(hotel, {"nproc_per_node": 2}) == Resources(2, 1, 0, "")
    assert job_conf(hotel, {"priority": "30", "epochs": "2", "skip_promotion": "true"}) == {
        "priority": 30,
        "epochs": 2,
        "skip_promotion": True,
    }
    with pytest.raises(JobRefused, match=r"epochs \(train\.epochs\) = '0' is refused"):
        job_conf(hotel, {"epochs": "0"})
    with pytest.raises(JobRefused, match="'gpus' is no field of the training form"):
        job_conf(hotel, {"gpus": "2"})
    with pytest.raises(JobRefused, match=r"memory_per_node \(kubernetes\.train_memory_limit\)"):
        job_conf(hotel, {"memory_per_node": "lots"})
    with pytest.raises(JobRefused, match="model"):
        job_conf(hotel, {"model": "no_such_model"})
    # fields that only fail together: the settings loader, as the run's first task
    with pytest.raises(JobRefused, match="force"):
        job_conf(hotel, {"force_promotion": "true"})


class _Airflow:
    """What ``team_jobs`` and ``cancel`` ask of Airflow's REST API, answered from lists."""

    def __init__(
        self,
        runs: list[dict],
        trains: list[dict],
        done: list[dict],
        paused: bool = False,
        trials: list[dict] | None = None,
    ) -> None:
        self.runs, self.trains, self.done, self.paused = runs, trains, done, paused
        self.trials = trials or []
        self.patched: list[tuple[str, dict]] = []
        self.unpaused: list[str] = []

    def post(self, path: str, body: dict) -> dict:
        if path.endswith("/dagRuns/list"):
            return {"dag_runs": self.runs, "total_entries": len(self.runs)}
        found = self.trials if body.get("task_ids") == ["trial"] else self.trains
        return {"task_instances": found, "total_entries": len(found)}

    def get(self, path: str) -> dict:
        if path == "/api/v2/dags/hotel_rate_training":
            return {"dag_id": "hotel_rate_training", "is_paused": self.paused}
        return {"dag_runs": self.done}

    def unpause(self, dag_id: str) -> None:
        self.unpaused.append(dag_id)
        self.paused = False

    def run(self, dag_id: str, run_id: str) -> dict:
        from pipeline_steps.services.airflow_api import AirflowApiError

        found = [r for r in self.runs if r["dag_run_id"] == run_id and r["dag_id"] == dag_id]
        if not found:
            raise AirflowApiError("not found", 404)
        return found[0]

    def patch(self, path: str, body: dict) -> None:
        self.patched.append((path, body))


def _run(
    run_id: str, day: str, queued: str, priority: int | None = None, state: str = "running"
) -> dict:
    conf = {} if priority is None else {"priority": priority}
    return {
        "dag_id": "hotel_rate_training",
        "dag_run_id": run_id,
        "logical_date": f"{day}T10:00:00Z",
        "queued_at": f"2026-12-02T{queued}Z",
        "state": state,
        "conf": conf,
    }


def test_runs_airflow_holds_back_start_oldest_day_first_after_the_started_ones(
    tmp_path: Path,
) -> None:
    """With the DAG's max_active_runs reached, Airflow keeps further runs queued and starts
    them by day, whatever their priority: the queue says so."""
    from pipeline_steps.commands.jobs import team_jobs

    hotel = _hotel(tmp_path, "{revenue: {runs: 1, queued: 5}}")
    api = _Airflow(
        runs=[
            _run("started", "2017-05-04", "10:00:00", 5),
            _run("later-high", "2017-05-03", "10:01:00", 50, state="queued"),
            _run("earlier-low", "2017-05-02", "10:02:00", 1, state="queued"),
        ],
        trains=[],
        done=[],
    )
    jobs = sorted(team_jobs(api, [hotel]), key=lambda j: j.position)
    assert [(j.run_id, j.position) for j in jobs] == [
        ("started", 1),
        ("earlier-low", 2),
        ("later-high", 3),
    ]


def test_jobs_of_a_paused_dag_are_listed_paused_and_submit_can_unpause_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline_steps.commands.jobs import submit, team_jobs

    hotel = _hotel(tmp_path, "{revenue: {runs: 1, queued: 5}}")
    api = _Airflow(
        runs=[_run("a", "2017-05-01", "10:00:00", 10, state="queued")], trains=[], done=[]
    )
    api.paused = True
    [job] = team_jobs(api, [hotel])
    assert (job.state, job.position, job.starts_in_s) == ("paused", 0, None)
    posted: list[dict] = []

    def post(path: str, body: dict) -> dict:
        if path.endswith("/list"):
            return _Airflow.post(api, path, body)
        posted.append(body)
        return {"dag_id": "hotel_rate_training", "dag_run_id": body["dag_run_id"], "conf": {}}

    monkeypatch.setattr(api, "post", post)
    monkeypatch.setattr("pipeline_steps.commands.jobs._team_mates", lambda domain: [])
    kept = submit(api, hotel, "2017-05-02", {"epochs": "1"})
    assert kept["paused"] is True and kept["waiting"] == 1 and api.unpaused == []
    freed = submit(api, hotel, "2017-05-03", {"epochs": "1"}, unpause=True)
    assert freed["paused"] is False and api.unpaused == ["hotel_rate_training"]
    assert len(posted) == 2


def test_the_queue_lists_jobs_in_the_order_they_start_with_estimated_times(
    tmp_path: Path,
) -> None:
    from datetime import UTC, datetime

    from pipeline_steps.commands.jobs import cancel, team_jobs

    hotel = _hotel(tmp_path, "{revenue: {runs: 1, queued: 5}}")
    api = _Airflow(
        runs=[
            _run("a", "2017-05-01", "10:00:00", 10),
            _run("b", "2017-05-03", "10:01:00", 50),
            _run("c", "2017-05-02", "10:02:00"),
            _run("d", "2017-05-02", "10:03:00", 50),
        ],
        # a's training started ten minutes ago; the others wait for the team's one slot
        trains=[
            {
                "dag_id": "hotel_rate_training",
                "dag_run_id": "a",
                "state": "running",
                "start_date": "2026-12-02T10:05:00Z",
            },
            {
                "dag_id": "hotel_rate_training",
                "dag_run_id": "b",
                "state": "scheduled",
                "start_date": None,
            },
        ],
        # the domain's runs take 30 minutes (median)
        done=[
            {"start_date": "2026-12-01T10:00:00Z", "end_date": f"2026-12-01T10:{m}:00Z"}
            for m in ("20", "30", "40")
        ],
    )
    now = datetime(2026, 12, 2, 10, 15, tzinfo=UTC)
    jobs = {j.run_id: j for j in team_jobs(api, [hotel], now)}
    assert jobs["a"].state == "running" and jobs["a"].ends_in_s == 20 * 60
    # the highest priority first, then the earlier day, then the earlier submission
    order = sorted((j for j in jobs.values() if j.state == "waiting"), key=lambda j: j.position)
    assert [j.run_id for j in order] == ["d", "b", "c"]
    assert jobs["c"].priority == hotel.settings.orchestration.train_priority
    assert [(j.starts_in_s, j.ends_in_s) for j in order] == [
        (20 * 60, 50 * 60),
        (50 * 60, 80 * 60),
        (80 * 60, 110 * 60),
    ]
    assert "cancelled job c of hotel_rate_training" in cancel(api, [hotel], "c")
    assert api.patched == [
        (
            "/api/v2/dags/hotel_rate_training/dagRuns/c",
            {"state": "failed", "note": "cancelled with trainyard cancel"},
        )
    ]
    with pytest.raises(JobRefused, match="no job 'z'"):
        cancel(api, [hotel], "z")


def test_slots_the_teams_trials_hold_are_not_free_for_its_waiting_jobs(tmp_path: Path) -> None:
    """A tuning trial takes a slot of the team's training pool: of two slots, one held by a
    trial leaves one free at once, and the next job waits for an end nobody estimates."""
    from pipeline_steps.commands.jobs import team_jobs

    hotel = _hotel(tmp_path, "{revenue: {runs: 2, queued: 5}}")
    trial = {"dag_id": "hotel_rate_tuning", "task_id": "trial", "pool": "train-revenue"}
    elsewhere = trial | {"pool": "default_pool"}  # not the team's training pool
    api = _Airflow(
        runs=[_run("a", "2017-05-01", "10:00:00", 20), _run("b", "2017-05-02", "10:01:00", 10)],
        trains=[],
        done=[],
        trials=[trial | {"state": "running"}, elsewhere | {"state": "running"}],
    )
    jobs = {j.run_id: j for j in team_jobs(api, [hotel])}
    assert (jobs["a"].position, jobs["a"].starts_in_s) == (1, 0.0)
    assert (jobs["b"].position, jobs["b"].starts_in_s) == (2, None)


def test_a_jobs_pods_carry_the_kueue_priority_class_of_its_priority() -> None:
    import jinja2

    from pipeline_steps.orchestration.runners import PRIORITY_CLASS_LABEL, pod_arguments

    classes = '{high: "50", normal: "5", low: "1"}'
    settings = load_settings(
        overrides=["orchestration.runtime=kubernetes", f"kubernetes.priority_classes={classes}"],
        environ={},
    )
    label = pod_arguments("train", settings)["labels"][PRIORITY_CLASS_LABEL]
    render = jinja2.Environment().from_string(label).render
    assert [render(params=p) for p in ({"priority": 70}, {"priority": 9}, {"priority": 2})] == [
        "high",
        "normal",
        "low",
    ]
    assert render(params={}) == "normal"  # a run without one: orchestration.train_priority
    no_classes = load_settings(overrides=["orchestration.runtime=kubernetes"], environ={})
    assert PRIORITY_CLASS_LABEL not in pod_arguments("train", no_classes)["labels"]
    with pytest.raises(SettingsError, match="the lowest floor must be 1"):
        load_settings(overrides=['kubernetes.priority_classes={high: "50"}'], environ={})
    with pytest.raises(SettingsError, match=r"'high': 'x' must map"):
        load_settings(overrides=['kubernetes.priority_classes={high: "x"}'], environ={})


def test_a_wrong_airflow_login_is_one_line_naming_the_answer(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from pipeline_steps.commands.cli import main

    class Refusing(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.send_response(401)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("TRAINYARD_AIRFLOW_URL", f"http://127.0.0.1:{server.server_address[1]}")
        monkeypatch.setenv("TRAINYARD_AIRFLOW_PASSWORD", "wrong")
        assert main(["jobs"]) == 2
        said = capsys.readouterr().err.strip().splitlines()[-1]
        assert said.startswith("trainyard jobs failed: Airflow answered POST /auth/token: HTTP 401")
        monkeypatch.delenv("TRAINYARD_AIRFLOW_PASSWORD")
        monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))  # no password kept there either
        assert main(["jobs"]) == 2
        assert "set TRAINYARD_AIRFLOW_PASSWORD" in capsys.readouterr().err
    finally:
        server.shutdown()
        server.server_close()


KUBERNETES = {
    "TRAINYARD_ORCHESTRATION__RUNTIME": "kubernetes",
    "TRAINYARD_KUBERNETES__TRAIN_GPUS": "2",
    "TRAINYARD_KUBERNETES__TRAIN_NODES": "2",
}


def _on_kubernetes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> DomainFile:
    environ = _deployment(tmp_path, TRAINYARD_ORCHESTRATION__QUOTAS=QUOTAS, **(KUBERNETES | env))
    for key, value in environ.items():  # the run's settings load as its steps do
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(job_resources_module, "_DOMAINS", {})
    return next(d for d in domain_settings_files(environ) if d.name == "hotel_rate")


def test_a_job_asks_for_its_nodes_gpus_and_memory_within_the_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hotel = _on_kubernetes(tmp_path, monkeypatch)
    assert job_resources(hotel, {}) == Resources(2, 2, 4, "8Gi")  # the domain's own
    asked = job_conf(hotel, {"gpus_per_node": "1", "memory_per_node": "32Gi"})
    assert job_resources(hotel, asked) == Resources(1, 2, 2, "32Gi")
    with pytest.raises(JobRefused, match=r"holds 8 GPU\(s\).*quotas\.revenue\.gpus is 4"):
        job_resources(hotel, job_conf(hotel, {"gpus_per_node": "4"}))
    with pytest.raises(JobRefused, match=r"3 node\(s\).*quotas\.revenue\.nodes is 2"):
        job_resources(hotel, job_conf(hotel, {"nodes": "3", "gpus_per_node": "1"}))
    with pytest.raises(JobRefused, match=r"nodes \(kubernetes\.train_nodes\) 1 is refused"):
        job_resources(hotel, job_conf(hotel, {"nodes": "1"}))
    with pytest.raises(JobRefused, match=r"takes at least 1 per node"):
        job_resources(hotel, job_conf(hotel, {"gpus_per_node": "0"}))


def test_a_domain_on_one_pod_or_cpu_nodes_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hotel = _on_kubernetes(
        tmp_path,
        monkeypatch,
        TRAINYARD_KUBERNETES__TRAIN_NODES="1",
        TRAINYARD_KUBERNETES__TRAIN_GPUS="0",
    )
    with pytest.raises(JobRefused, match="the domain trains in one pod"):
        job_resources(hotel, {"nodes": 2})
    with pytest.raises(JobRefused, match="training pods go to CPU nodes"):
        job_resources(hotel, {"gpus_per_node": 1})


def test_the_policy_gives_a_jobs_train_task_its_gpu_slots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _on_kubernetes(tmp_path, monkeypatch)
    run = SimpleNamespace(dag_id="hotel_rate_training", conf={"gpus_per_node": 1})
    job = SimpleNamespace(task_id="train.job", pool_slots=4, priority_weight=10)
    task_instance_mutation_hook(job, run)
    assert job.pool_slots == 2  # 1 GPU x 2 nodes, not the settings' 2 x 2
    bigger = SimpleNamespace(dag_id="hotel_rate_training", conf={"nodes": 2, "gpus_per_node": 3})
    task_instance_mutation_hook(job, bigger)
    assert job.pool_slots == 6
    # a run asking nothing of its own, another task, another DAG: the slots stay
    for dag_id, task_id, conf in [
        ("hotel_rate_training", "train.job", {}),
        ("hotel_rate_training", "evaluate", {"gpus_per_node": 1}),
        ("hotel_rate_tuning", "train.job", {"gpus_per_node": 1}),
    ]:
        other = SimpleNamespace(task_id=task_id, pool_slots=4, priority_weight=10)
        task_instance_mutation_hook(other, SimpleNamespace(dag_id=dag_id, conf=conf))
        assert other.pool_slots == 4, (dag_id, task_id)
