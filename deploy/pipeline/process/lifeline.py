"""Nothing outlives deploy: the processes a run starts die with it, whatever kills it.

The kernel does the work (Linux prctl): a process asks for a signal when its parent
dies (PR_SET_PDEATHSIG), and a stage's child becomes the subreaper of everything it
starts (PR_SET_CHILD_SUBREAPER), so a grandchild that double-forks and calls setsid is
still a descendant the stage can find and kill, not an orphan of init.

- The fork server imports this module first (isolation.PRELOAD) with $DEPLOY_PARENT_PID
  set to the run's pid: it takes SIGKILL when the run dies (kill -9 of deploy, a CI
  agent's abort), so a stage no longer outlives the run that enforced its timeout.
- Each stage's child takes SIGTERM when the fork server dies, and on SIGTERM kills its
  descendants before it exits (`contain`); it kills them too when its stage is done.
- Servers a stage starts die with that stage's child (`die_with_parent`); what runs
  elsewhere (a docker container, under the docker daemon) is removed by an `on_stop`
  callback when the child is stopped.
- What a killed process leaves in /dev/shm (Triton's python backend makes a region per
  model instance and unlinks it only on a graceful stop) is named after the process that
  asked for it (`shm_prefix`) and removed once that process is gone (`remove_shm`).

Stdlib only: the fork server imports it before anything else.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

from deploy.pipeline.process.held import HeldSignal

PARENT_ENV = "DEPLOY_PARENT_PID"
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
SHM_DIR = Path("/dev/shm")


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):  # not Linux: the run's own cleanup is all there is
        return False


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """This process gets `sig` when its parent dies (checked once after asking: a parent
    that died just before is already gone, and the process exits)."""
    parent = os.getppid()
    _prctl(PR_SET_PDEATHSIG, sig)
    if os.getppid() != parent:
        os._exit(1)


def contain() -> None:
    """In a stage's child: orphans of its descendants become its children, and SIGTERM
    (its group stopped, or the fork server gone) takes every descendant down with it."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    signal.signal(signal.SIGTERM, _terminated)
    die_with_parent(signal.SIGTERM)


# What must be undone when a stage's child is stopped that killing its descendants can't
# do: a docker container runs under the docker daemon, not under the stage.
_ON_STOP: dict[int, Callable[[], object]] = {}
# whole(): a SIGTERM held until its block ends, then the stage's child stops as it would have.
_WHOLE: HeldSignal[int] = HeldSignal(lambda signum: _terminated(signum, None))


@contextlib.contextmanager
def on_stop(undo: Callable[[], object]) -> Iterator[None]:
    """While the block runs, a stop of this stage's child (its timeout, the run's
    interrupt or death) calls `undo` before the child exits."""
    token = object()
    _ON_STOP[id(token)] = undo
    try:
        yield
    finally:
        _ON_STOP.pop(id(token), None)


@contextlib.contextmanager
def whole() -> Iterator[None]:
    """A step a stop must not cut in two (a release switching every model's config): a
    SIGTERM meanwhile stops this stage's child when the block ends, well inside the
    grace its stop gives it (isolation.GRACE_S)."""
    with _WHOLE.block():
        yield


def _terminated(signum: int, frame: FrameType | None) -> None:
    if _WHOLE.hold(signum):
        return
    for undo in list(_ON_STOP.values()):
        with contextlib.suppress(Exception):
            undo()
    kill_descendants(os.getpid())
    remove_shm(shm_prefix())  # what its killed servers made
    os._exit(128 + signum)


# Rounds of killing: a descendant caught mid-fork (a daemon's double fork) appears, as
# the subreaper's child, only after the first round.
ROUNDS = 20
ROUND_S = 0.05


def kill_descendants(pid: int) -> None:
    """SIGKILL to every living descendant of `pid` (found through /proc), round after
    round until none is left; from the process itself, its dead children are reaped."""
    for _ in range(ROUNDS):
        alive = [p for p in descendants(pid) if not _zombie(p)]
        if not alive:
            return
        for child in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, signal.SIGKILL)
        time.sleep(ROUND_S)
        if pid == os.getpid():
            _reap()


ZOMBIE = "Z"  # /proc/<pid>/stat's state of a process that exited and was not reaped


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == ZOMBIE
    except (OSError, IndexError):
        return True  # gone


def _reap() -> None:
    """Collects exited children (a subreaper's adopted orphans included)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def descendants(pid: int) -> list[int]:
    found, todo = [], children(pid)
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children(current)
    return found


def children(pid: int) -> list[int]:
    """The pid's children; none when it exits while we look (a race we lose every so often)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []
    found = []
    for task in tasks:
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def shm_prefix(pid: int | None = None) -> str:
    """What the shared-memory regions made for process `pid` (this one by default) are
    named with: the dash after the pid keeps 12 from matching 123."""
    return f"deploy-{os.getpid() if pid is None else pid}-"


def remove_shm(prefix: str) -> None:
    """Unlinks /dev/shm/<prefix>*: a region still mapped lives on until unmapped, so this
    is safe even while its process dies."""
    for found in glob.glob(glob.escape(str(SHM_DIR / prefix)) + "*"):
        with contextlib.suppress(OSError):
            os.unlink(found)


def remove_stale_shm() -> None:
    """Regions named for a process that no longer runs (one killed with SIGKILL cleans up nothing)."""
    for found in glob.glob(str(SHM_DIR / "deploy-*-*")):
        pid = Path(found).name.split("-")[1]
        if pid.isdigit() and not _running(int(pid)):
            with contextlib.suppress(OSError):
                os.unlink(found)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's: running
        return True
    return True


def _adopted_by_run() -> None:
    """At import in the fork server, started by the run whose pid $DEPLOY_PARENT_PID holds."""
    parent = os.environ.get(PARENT_ENV)
    if parent and parent.isdigit() and int(parent) == os.getppid():
        die_with_parent(signal.SIGKILL)


_adopted_by_run()
