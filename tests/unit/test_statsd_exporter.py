"""The statsd-exporter: Airflow's StatsD lines, as Airflow's own StatsD logger sends them, served
to Prometheus in its text format."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import timedelta

import pytest

from pipeline_steps.services.statsd_exporter import Exporter, MalformedLine, Metrics, Sample
from tests.conftest import free_port, wait_until


def _scrape(metrics: Metrics) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.exposition().splitlines()
        if line and not line.startswith("#")
    }


def test_counters_add_up_over_their_sample_rate() -> None:
    metrics = Metrics()
    metrics.take("airflow.scheduler_heartbeat:1|c\nairflow.scheduler_heartbeat:1|c|@0.5")
    assert _scrape(metrics)["airflow_scheduler_heartbeat"] == 3.0
    assert "# TYPE airflow_scheduler_heartbeat counter" in metrics.exposition()


def test_gauges_are_set_or_moved_by_a_signed_value() -> None:
    metrics = Metrics()
    metrics.take("airflow.executor.open_slots:32|g")
    metrics.take("airflow.executor.open_slots:-4|g")
    assert _scrape(metrics)["airflow_executor_open_slots"] == 28.0
    metrics.take("airflow.executor.open_slots:30|g")
    assert _scrape(metrics)["airflow_executor_open_slots"] == 30.0


def test_timers_are_summaries_in_seconds() -> None:
    metrics = Metrics()
    metrics.take("airflow.dagrun.duration.success:1500|ms\nairflow.dagrun.duration.success:500|ms")
    scraped = _scrape(metrics)
    assert scraped["airflow_dagrun_duration_success_sum"] == 2.0
    assert scraped["airflow_dagrun_duration_success_count"] == 2.0
    assert "# TYPE airflow_dagrun_duration_success summary" in metrics.exposition()


def test_influxdb_tags_become_labels() -> None:
    metrics = Metrics()
    line = "airflow.ti.finish,dag_id=flight_delay_training,task_id=train,state=success:1|c"
    metrics.take(line)
    metrics.take(line.replace("success", "failed"))
    scraped = _scrape(metrics)
    key = 'airflow_ti_finish{dag_id="flight_delay_training",state="success",task_id="train"}'
    assert scraped[key] == 1.0
    assert scraped[key.replace("success", "failed")] == 1.0


def test_names_and_label_values_are_made_safe() -> None:
    metrics = Metrics()
    metrics.take('airflow.pool.open_slots.gpu-revenue,pool_name=a"b\\c:3|g')
    assert 'airflow_pool_open_slots_gpu_revenue{pool_name="a\\"b\\\\c"} 3.0' in (
        metrics.exposition()
    )


@pytest.mark.parametrize(
    "line",
    [
        "no value here",
        "airflow.x:1",
        "airflow.x:one|c",
        "airflow.x:1|q",
        "airflow.x,=v:1|c",
        ":1|c",
    ],
)
def test_a_line_that_does_not_parse_is_counted_never_fatal(line: str) -> None:
    with pytest.raises(MalformedLine):
        Sample.parse(line)
    metrics = Metrics()
    metrics.take(f"{line}\nairflow.ok:1|c")
    scraped = _scrape(metrics)
    assert scraped["statsd_exporter_lines_malformed"] == 1.0
    assert scraped["airflow_ok"] == 1.0


def test_a_name_taken_by_another_type_is_refused_and_counted() -> None:
    metrics = Metrics()
    metrics.take("airflow.x:1|c\nairflow.x:5|g")
    scraped = _scrape(metrics)
    assert scraped["airflow_x"] == 1.0
    assert scraped["statsd_exporter_lines_malformed"] == 1.0


def test_series_past_the_limit_are_dropped_and_counted() -> None:
    metrics = Metrics(max_series=2)
    metrics.take("\n".join(f"airflow.ti.finish,run_id=r{i}:1|c" for i in range(4)))
    metrics.take("airflow.ti.finish,run_id=r0:1|c")  # a known series still counts
    scraped = _scrape(metrics)
    assert scraped['airflow_ti_finish{run_id="r0"}'] == 2.0
    assert scraped["statsd_exporter_series_dropped"] == 2.0
    assert 'airflow_ti_finish{run_id="r3"}' not in scraped


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    running = Exporter(f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}").start()
    yield running
    running.close()


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_airflows_own_statsd_logger_reaches_the_scrape(exporter: Exporter) -> None:
    from airflow._shared.observability.metrics.statsd_logger import get_statsd_logger
    from statsd import StatsClient

    stats = get_statsd_logger(
        stats_class=StatsClient,
        host="127.0.0.1",
        port=exporter.statsd_port,
        prefix="airflow",
        # what `[metrics] statsd_influxdb_enabled` sets: tags in the name, and names with tags
        # let through Airflow's own check
        influxdb_tags_enabled=True,
        statsd_influxdb_enabled=True,
    )
    tags = {"dag_id": "flight_delay_training", "task_id": "train", "state": "success"}
    stats.incr("ti.finish", tags=tags)
    stats.gauge("executor.open_slots", 32, tags={"executor_class_name": "CeleryExecutor"})
    # a team's queue, as the team alerts read it (containers/prometheus/alerts.yml)
    stats.gauge("pool.scheduled_slots", 2, tags={"pool_name": "train-revenue"})
    stats.timing(
        "dagrun.duration.success", timedelta(seconds=2.5), tags={"dag_id": "flight_delay_training"}
    )
    url = f"http://127.0.0.1:{exporter.http_port}/metrics"
    wait_until("the timer", lambda: "airflow_dagrun_duration_success_count" in _get(url)[1], 10)
    status, text = _get(url)
    assert status == 200
    assert (
        'airflow_ti_finish{dag_id="flight_delay_training",state="success",task_id="train"} 1.0'
        in text
    )
    assert 'airflow_executor_open_slots{executor_class_name="CeleryExecutor"} 32.0' in text
    assert 'airflow_pool_scheduled_slots{pool_name="train-revenue"} 2.0' in text
    assert 'airflow_dagrun_duration_success_sum{dag_id="flight_delay_training"} 2.5' in text
    assert _get(f"http://127.0.0.1:{exporter.http_port}/-/ready")[0] == 200
    assert _get(f"http://127.0.0.1:{exporter.http_port}/other")[0] == 404


def test_a_taken_port_or_bad_address_is_refused_naming_the_option() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        with pytest.raises(OSError):
            Exporter(f"127.0.0.1:{port}", f"127.0.0.1:{free_port()}")
    with pytest.raises(ValueError, match="--listen"):
        Exporter(f"127.0.0.1:{free_port()}", "nowhere")
