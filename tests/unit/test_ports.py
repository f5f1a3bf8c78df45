"""Free ports lie outside the kernel's ephemeral range, where no outgoing connection takes them
between their choice and the service's bind, and one process never gets the same one twice."""

import socket
from pathlib import Path

from pipeline_steps.services.ports import ephemeral_range, free_port


def test_ports_lie_below_the_ephemeral_range_and_are_never_handed_out_twice(tmp_path) -> None:
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("32768\t60999\n")
    ports = [free_port(path=ranges) for _ in range(50)]
    assert all(10_000 <= port < 32_768 for port in ports)
    assert len(set(ports)) == len(ports)
    for port in ports[:3]:  # free when handed out
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_range_reaching_down_low_hands_out_ports_above_it(tmp_path) -> None:
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("1024 40000\n")
    assert all(free_port(path=ranges) > 40_000 for _ in range(20))


def test_an_unreadable_range_is_linux_s_default(tmp_path: Path) -> None:
    assert ephemeral_range(tmp_path / "missing") == (32_768, 60_999)
    assert 10_000 <= free_port(path=tmp_path / "missing") < 32_768
