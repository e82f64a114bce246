"""Per-key build locks and dead runs' temp dirs (pipeline/store/locks.py), with real processes:
a holder killed with SIGKILL, a waiter, and the lock file's removal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from deploy.pipeline.store import locks
from tests.helpers import ROOT

HOLDER = """
import sys, time
from pathlib import Path
from deploy.pipeline.store import locks
with locks.building(Path(sys.argv[1]), "ab" * 32, lambda holder: None):
    print("holding", flush=True)
    time.sleep(600)
"""


def _holder(root: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
    return proc


def test_a_lock_whose_holder_was_killed_is_taken_at_once(tmp_path: Path) -> None:
    holder = _holder(tmp_path)
    told: list[str] = []
    waiter = threading.Thread(target=lambda: _take(tmp_path, told))
    waiter.start()
    deadline = time.monotonic() + 30
    while not told and time.monotonic() < deadline:
        time.sleep(0.05)
    assert waiter.is_alive() and told == [f"pid {holder.pid}"]  # waiting, and says for whom
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    waiter.join(10)
    assert not waiter.is_alive(), "a dead holder's lock blocked the waiter"


def _take(root: Path, told: list[str]) -> None:
    with locks.building(root, "ab" * 32, told.append):
        pass


def test_the_lock_file_is_removed_when_released(tmp_path: Path) -> None:
    with locks.building(tmp_path, "cd" * 32, lambda holder: None):
        assert list(tmp_path.glob("locks/*/*.lock"))
    assert not list(tmp_path.glob("locks/*/*.lock"))


def test_a_waiter_granted_a_removed_lock_file_takes_the_current_one(tmp_path: Path) -> None:
    """The holder removes the file while it still holds it; a waiter then gets the lock of
    a file no one else can open. It must not build on that: it locks the path's file."""
    key = "ef" * 32
    path = tmp_path / "locks" / key[:2] / f"{key}.lock"
    order: list[str] = []
    with locks.building(tmp_path, key, lambda holder: None):
        waiter = threading.Thread(target=lambda: _hold_and_note(tmp_path, key, order))
        waiter.start()
        time.sleep(0.3)
        order.append("first released")
    waiter.join(10)
    assert order == ["first released", "second holds a current file"]
    assert not path.exists()


def _hold_and_note(root: Path, key: str, order: list[str]) -> None:
    with locks.building(root, key, lambda holder: None):
        path = root / "locks" / key[:2] / f"{key}.lock"
        order.append("second holds a current file" if path.exists() else "second holds a removed file")


def test_temp_dirs_are_swept_only_when_their_run_is_dead(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / f"export-{dead.pid}-x1").mkdir()
    (tmp_path / f"export-{os.getpid()}-x2").mkdir()
    assert locks.sweep_dead(tmp_path) == [f"export-{dead.pid}-x1"]
    assert [p.name for p in tmp_path.iterdir()] == [f"export-{os.getpid()}-x2"]


RELEASER = """
import sys, time
from pathlib import Path
from deploy.pipeline.store import locks
from deploy.serving import release_journal
repo = Path(sys.argv[1])
go = repo.parent / "go"
with locks.repository(repo):
    with locks.repository(repo):  # a release's recovery inside its own hold: no wait on itself
        print("holding", flush=True)
    deadline = time.monotonic() + 60
    while not go.exists() and time.monotonic() < deadline:  # until the other one waits
        time.sleep(0.05)
    (repo / "placed").write_text("the release's last step, inside its hold")
"""


def test_a_repository_held_by_a_live_release_is_waited_for_not_taken_over(tmp_path: Path) -> None:
    """`deploy releases`, `serve` and `rollback` recover a killed release's journal; a live
    one holds the repository's lock, so they wait for its last step instead of reverting it."""
    repo = tmp_path / "model_repository"
    repo.mkdir()
    (tmp_path / "alias").symlink_to(repo)  # the release names it another way: one lock all the same
    proc = subprocess.Popen(
        [sys.executable, "-c", RELEASER, str(tmp_path / "alias")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        told: list[str] = []

        def waits(holder: str) -> None:
            told.append(holder)
            (tmp_path / "go").touch()  # the release takes its last step only now

        with locks.repository(repo, waits):
            assert (repo / "placed").exists(), "the lock was granted while the release still held it"
            assert told == [f"pid {proc.pid}"]
            assert (tmp_path / ".model_repository.lock").exists()
        assert not (tmp_path / ".model_repository.lock").exists()  # removed by its holder
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()


def test_two_threads_of_one_process_take_the_repository_in_turn(tmp_path: Path) -> None:
    """Two pipelines run from threads of one API process: the second waits for the first,
    rather than taking the lock the process already holds as its own."""
    repo = tmp_path / "model_repository"
    order: list[str] = []
    inside, waiting = threading.Event(), threading.Event()

    def first() -> None:
        with locks.repository(repo):
            order.append("first in")
            inside.set()
            waiting.wait(30)  # holds until the second waits, however late it comes
            order.append("first out")

    def waited(holder: str) -> None:
        order.append("second waited")
        waiting.set()

    thread = threading.Thread(target=first)
    thread.start()
    assert inside.wait(30)
    with locks.repository(repo, waited):
        order.append("second in")
    thread.join()
    assert order == ["first in", "second waited", "first out", "second in"]
