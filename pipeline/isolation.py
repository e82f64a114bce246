"""One stage's code in a child process, so that what that code does to its process — a
segfault in an extension, an abort in a converter, the kernel's out-of-memory kill, a
hang — fails that stage instead of taking the run (and its summary, JUnit and report)
down with it. Model Navigator converts in child processes for the same reason.

Children come from a fork server that has imported the heavy libraries once (PRELOAD),
so a stage pays a fork (tens of ms), not a fresh interpreter importing torch (~2 s).
The server starts at the first stage that runs: a fully cached run starts nothing.
Each child leads its own process group; stopping a stage (timeout, memory limit,
Ctrl-C / SIGTERM of the run) stops the group, and servers a stage starts in a session
of their own die with it (they are started with PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import ExitCode
from pipeline.execute import Job, Outcome, execute
from pipeline.progress import Progress, Sink
from pipeline.results import Status

# Imported once by the fork server: what most stages import, and what costs seconds.
# Names only (a missing one is skipped): the engine still imports none of them itself.
PRELOAD = ("numpy", "torch", "onnx", "onnxruntime", "pipeline.isolation")
POLL_S = 0.2
GRACE_S = 5.0  # between SIGTERM and SIGKILL when a stage is stopped


@dataclass(frozen=True)
class Limits:
    timeout_s: float
    memory_mb: int | None


def run_isolated(job: Job, limits: Limits, sink: Sink | None = None) -> Outcome:
    """Runs the job in a child and waits for its outcome, its death or its limits; the
    child's progress events go to `sink` meanwhile."""
    import multiprocessing

    mp = multiprocessing.get_context("forkserver")
    mp.set_forkserver_preload(list(PRELOAD))
    receive, send = mp.Pipe(duplex=False)
    args = (job, dict(os.environ), list(sys.path), send)
    child = mp.Process(target=_child, args=args, name=f"deploy-{job.stage}")
    with _safe_path():
        child.start()
    send.close()
    spawned: set[Proc] = set()  # every descendant seen: a crash orphans them before _stop
    try:
        return _wait(child, receive, job, limits, spawned, sink)
    finally:
        _stop(child, spawned)
        receive.close()


@contextlib.contextmanager
def _safe_path() -> Iterator[None]:
    """The fork server is a fresh `python -c`, whose sys.path starts with the working
    directory: a user's own `pipeline/` or `stages/` folder there would shadow ours when
    it imports PRELOAD. PYTHONSAFEPATH (3.11) leaves the directory out; it is set only
    while the server may start (children get the runner's environment back)."""
    before = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONSAFEPATH", None)
        else:
            os.environ["PYTHONSAFEPATH"] = before


def _child(job: Job, environ: dict[str, str], path: list[str], send: Any) -> None:
    """The child: its own process group (a terminal's Ctrl-C reaches the runner, which
    stops it), the runner's environment and import path (a model module importable
    there is importable here), a Python traceback on a fatal signal."""
    import faulthandler

    os.setpgrp()
    os.environ.clear()
    os.environ.update(environ)
    sys.path[:] = path
    with open(job.log, "a") as log:
        faulthandler.enable(file=log)  # SIGSEGV / SIGABRT: where Python was, into the stage log
        outcome = execute(job, job.spec(), send.send)
    send.send(outcome)
    send.close()


def _wait(
    child: Any, receive: Any, job: Job, limits: Limits, spawned: set[Proc], sink: Sink | None
) -> Outcome:
    deadline = time.monotonic() + limits.timeout_s
    while True:
        spawned.update(_procs(_descendants(child.pid)))
        if receive.poll(POLL_S):  # progress, an outcome, or the end of the pipe: the child is gone
            try:
                message = receive.recv()
            except EOFError:
                child.join(GRACE_S)
                return _died(child.exitcode, job.log)
            if isinstance(message, Progress):
                if sink is not None:
                    sink(message)
                continue
            child.join(GRACE_S)
            outcome: Outcome = message
            return outcome
        if not child.is_alive():
            return _died(child.exitcode, job.log)
        if time.monotonic() > deadline:
            return _limit(job, f"exceeded timeout_s {limits.timeout_s:g}")
        if limits.memory_mb is not None and (rss := tree_rss_mb(child.pid)) > limits.memory_mb:
            return _limit(job, f"exceeded memory_mb {limits.memory_mb} (resident {rss:.0f} MB)")


def _died(exitcode: int | None, log: Path) -> Outcome:
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        why = f"killed by {name}"
        if name == "SIGKILL":
            why += " (the kernel's out-of-memory killer, or a kill from outside)"
    else:
        why = f"exited with code {exitcode} without a result"
    _note(log, f"the stage's process {why}")
    return Outcome(
        Status.FAILED, f"the stage's process was {why} (its log has what it printed)", ExitCode.CRASHED
    )


def _limit(job: Job, what: str) -> Outcome:
    _note(job.log, f"stopping the stage's process: it {what}")
    return Outcome(
        Status.FAILED,
        f"{what}; the stage was stopped (raise stages.{job.stage}.{what.split()[1]} if it needs more)",
        ExitCode.LIMIT,
    )


def _note(log: Path, line: str) -> None:
    with open(log, "a") as fh:
        fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} ERROR {line}\n")


def _stop(child: Any, spawned: set[Proc]) -> None:
    """SIGTERM to the child's group, SIGKILL after the grace period; reaps the child.
    Descendants in sessions of their own (a stage's tritonserver) get their parent-death
    signal when the child dies; the run waits for them, and kills the slow ones, so none
    outlives the stage."""
    escaped = sorted(spawned.union(_procs(_descendants(child.pid))))
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, GRACE_S)):
        try:
            os.killpg(child.pid, sig)
        except (ProcessLookupError, PermissionError):
            break  # the group is gone
        child.join(wait)
        if not child.is_alive() and not _group_alive(child.pid):
            break
    child.join(GRACE_S)
    _reap(escaped)


def _reap(procs: list[Proc]) -> None:
    deadline = time.monotonic() + GRACE_S
    while (alive := [p for p in procs if p.running()]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for proc in alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + GRACE_S  # SIGKILL lands at once, the exit of a big process not
    while any(p.running() for p in alive) and time.monotonic() < deadline:
        time.sleep(0.1)


@dataclass(frozen=True, order=True)
class Proc:
    """A process by pid and start time: a pid reused by another process is not it."""

    pid: int
    started: str

    def running(self) -> bool:
        """The same process, alive and not a zombie (an orphan's reaper may be slow)."""
        stat = _stat(self.pid)
        return stat is not None and stat[19] == self.started and stat[0] != "Z"


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name: state first, start time at 19."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _procs(pids: list[int]) -> set[Proc]:
    return {Proc(pid, stat[19]) for pid in pids if (stat := _stat(pid)) is not None}


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and its descendants, from /proc (Linux)."""
    return sum(_rss_mb(p) for p in [pid, *_descendants(pid)])


def _descendants(pid: int) -> list[int]:
    found, todo = [], _children(pid)
    while todo:
        current = todo.pop()
        found.append(current)
        todo += _children(current)
    return found


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, IndexError, ValueError):
        return 0.0  # gone meanwhile


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found
