"""tests/profiling.py: the wall and CPU seconds per module that ``make test-profile`` writes,
CPU counted for the test's own process and for the processes it waited for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]

BURNING = """
import subprocess, sys, time

def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

def test_in_process():
    burn(0.4)

def test_in_a_child():
    subprocess.run([sys.executable, "-c", "import time\\nend = time.process_time() + 0.6\\n"
                    "while time.process_time() < end: pass"], check=True)

def test_waiting():
    time.sleep(0.5)
"""


def test_cpu_seconds_per_module_count_children(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_burning=BURNING, test_idle="def test_idle():\n    pass\n")
    out = pytester.path / "profile.json"
    result = pytester.runpytest_subprocess("-p", "tests.profiling", "--profile-json", str(out))
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*wall and CPU seconds per module*"])
    modules = json.loads(out.read_text())["modules"]
    burning, idle = modules["test_burning.py"], modules["test_idle.py"]
    assert burning["tests"] == 3
    assert 1.0 <= burning["cpu_s"] < burning["seconds"] + 0.5  # 0.4 + 0.6 burnt, 0.5 asleep
    assert burning["seconds"] >= 1.5
    assert idle["cpu_s"] < 0.2
    # the whole machine was busy at least as long as the tests' own processes
    written = json.loads(out.read_text())
    assert written["machine_cpu_s"] >= burning["cpu_s"] + idle["cpu_s"] - 0.05
    result.stdout.fnmatch_lines(["machine * cpu, * cores busy on average*"])


def test_machine_cpu_is_every_core_s_busy_time(tmp_path: Path) -> None:
    """User, nice, system, irq and softirq ticks of the ``cpu`` line; idle and iowait left
    out; no figure from a file that is missing or of another form."""
    import os

    from tests.profiling import machine_cpu_seconds

    hz = os.sysconf("SC_CLK_TCK")
    stat = tmp_path / "stat"
    stat.write_text(f"cpu  {3 * hz} {hz} {2 * hz} 9999 77 {hz} {hz} 0 0 0\ncpu0 1 2 3\n")
    assert machine_cpu_seconds(stat) == 8.0
    stat.write_text("intr 1 2 3\n")
    assert machine_cpu_seconds(stat) is None
    assert machine_cpu_seconds(tmp_path / "missing") is None
