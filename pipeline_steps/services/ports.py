"""A free TCP port for a service started on this machine in a moment.

A port the kernel picks for ``bind(port 0)`` comes from its range of ephemeral ports
(``net.ipv4.ip_local_port_range``), the same range it takes the source port of every outgoing
connection from: between picking such a port and the service binding it, a client connection
elsewhere on the machine can get it, and the service fails with ``Address already in use``
(seen on a busy machine: Airflow's API server, seconds after its port was picked). The ports
handed out here lie below that range, are free when picked and are never handed out twice by one
process.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10_000
"""The lowest port handed out: above the well-known and most registered services' ports."""
_handed_out: set[int] = set()


def ephemeral_range(path: Path = EPHEMERAL_RANGE) -> tuple[int, int]:
    """The kernel's ephemeral ports (first, last); Linux's default where it cannot be read."""
    try:
        first, last = (int(value) for value in path.read_text().split())
        return first, last
    except (OSError, ValueError):
        return 32_768, 60_999


def free_port(host: str = "127.0.0.1", path: Path = EPHEMERAL_RANGE) -> int:
    """A TCP port on ``host`` that nothing listens on now, outside the ephemeral range and not
    handed out before by this process. ``OSError`` when no such port is free."""
    first, last = ephemeral_range(path)
    below, above = range(LOWEST, first), range(last + 1, 65_536)
    candidates = below if len(below) >= len(above) else above
    chooser = random.Random()
    for _ in range(200):
        port = chooser.choice(candidates)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    span = f"{candidates.start} and {candidates.stop - 1}"
    raise OSError(f"no free TCP port on {host} between {span}")
