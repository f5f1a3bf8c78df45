"""What the steps push for Prometheus: the text format and group paths, pushes to a real
Pushgateway (Debian's package) read back as Prometheus scrapes them, a Pushgateway that does not
answer (the step goes on), and the validation's refused days in a row counted from the lake."""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

from pipeline_steps.core import pipeline_gauges
from pipeline_steps.core.lake import MANIFEST, Lake
from pipeline_steps.core.pushgateway import Gauge, Pushgateway, exposition, group_path
from pipeline_steps.core.settings import SettingsError, load_settings
from tests.conftest import free_port, wait_until
from tests.monitoring import pushgateway


def test_the_text_format_escapes_labels_and_leaves_out_what_is_not_finite() -> None:
    text = exposition(
        {"a_ratio": Gauge(0.5, "half"), "b_seconds": Gauge(float("inf"), "never")},
        {"team": 'pri"cing'},
    )
    assert text == '# HELP a_ratio half\n# TYPE a_ratio gauge\na_ratio{team="pri\\"cing"} 0.5\n'


def test_a_run_id_travels_in_the_group_path_as_it_is() -> None:
    path = group_path("trainyard_train", {"run_id": "manual__2013-06-01T00:00:00+00:00", "x": ""})
    assert path == (
        "/metrics/job@base64/dHJhaW55YXJkX3RyYWlu"
        "/run_id@base64/bWFudWFsX18yMDEzLTA2LTAxVDAwOjAwOjAwKzAwOjAw/x@base64/="
    )


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[str]:
    with pushgateway(tmp_path) as url:
        yield url


def _groups(url: str) -> list[dict]:
    with urllib.request.urlopen(f"{url}/api/v1/metrics", timeout=5) as answer:
        return json.load(answer)["data"]


@pytest.mark.services
def test_a_push_replaces_its_group_and_keeps_the_others(gateway: str) -> None:
    pushed = Pushgateway(gateway)
    run = "manual__2013-06-01T00:00:00+00:00"
    pushed.push("trainyard_train", {"domain": "d", "run_id": run}, {"x_step": Gauge(3, "s")})
    pushed.push("trainyard_train", {"domain": "d", "run_id": "other"}, {"x_step": Gauge(9, "s")})
    pushed.push(
        "trainyard_train",
        {"domain": "d", "run_id": run},
        {"x_step": Gauge(4, "s")},
        {"team": "pricing"},
    )
    values = {
        g["labels"]["run_id"]: g["x_step"]["metrics"][0] for g in _groups(gateway) if "x_step" in g
    }
    assert values[run]["value"] == "4" and values[run]["labels"]["team"] == "pricing"
    assert values["other"]["value"] == "9"


def test_a_pushgateway_that_does_not_answer_stops_nothing(caplog) -> None:
    gone = Pushgateway(f"http://127.0.0.1:{free_port()}", timeout_s=0.5)
    assert gone.push_quietly("trainyard_step", {"domain": "d"}, {"g": Gauge(1, "g")}) is False
    assert gone.push_quietly("trainyard_step", {"domain": "d"}, {"g": Gauge(1, "g")}) is False
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "monitoring.pushgateway_url" in warned[0].getMessage()


def test_refused_days_are_counted_back_from_the_day_while_they_last(tmp_path: Path) -> None:
    lake = Lake(str(tmp_path))
    for stage, day in [
        ("validated", date(2013, 6, 1)),
        ("quarantine", date(2013, 6, 2)),  # refused, then passed on a later upload
        ("validated", date(2013, 6, 2)),
        ("quarantine", date(2013, 6, 3)),
        ("quarantine", date(2013, 6, 4)),
    ]:
        folder = tmp_path / Lake.partition(stage, "flights", day)
        folder.mkdir(parents=True)
        (folder / MANIFEST).write_text("{}")
    assert pipeline_gauges.refused_days_in_a_row(lake, ["flights"], date(2013, 6, 4)) == 2
    assert pipeline_gauges.refused_days_in_a_row(lake, ["flights"], date(2013, 6, 2)) == 0


def test_a_pushgateway_url_that_is_no_url_is_refused_naming_the_key() -> None:
    with pytest.raises(SettingsError, match=r"monitoring\.pushgateway_url must be an http"):
        load_settings(overrides=["monitoring.pushgateway_url=localhost:9091"], environ={})


def test_the_prometheus_configuration_scrapes_the_pushgateway_and_loads_the_rules(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import yaml

    from pipeline_steps.services.cli import main

    assert main(["prometheus-config", "--pushgateway", "pushgateway:9091", "--scrape-s", "5"]) == 0
    config = yaml.safe_load(capsys.readouterr().out)
    (job,) = config["scrape_configs"]
    assert job["honor_labels"] is True  # the pushed job and domain labels stay
    assert job["static_configs"] == [{"targets": ["pushgateway:9091"]}]
    assert config["global"] == {"scrape_interval": "5s", "evaluation_interval": "5s"}
    (rules,) = config["rule_files"]
    assert Path(rules).read_text().count("- alert: ") == 8
    argv = ["prometheus-config", "--pushgateway", "p:9091", "--airflow", "statsd-exporter:9102"]
    assert main(argv) == 0
    jobs = yaml.safe_load(capsys.readouterr().out)["scrape_configs"]
    assert [j["job_name"] for j in jobs] == ["pushgateway", "airflow"]
    assert jobs[1]["static_configs"] == [{"targets": ["statsd-exporter:9102"]}]


@pytest.mark.services
@pytest.mark.parametrize("ends", ["succeeds", "fails"])
def test_a_training_task_removes_its_runs_gauges_however_it_ends(
    gateway: str, tmp_path: Path, ends: str
) -> None:
    """The task of a training removes its run's group when it ends, so a stall or silence
    alert on it clears whether a retry follows or not; other runs' groups stay."""
    import sys

    from pipeline_steps.core.pushgateway import TRAIN_JOB
    from pipeline_steps.orchestration.gauges import TrainingGauges
    from pipeline_steps.orchestration.runners import LocalStepOperator

    run = "manual__2013-06-03T00:00:00+00:00"
    pushed = Pushgateway(gateway)
    stalled = {
        "trainyard_train_stalled": Gauge(1, "stalled"),
        "trainyard_train_running": Gauge(1, "r"),
    }
    pushed.push(TRAIN_JOB, {"domain": "d", "run_id": run}, stalled)
    pushed.push(TRAIN_JOB, {"domain": "d", "run_id": "other"}, stalled)
    script = tmp_path / "step.py"
    script.write_text(
        'import sys; print(\'{"step": "train"}\')'
        if ends == "succeeds"
        else "import sys; print('trainyard step train failed (transient): stalled', "
        "file=sys.stderr); sys.exit(75)"
    )
    task = LocalStepOperator(
        task_id="train",
        step="train",
        argv=[sys.executable, str(script)],
        gauges=TrainingGauges(gateway, "d"),
    )
    if ends == "succeeds":
        assert task.execute(context={"run_id": run}) == {"step": "train"}
    else:
        with pytest.raises(Exception, match="stalled"):
            task.execute(context={"run_id": run})

    def left() -> list[str]:
        groups = _groups(gateway)
        return [g["labels"]["run_id"] for g in groups if g["labels"].get("job") == TRAIN_JOB]

    # the Pushgateway accepts a DELETE (202) and applies it from its own queue: on a busy
    # machine, a moment later
    wait_until("the ended run's group removed", lambda: left() == ["other"], 30, 0.2)
    assert left() == ["other"]


def test_a_group_that_cannot_be_removed_is_tried_again_then_named(caplog, monkeypatch) -> None:
    """A task's end waits for the removal (a busy gateway answers late) and tries again; a
    gateway that never answers is named once, with the setting, and the task goes on."""
    from pipeline_steps.core import pushgateway
    from pipeline_steps.core.pushgateway import PushError, forget_training

    tries: list[float] = []

    def refused(self: Pushgateway, job: str, grouping: dict) -> None:
        tries.append(self.timeout_s)
        if len(tries) < 3:
            raise PushError(f"Pushgateway {self.url} did not remove {job}: timed out")

    monkeypatch.setattr(pushgateway.Pushgateway, "delete", refused)
    assert forget_training("http://127.0.0.1:9", "d", "run") is True
    assert tries == [pushgateway.FORGET_TIMEOUT_S] * 3
    tries.clear()
    monkeypatch.setattr(pushgateway, "FORGET_ATTEMPTS", 2)
    assert forget_training("http://127.0.0.1:9", "d", "run") is False
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "monitoring.pushgateway_url, 2 tries" in warning and "did not remove" in warning
