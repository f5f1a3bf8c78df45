"""The scripts that fetch from Debian themselves take the archive from apt's own sources."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "debian-mirror.sh"


def _mirror(apt: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "MIRROR"}
    return subprocess.run(
        ["bash", str(SCRIPT)],
        env={**environ, "APT_SOURCES": str(apt), **env},
        capture_output=True,
        text=True,
    )


@pytest.fixture
def apt(tmp_path: Path) -> Path:
    (tmp_path / "sources.list.d").mkdir()
    return tmp_path


def test_the_release_archive_of_a_deb822_file_not_security_nor_disabled(apt: Path) -> None:
    (apt / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nEnabled: no\n\n"
        "Types: deb\nURIs: http://cache.example:3142/debian-security\n"
        "Suites: bookworm-security\n\n"
        "Types: deb-src deb\nURIs: http://cache.example:3142/debian/\n"
        "Suites: bookworm-updates bookworm\nComponents: main\n"
    )
    (apt / "sources.list.d" / "other.list.disabled").write_text(
        "deb http://elsewhere.example/debian bookworm main\n"
    )
    done = _mirror(apt)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "http://cache.example:3142/debian"


def test_a_one_line_source_with_options(apt: Path) -> None:
    (apt / "sources.list").write_text(
        "# deb http://commented.example/debian bookworm main\n"
        "deb-src http://src.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://m.example/debian trixie main\n"
    )
    assert _mirror(apt).stdout.strip() == "http://m.example/debian"


def test_mirror_overrides_and_none_found_names_the_setting(apt: Path) -> None:
    assert _mirror(apt, MIRROR="http://given.example/debian/").stdout.strip() == (
        "http://given.example/debian"
    )
    done = _mirror(apt)
    assert done.returncode != 0
    assert "set MIRROR" in done.stderr and str(apt) in done.stderr


def test_no_registry_host_is_written_in_the_scripts() -> None:
    for name in ("base-image.sh", "container-engine.sh", "offline-images.sh"):
        text = (ROOT / "scripts" / name).read_text()
        assert "debian.org" not in text, name
        assert "debian-mirror.sh" in text or name == "offline-images.sh", name
