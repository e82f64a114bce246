"""What else the machine did while something was timed, read from /proc, and what that
means for the timing. A shared CI agent runs other jobs beside a benchmark; on 2 cores an
OpenMP parallel region then waits for a thread the scheduler parked, and a CNN's 0.03 ms
batch-1 call reads 28 ms, every window self-consistent, so a stability rule passes it.
So every timed window carries its `Environment`: the load average, the CPU share stolen
by the hypervisor, the CPU time *other* processes took during it (all CPU time the kernel
counted, less this process tree's own), the threads used and the cores free when it began.
A window in which other processes took more than CONTENDED_SHARE of the cores is
`contended`: shown, and never the ground of a verdict (select, speed-ups, gates).

The threads policy is here too: intra-op threads for torch, ONNX Runtime and OpenVINO are
the cores free at the start (never more than the cores, at least one), one rule for every
runtime so that no row pays an oversubscription the others do not.

Stdlib only (Linux's /proc; elsewhere the environment is "not measured")."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Above this share of the machine's cores used by other processes during a window, its
# timing is contended: on 2 cores, another process busy half the window.
CONTENDED_SHARE = 0.25
QUIET_S = 5.0  # the stretch that must be quiet before timing starts (`--wait-quiet`)
# Where the timed call's threads fill every core, other processes need no 25 % to slow it by
# more than that (a 40 % duty loop on one of 2 cores, others 11-14 %: throughput -26..-29 %):
# their work beyond the cores the call leaves free, by more than this many cores, is contention.
CROWDED_CORES = 0.2
PROC = Path("/proc")
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Usage:
    """Cumulative CPU seconds: the whole machine's busy and stolen time, and this
    process tree's own, at one instant."""

    at: float  # monotonic seconds
    busy_s: float  # every CPU's non-idle time (user, nice, system, irq, softirq; steal apart)
    steal_s: float
    own_s: float  # this process, its threads and its live children (a server we started)
    load1: float


@dataclass(frozen=True)
class Environment:
    """The machine during one timed window (or a stage's measuring)."""

    cores: int
    threads: int | None  # intra-op threads the runtime used (None: its default)
    cores_free: float  # at the start: cores less what other processes were using then
    load1: float  # 1-minute load average at the end
    others_share: float  # other processes' CPU time / (wall time x cores)
    steal_share: float  # stolen time / (wall time x cores)
    contended: bool

    def text(self) -> str:
        """One clause for a headline: `CONTENDED: load 7.0 on 2 cores, others 61 % of the cores`."""
        what = f"load {self.load1:.1f} on {self.cores} cores, others {100 * self.others_share:.0f} % of the cores"
        steal = f", steal {100 * self.steal_share:.0f} %" if self.steal_share >= 0.01 else ""
        return f"{'CONTENDED' if self.contended else 'quiet'}: {what}{steal}"


@dataclass(frozen=True)
class Fit:
    """The threads a runtime was given and the cores free when timing began."""

    threads: int | None = None
    cores_free: float | None = None

    def environment(self, start: Usage | None, end: Usage | None) -> Environment | None:
        free = self.cores_free if self.cores_free is not None else float(cores())
        return between(start, end, self.threads, free)


def fitted(asked: int | None = None) -> Fit:
    """The threads policy's choice, with the free cores it rests on."""
    free = cores_free()
    return Fit(fitted_threads(asked, free), round(free, 2))


def physical_cores() -> int:
    """Cores, hyper-threads counted once (what ONNX Runtime's default intra-op threads
    follow), from sysfs; the logical count where sysfs does not say."""
    siblings = {
        p.read_text().strip()
        for p in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology/thread_siblings_list")
    }
    return len(siblings) or cores()


def cores() -> int:
    found = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return len(found) if found else (os.cpu_count() or 1)


def _cpu_ticks(stat: str) -> list[int]:
    """/proc/stat's ticks on the CPUs this process may run on: the machine's line where that
    is all of them, else its CPUs' lines summed (a container pinned by --cpuset-cpus, or
    taskset: a process busy on another core read as contention on ours, and capacity is
    counted in our cores)."""
    lines = stat.splitlines()
    per_cpu = {
        int(ln.split()[0][3:]): ln.split()[1:] for ln in lines if ln.startswith("cpu") and ln[3:4].isdigit()
    }
    mine = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(per_cpu)
    if not per_cpu or set(per_cpu) <= mine:
        return [int(f) for f in lines[0].split()[1:]]
    rows = [[int(f) for f in per_cpu[cpu]] for cpu in sorted(mine) if cpu in per_cpu]
    return [sum(column) for column in zip(*rows, strict=False)]


def usage(tree: tuple[int, ...] = ()) -> Usage | None:
    """Now, or None where /proc cannot be read. `tree`: more pids counted as ours (a
    server this process started, which timing measures end to end)."""
    try:
        ticks = _cpu_ticks((PROC / "stat").read_text())
        load1 = float((PROC / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq = ticks[:7]
    steal = ticks[7] if len(ticks) > 7 else 0
    busy = (user + nice + system + irq + softirq) / TICK
    own = sum(_cpu_s(pid) for pid in {os.getpid(), *tree, *_children(os.getpid())})
    return Usage(time.monotonic(), busy, steal / TICK, own, load1)


def _cpu_s(pid: int) -> float:
    """A process's user + system time, its threads' included, and its waited-for children's."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICK  # utime stime cutime cstime


def _children(pid: int) -> list[int]:
    """Every live descendant (a server and its stubs), from /proc/<pid>/task/*/children."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in _tasks(parent):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            found += kids
            todo += kids
    return found


def _tasks(pid: int) -> list[Path]:
    try:
        return list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return []


def between(start: Usage | None, end: Usage | None, threads: int | None, free: float) -> Environment | None:
    """The environment of the window from `start` to `end`."""
    if start is None or end is None or end.at <= start.at:
        return None
    n = cores()
    capacity = (end.at - start.at) * n
    others = max(0.0, (end.busy_s - start.busy_s) - (end.own_s - start.own_s)) / capacity
    steal = max(0.0, end.steal_s - start.steal_s) / capacity
    spare = n - threads if threads is not None else n  # cores the timed call leaves to others
    crowded = others * n > spare + CROWDED_CORES
    contended = others > CONTENDED_SHARE or steal > CONTENDED_SHARE or crowded
    return Environment(
        n, threads, round(free, 2), end.load1, round(min(others, 1.0), 3), round(steal, 3), contended
    )


def cores_free(sample_s: float = 0.3) -> float:
    """Cores not used by other processes over a short sample (at least 0; the threads
    policy rounds it)."""
    start = usage()
    time.sleep(sample_s)
    end = usage()
    if start is None or end is None:
        return float(cores())
    used = max(0.0, (end.busy_s - start.busy_s) - (end.own_s - start.own_s)) / (end.at - start.at)
    return max(0.0, cores() - used)


def fitted_threads(asked: int | None = None, free: float | None = None) -> int:
    """The intra-op threads for every runtime: what the config asks, else the cores free at
    the start, never more than the cores and at least one."""
    if asked is not None:
        return max(1, min(asked, cores()))
    found = cores_free() if free is None else free
    return max(1, min(cores(), int(found + 0.5)))


def settle(
    quiet_s: float, timeout_s: float, poll_s: float = 1.0, busy: Callable[[Environment], None] | None = None
) -> Environment | None:
    """Waits until a `quiet_s` stretch in which other processes stayed under CONTENDED_SHARE
    of the cores, or `timeout_s` passes; the last stretch's environment (None where /proc
    is unreadable). `busy` hears each busy stretch (the wait is said as it happens). `--wait-quiet`."""
    deadline = time.monotonic() + timeout_s
    found = None
    while True:
        start = usage()
        time.sleep(min(quiet_s, max(poll_s, quiet_s)))
        found = between(start, usage(), None, cores())
        if found is None or not found.contended:
            return found
        if busy is not None:
            busy(found)
        if time.monotonic() + quiet_s > deadline:  # no whole stretch fits before it: it ran past the limit
            return found
