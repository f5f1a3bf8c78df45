"""The scripts that install packages or build a root file system run as root themselves: on a
machine logged into as root they go on, elsewhere they re-run through sudo, and where there is
no sudo they stop saying so."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.conftest import ROOT

HELPER = ROOT / "scripts" / "as-root.sh"
SCRIPTS = ("prometheus.sh", "container-engine.sh", "base-image.sh")


def _as(uid: int, tmp_path: Path, sudo: bool = False) -> subprocess.CompletedProcess[str]:
    """``as_root`` of a script at ``tmp_path/x.sh`` as the user ``uid`` (``id`` answers it),
    with a PATH of ``basename`` and, with ``sudo``, a sudo that prints what it was asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "basename").symlink_to(shutil.which("basename") or "/usr/bin/basename")
    if sudo:
        (bin_dir / "sudo").write_text('#!/bin/sh\necho "sudo $*"\n')
        (bin_dir / "sudo").chmod(0o755)
    code = f'id() {{ echo {uid}; }}; source {HELPER}; as_root "$0" --flag; echo "went on as {uid}"'
    return subprocess.run(
        [shutil.which("bash") or "/bin/bash", "-c", code, str(tmp_path / "x.sh")],
        env={**os.environ, "PATH": str(bin_dir)},
        capture_output=True,
        text=True,
    )


def test_root_goes_on_without_sudo(tmp_path) -> None:
    done = _as(0, tmp_path)  # a PATH with no sudo on it
    assert done.returncode == 0 and done.stdout.strip() == "went on as 0", done.stderr


def test_another_user_re_runs_the_script_through_sudo(tmp_path) -> None:
    done = _as(1000, tmp_path, sudo=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "sudo --preserve-env=MIRROR,http_proxy,https_proxy,no_proxy -- bash "
        f"{tmp_path / 'x.sh'} --flag"
    )  # and nothing after it: the script went on under sudo alone


def test_another_user_without_sudo_is_told_to_run_it_as_root(tmp_path) -> None:
    done = _as(1000, tmp_path)
    assert done.returncode == 1 and "went on" not in done.stdout
    assert done.stderr.strip() == "x.sh needs root and there is no sudo here: run it as root"


def test_each_installing_script_asks_for_root_itself_and_no_doc_says_sudo() -> None:
    for name in SCRIPTS:
        assert 'as_root "$0" "$@"' in (ROOT / "scripts" / name).read_text(), name
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert [d.name for d in docs if "sudo scripts/" in d.read_text()] == []
