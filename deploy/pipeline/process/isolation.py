"""One stage's code in a child process, so that what that code does to its process — a
segfault in an extension, an abort in a converter, the kernel's out-of-memory kill, a
hang — fails that stage instead of taking the run (and its summary, JUnit and report)
down with it. Model Navigator converts in child processes for the same reason.

Children come from a fork server that has imported the heavy libraries once (PRELOAD),
so a stage pays a fork (tens of ms), not a fresh interpreter importing torch (~2 s).
The server starts at the first stage that runs: a fully cached run starts nothing.
Each child leads its own process group and is the subreaper of what it starts;
stopping a stage (timeout, memory limit, Ctrl-C / SIGTERM / SIGHUP of the run) stops the
group and every descendant, and when the run itself is killed (even with SIGKILL) the
fork server and the children follow it (pipeline/process/lifeline.py).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.pipeline.errors import ExitCode
from deploy.pipeline.process import lasting, lifeline, logs, stopping
from deploy.pipeline.process.execute import Job, Outcome, execute
from deploy.pipeline.process.progress import HEARTBEAT_S, Progress, Sink, heartbeat
from deploy.pipeline.report.results import Status

# Imported once by the fork server: what most stages import, and what costs seconds.
# Names only (a missing one is skipped): the engine still imports none of them itself.
# pipeline.process.lifeline first: the server dies with the run from its first moment.
PRELOAD = (
    "deploy.pipeline.process.lifeline",
    "numpy",
    "torch",
    "onnx",
    "onnxruntime",
    "deploy.pipeline.process.isolation",
)
# Model libraries whose import takes seconds and does nothing else: where the config's
# model factory comes from one, the fork server imports it too, once, instead of every stage
# that loads the model (golden, trace, export, bench, ...) importing it again (torchvision:
# 1.6 s a stage here). Only these: a user's own module may do anything when imported.
MODEL_LIBRARIES = frozenset({"torchvision", "timm", "transformers", "torchaudio"})
POLL_S = 0.2
_STARTING = threading.Lock()
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
    mp.set_forkserver_preload(preload(job))
    receive, send = mp.Pipe(duplex=False)
    args = (job, dict(os.environ), list(sys.path), send)
    child = mp.Process(target=_child, args=args, name=f"deploy-{job.stage}")
    spawned: set[Proc] = set()  # every descendant seen: a crash orphans them before _stop
    try:
        # a stop now would orphan a child; the environment and the main module are the
        # process's: two pipelines' threads start their children one at a time
        with _STARTING, stopping.deferred(), _safe_path(), _main_hidden():
            lasting.start_fork_server()
            child.start()
        _stop_helpers_at_exit()
        send.close()
        return _wait(child, receive, job, limits, spawned, sink)
    finally:
        if child.pid is not None:
            _stop(child, spawned)
            lifeline.remove_shm(lifeline.shm_prefix(child.pid))  # a killed stage's servers left theirs
        send.close()
        receive.close()


def preload(job: Job) -> list[str]:
    """PRELOAD, and the model's library where it is one of MODEL_LIBRARIES (before this
    module, the last: what the server imports before it dies with the run either way)."""
    factory = job.config.model.factory
    library = factory.split(".")[0].split(":")[0] if factory else ""
    extra = [library] if library in MODEL_LIBRARIES else []
    return [*PRELOAD[:-1], *extra, PRELOAD[-1]]


@functools.cache
def _stop_helpers_at_exit() -> None:
    """The fork server and multiprocessing's resource tracker end when their pipe from
    deploy closes, a moment after deploy exits. At exit deploy closes those pipes itself
    and waits (a bounded while) for both, so its exit is their end too. The fork server
    first: it holds the tracker's pipe as well. multiprocessing's own attributes, so
    looked up, not assumed."""
    import atexit
    from multiprocessing import forkserver, resource_tracker

    helpers = [
        (forkserver._forkserver, "_forkserver_alive_fd", "_forkserver_pid"),
        (resource_tracker._resource_tracker, "_fd", "_pid"),
    ]
    atexit.register(_end_all, helpers)


def _end_all(helpers: list[tuple[object, str, str]]) -> None:
    for helper, fd_name, pid_name in helpers:
        _end(helper, fd_name, pid_name)


def _end(helper: object, fd_name: str, pid_name: str) -> None:
    fd, pid = getattr(helper, fd_name, None), getattr(helper, pid_name, None)
    if not isinstance(fd, int) or not isinstance(pid, int):
        return
    with contextlib.suppress(OSError):
        os.close(fd)
    setattr(helper, fd_name, None)
    deadline = time.monotonic() + GRACE_S
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:  # a copy of its pipe lives on somewhere: ours to end
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(0.01)


@contextlib.contextmanager
def _main_hidden() -> Iterator[None]:
    """The child needs nothing of the caller's main module (its target is ours, by name),
    but multiprocessing re-runs that module in the child when it can find it: a script
    without an `if __name__ == "__main__":` guard would start its run again in the stage's
    process, and `python - < script.py` would fail on '<stdin>'. So the main module shows
    neither its file nor its spec while the child starts."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved: dict[str, object] = {
        k: main.__dict__.pop(k) for k in ("__file__", "__spec__") if k in main.__dict__
    }
    main.__spec__ = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


@contextlib.contextmanager
def _safe_path() -> Iterator[None]:
    """The fork server is a fresh `python -c`, whose sys.path starts with the working
    directory: a user's own `pipeline/` or `stages/` folder there would shadow ours when
    it imports PRELOAD. PYTHONSAFEPATH (3.11) leaves the directory out. $DEPLOY_PARENT_PID
    tells the server whose death it dies with (pipeline/process/lifeline.py). Both are set only
    while the server may start (children get the runner's environment back)."""
    settings = {"PYTHONSAFEPATH": "1", lifeline.PARENT_ENV: str(os.getpid())}
    before = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _child(job: Job, environ: dict[str, str], path: list[str], send: Any) -> None:
    """The child: its own process group (a terminal's Ctrl-C reaches the runner, which
    stops it), the runner's environment and import path (a model module importable
    there is importable here), a Python traceback on a fatal signal."""
    import faulthandler

    os.setpgrp()
    lifeline.contain()  # its descendants die with it, and it with the fork server
    os.environ.clear()
    os.environ.update(environ)
    sys.path[:] = path
    with open(job.log, "a") as log:
        faulthandler.enable(file=log)  # SIGSEGV / SIGABRT: where Python was, into the stage log
        try:
            outcome = execute(job, job.spec(), send.send)
        except KeyboardInterrupt:  # no Ctrl-C reaches this process group: the model raised it
            print(traceback.format_exc(), file=log)
            outcome = Outcome(
                Status.FAILED, "code run by the stage raised KeyboardInterrupt (traceback in the log)"
            )
    lifeline.kill_descendants(os.getpid())  # what the stage started and left running
    lifeline.remove_shm(lifeline.shm_prefix())
    send.send(outcome)
    send.close()


def _wait(
    child: Any, receive: Any, job: Job, limits: Limits, spawned: set[Proc], sink: Sink | None
) -> Outcome:
    started = time.monotonic()
    deadline, heard = started + limits.timeout_s, started
    while True:
        spawned.update(_procs(lifeline.descendants(child.pid)))
        logs.bound(job.log)
        if receive.poll(POLL_S):  # progress, an outcome, or the end of the pipe: the child is gone
            try:
                message = receive.recv()
            except EOFError:
                child.join(GRACE_S)
                return _died(child.exitcode, job.log)
            if isinstance(message, Progress):
                heard = time.monotonic()
                if sink is not None:
                    sink(message)
                continue
            child.join(GRACE_S)
            outcome: Outcome = message
            return outcome
        if not child.is_alive():
            if receive.poll(0):  # it sent its outcome, then exited, after the poll above timed out
                continue
            return _died(child.exitcode, job.log)
        now = time.monotonic()
        if now > deadline:
            return _limit(job, f"exceeded timeout_s {limits.timeout_s:g}")
        if limits.memory_mb is not None and (rss := tree_rss_mb(child.pid)) > limits.memory_mb:
            return _limit(job, f"exceeded memory_mb {limits.memory_mb} (resident {rss:.0f} MB)")
        if sink is not None and now - heard >= HEARTBEAT_S:  # a silent stage still shows it is alive
            heard = now
            sink(heartbeat(job.stage, now - started))


def _died(exitcode: int | None, log: Path) -> Outcome:
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        why = f"was killed by {name}"
        if -exitcode == signal.SIGKILL:
            why += " (the kernel's out-of-memory killer, or a kill from outside)"
    else:
        why = f"exited with code {exitcode} without a result"
    _note(log, f"the stage's process {why}")
    return Outcome(
        Status.FAILED, f"the stage's process {why} (its log has what it printed)", ExitCode.CRASHED
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
    escaped = sorted(spawned.union(_procs(lifeline.descendants(child.pid))))
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, GRACE_S)):
        if not _signal_stage(child.pid, sig):
            break  # the group and the child are gone
        child.join(wait)
        if not child.is_alive() and not _group_alive(child.pid):
            break
    child.join(GRACE_S)
    _reap(escaped)


def _signal_stage(pid: int, sig: int) -> bool:
    """`sig` to the child's group and to the child itself: a child stopped just after it
    was started may not lead its group yet. False when neither exists."""
    reached = False
    for send, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            send(target, sig)
            reached = True
        except (ProcessLookupError, PermissionError):
            continue
    return reached


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
        return stat is not None and stat[19] == self.started and stat[0] != lifeline.ZOMBIE


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
    return sum(_rss_mb(p) for p in [pid, *lifeline.descendants(pid)])


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, IndexError, ValueError):
        return 0.0  # gone meanwhile
