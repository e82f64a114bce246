"""/dev/shm regions named for a process: removed by prefix, and those of a process that no
longer runs removed by whoever starts the next server (real files, in /dev/shm where
no other worker's sweep can reach what the test expects kept)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from deploy.pipeline.process import lifeline

pytestmark = pytest.mark.skipif(not lifeline.SHM_DIR.is_dir(), reason="no /dev/shm")


def _region(name: str) -> Path:
    path = lifeline.SHM_DIR / name
    path.write_bytes(b"\0" * 16)
    return path


def test_a_prefix_removes_its_own_regions_and_not_a_longer_pid(tmp_path, monkeypatch):
    # A folder of its own: in /dev/shm another worker's next server would sweep the longer
    # pid's region (no such process runs) before the assertion.
    monkeypatch.setattr(lifeline, "SHM_DIR", tmp_path)
    mine = _region(f"{lifeline.shm_prefix()}0-a")
    longer = _region(f"deploy-{lifeline.shm_prefix().split('-')[1]}9-0-b")  # pid 12 vs 129
    try:
        lifeline.remove_shm(lifeline.shm_prefix())
        assert not mine.exists() and longer.exists()
    finally:
        longer.unlink(missing_ok=True)


def test_stale_regions_go_and_a_running_process_keeps_its_own():
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = _region(f"deploy-{int(ended.stdout)}-0-stale")
    alive = _region(f"{lifeline.shm_prefix()}0-live")
    other = _region("deploy-notapid-0-x")  # not ours to judge
    try:
        lifeline.remove_stale_shm()
        assert not dead.exists() and alive.exists() and other.exists()
    finally:
        for path in (dead, alive, other):
            path.unlink(missing_ok=True)
