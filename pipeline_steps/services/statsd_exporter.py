"""Airflow's metrics for Prometheus: a StatsD receiver that serves what it took as Prometheus'
text format, as Prometheus' own ``statsd_exporter`` does (no package of it in Debian).

Airflow's components send StatsD lines over UDP (``[metrics] statsd_on``); with
``statsd_influxdb_enabled`` their tags travel InfluxDB-style in the name
(``airflow.ti.finish,dag_id=d,task_id=t,state=success:1|c``) and become labels here. A name
becomes a metric name with every character Prometheus does not allow replaced by ``_``
(``airflow_ti_finish``). Counters (``c``) add up, divided by their sample rate; gauges (``g``)
are set, or moved by a signed value; timers (``ms``, ``h``, ``d``) become summaries in seconds
(``_sum`` and ``_count``). Sets (``s``) are not kept. A line that does not parse is counted in
``statsd_exporter_lines_malformed``, never fatal; past :data:`MAX_SERIES` series, new ones are
dropped and counted in ``statsd_exporter_series_dropped``.

    trainyard services statsd-exporter --statsd 127.0.0.1:8125 --listen 127.0.0.1:9102
"""

from __future__ import annotations

import logging
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)

MAX_SERIES = 20_000
"""Series kept at most: a tag with a value per run (a run id) must not grow memory forever."""
_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_:]")
_KINDS = {"c": "counter", "g": "gauge", "ms": "summary", "h": "summary", "d": "summary"}

Labels = tuple[tuple[str, str], ...]


class MalformedLine(ValueError):
    """A StatsD line that does not parse."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One StatsD line: ``name[,tag=value...]:value|type[|@rate]``."""

    name: str
    labels: Labels
    value: float
    kind: str  # c, g, ms, h, d or s
    rate: float = 1.0
    signed: bool = False  # a gauge's "+3" or "-3": a move, not a value

    @classmethod
    def parse(cls, line: str) -> Sample:
        head, sep, tail = line.rpartition(":")
        fields = tail.split("|")
        if not sep or not head or len(fields) < 2:
            raise MalformedLine(line)
        name, *tags = head.split(",")
        pairs = [tag.split("=", 1) for tag in tags]
        if not name or any(len(pair) != 2 or not pair[0] for pair in pairs):
            raise MalformedLine(line)
        kind, rate = fields[1], 1.0
        for extra in fields[2:]:
            if extra.startswith("@"):
                rate = _number(extra[1:], line)
        if kind not in (*_KINDS, "s") or not 0 < rate <= 1:
            raise MalformedLine(line)
        text = fields[0]
        labels = tuple(sorted((_name(k), v) for k, v in pairs))
        return cls(_name(name), labels, _number(text, line), kind, rate, text[:1] in "+-")


def _number(text: str, line: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise MalformedLine(line) from None


def _name(raw: str) -> str:
    name = _NOT_ALLOWED.sub("_", raw)
    return f"_{name}" if name[:1].isdigit() else name


@dataclass
class _Metric:
    kind: str  # counter, gauge or summary
    series: dict[Labels, list[float]] = field(default_factory=dict)  # [value] or [sum, count]


class Metrics:
    """What the StatsD lines said so far, by metric and labels; safe across threads."""

    def __init__(self, max_series: int = MAX_SERIES) -> None:
        self._lock = threading.Lock()
        self._metrics: dict[str, _Metric] = {}
        self._count = 0
        self._max = max_series
        self.malformed = 0
        self.dropped = 0

    def take(self, packet: str) -> None:
        """Every line of one packet (StatsD clients may batch lines, newline-separated)."""
        for line in packet.splitlines():
            if not line.strip():
                continue
            try:
                self.add(Sample.parse(line.strip()))
            except MalformedLine:
                with self._lock:
                    self.malformed += 1

    def add(self, sample: Sample) -> None:
        if sample.kind == "s":
            return
        kind = _KINDS[sample.kind]
        with self._lock:
            metric = self._metrics.setdefault(sample.name, _Metric(kind))
            if metric.kind != kind:  # the name is taken by another type
                self.malformed += 1
                return
            values = metric.series.get(sample.labels)
            if values is None:
                if self._count >= self._max:
                    self.dropped += 1
                    return
                self._count += 1
                values = metric.series[sample.labels] = [0.0, 0.0] if kind == "summary" else [0.0]
            if kind == "counter":
                values[0] += sample.value / sample.rate
            elif kind == "gauge":
                values[0] = values[0] + sample.value if sample.signed else sample.value
            else:
                values[0] += sample.value / 1000.0
                values[1] += 1.0 / sample.rate

    def exposition(self) -> str:
        """Prometheus' text format (version 0.0.4)."""
        with self._lock:
            lines = list(self._lines())
        return "\n".join(lines) + "\n"

    def _lines(self) -> Iterator[str]:
        for name, metric in sorted(self._metrics.items()):
            yield f"# TYPE {name} {metric.kind}"
            for labels, values in metric.series.items():
                if metric.kind == "summary":
                    yield f"{name}_sum{_braces(labels)} {values[0]!r}"
                    yield f"{name}_count{_braces(labels)} {values[1]!r}"
                else:
                    yield f"{name}{_braces(labels)} {values[0]!r}"
        for name, value in (
            ("statsd_exporter_lines_malformed", self.malformed),
            ("statsd_exporter_series_dropped", self.dropped),
        ):
            yield f"# TYPE {name} counter"
            yield f"{name} {value}"


def _braces(labels: Labels) -> str:
    if not labels:
        return ""
    escaped = (
        (k, v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')) for k, v in labels
    )
    return "{" + ",".join(f'{k}="{v}"' for k, v in escaped) + "}"


def _address(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{what}: expected host:port, got {text!r}")
    return host or "127.0.0.1", int(port)


class Exporter:
    """The UDP receiver and the HTTP server of ``/metrics`` (and ``/-/ready``), each in a
    thread of its own; :meth:`close` stops both."""

    def __init__(self, statsd: str, listen: str, metrics: Metrics | None = None) -> None:
        self.metrics = metrics or Metrics()
        self._udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._udp.bind(_address(statsd, "--statsd"))
        self._udp.settimeout(0.5)
        self._closed = threading.Event()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/metrics":
                    body = exporter.metrics.exposition().encode()
                    kind = "text/plain; version=0.0.4; charset=utf-8"
                elif self.path == "/-/ready":
                    body, kind = b"ready\n", "text/plain"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return  # a scrape every 15 s is not worth a log line

        self._http = ThreadingHTTPServer(_address(listen, "--listen"), Handler)
        self._threads = [
            threading.Thread(target=self._receive, name="statsd", daemon=True),
            threading.Thread(target=self._http.serve_forever, name="metrics", daemon=True),
        ]

    @property
    def statsd_port(self) -> int:
        return int(self._udp.getsockname()[1])

    @property
    def http_port(self) -> int:
        return int(self._http.server_address[1])

    def start(self) -> Exporter:
        for thread in self._threads:
            thread.start()
        return self

    def _receive(self) -> None:
        while not self._closed.is_set():
            try:
                packet, _ = self._udp.recvfrom(65535)
            except TimeoutError:
                continue
            self.metrics.take(packet.decode("utf-8", errors="replace"))

    def close(self) -> None:
        self._closed.set()
        self._http.shutdown()
        self._http.server_close()
        self._threads[0].join(timeout=5)
        self._udp.close()

    def serve_forever(self) -> None:
        self.start()
        log.info(
            "taking StatsD on udp port %d, serving /metrics on port %d",
            self.statsd_port,
            self.http_port,
        )
        self._threads[1].join()
