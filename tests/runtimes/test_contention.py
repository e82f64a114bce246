"""The machine under a timing (runtimes/contention.py), measured from /proc with real
processes: busy loops started for the test (not as its children: another job's work, as
on a shared agent) are other processes' work; this process's own is not; the threads
policy follows the cores they leave."""

from __future__ import annotations

import os
import time

import pytest

from deploy.runtimes import contention
from deploy.runtimes.contention import Usage, between
from tests.helpers import cpu_hogs

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux's /proc")


def spin(cpu_s: float) -> None:
    """Busy until this process has spent `cpu_s` of CPU: on a loaded machine a wall-clock
    second of spinning may get a quarter of that (60 s at most)."""
    end, give_up = time.process_time() + cpu_s, time.monotonic() + 60
    while time.process_time() < end and time.monotonic() < give_up:
        pass


def test_our_own_work_is_not_contention_and_a_hog_is() -> None:
    """1 s of this process's own busy loop (CPU time) is ours, not others'; a hog per core beside a
    0.5 s sleep takes most of the machine: contended, the load named."""
    with cpu_hogs(contention.cores()):
        start = contention.usage()
        time.sleep(1.0)
        busy = between(start, contention.usage(), None, 0.0)
    assert busy is not None and busy.contended and busy.others_share > 0.6, busy
    assert busy.text().startswith("CONTENDED: load ") and f"on {contention.cores()} cores" in busy.text()
    start, cpu = contention.usage(), time.process_time()
    spin(1.0)
    end, spun = contention.usage(), time.process_time() - cpu
    ours = between(start, end, 1, float(contention.cores()))
    assert ours is not None and start is not None and end is not None
    # Our own spin is not others' work, whatever else this machine runs: others' share is
    # the machine's busy time less what this process spent, never with the spin in it.
    capacity = (end.at - start.at) * contention.cores()
    assert spun > 0.3 and ours.others_share <= ((end.busy_s - start.busy_s) - spun) / capacity + 0.05, ours


def test_the_threads_fit_the_cores_a_hog_leaves() -> None:
    """Every core busy: one intra-op thread, not the cores (a parked OpenMP thread costs a
    CNN 1000x at batch 1); a number asked for is kept, capped at the cores."""
    with cpu_hogs(contention.cores()):
        fit = contention.fitted()
    assert fit.threads == 1 and fit.cores_free is not None and fit.cores_free < 1, fit
    assert contention.fitted_threads(64) == contention.cores() and contention.fitted_threads(1) == 1


def test_between_divides_other_processes_time_by_the_cores() -> None:
    """The arithmetic, on made-up counters: 3 busy core-seconds of which 1 ours, over 2 s
    on the machine's cores."""
    n = contention.cores()
    start = Usage(at=10.0, busy_s=100.0, steal_s=0.0, own_s=5.0, load1=1.0)
    end = Usage(at=12.0, busy_s=103.0, steal_s=0.0, own_s=6.0, load1=2.5)
    env = between(start, end, 1, 1.5)
    assert env is not None and env.others_share == pytest.approx(round(2.0 / (2.0 * n), 3))
    assert env.contended == (2.0 / (2.0 * n) > contention.CONTENDED_SHARE) and env.load1 == 2.5
    assert between(end, start, 1, 1.5) is None  # no window: no environment


def test_a_call_whose_threads_fill_every_core_is_contended_by_less(monkeypatch) -> None:
    """Other processes at 12.5 % of 2 cores (under the 25 % rule) cut a 2-thread call's
    throughput by 26-29 % unflagged: with every core timed, work beyond the cores the call
    leaves free is contention; with one core left free, the same work is not."""
    monkeypatch.setattr(contention, "cores", lambda: 2)
    start = Usage(at=10.0, busy_s=100.0, steal_s=0.0, own_s=5.0, load1=1.0)
    end = Usage(at=12.0, busy_s=104.5, steal_s=0.0, own_s=9.0, load1=1.2)  # others 0.5 core-s in 2 s
    full, half = between(start, end, 2, 2.0), between(start, end, 1, 2.0)
    assert full is not None and half is not None and full.others_share == 0.125 == half.others_share
    assert full.contended and not half.contended


def test_settle_gives_up_on_a_busy_machine_and_says_how_busy() -> None:
    with cpu_hogs(contention.cores()):
        found = contention.settle(quiet_s=1.0, timeout_s=1.5, poll_s=0.5)
    assert found is not None and found.contended, found


def test_the_summary_says_the_machine_and_warns_when_it_was_contended() -> None:
    """`deploy bench` and the stage's log print the machine beside the timing: a quiet one
    as information, a contended one as a warning that no verdict should rest on it."""
    from deploy.runtimes import harness
    from deploy.runtimes.contention import Environment
    from deploy.runtimes.harness import Settings, Timing, Window

    timing = Timing([2.0] * 30, [float(i) for i in range(30)], 3.0, 1, windows=[Window(10, 1.0, 2.0)] * 3)
    timing.environment = Environment(2, 2, 0.4, 3.8, 0.6, 0.0, contended=True)
    lines = harness.report_lines("m", harness.summarize(timing, 1, Settings()), Settings())
    assert (
        "[W] * CONTENDED: load 3.8 on 2 cores, others 60 % of the cores; 2 intra-op threads, 0.4 cores free "
        "at the start: other processes' work was timed with this one; no verdict should rest on it "
        "(rerun on a quiet machine)"
    ) in lines, lines
    timing.environment = Environment(2, 2, 1.9, 0.2, 0.01, 0.0, contended=False)
    lines = harness.report_lines("m", harness.summarize(timing, 1, Settings()), Settings())
    assert (
        "[I] Machine: quiet: load 0.2 on 2 cores, others 1 % of the cores; 2 intra-op threads, 1.9 cores "
        "free at the start"
    ) in lines, lines


STAT = """cpu  300 0 100 800 0 0 0 5 0 0
cpu0 10 0 5 385 0 0 0 1 0 0
cpu1 290 0 95 415 0 0 0 4 0 0
intr 12345
"""


def test_a_process_pinned_to_some_cores_counts_only_theirs(monkeypatch) -> None:
    """taskset -c 0 (or a container's --cpuset-cpus) beside a busy loop on core 1: the
    machine's line counted core 1's work as contention on one core (others 100 %), and
    --wait-quiet gave up while the pinned timing was unchanged."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert contention._cpu_ticks(STAT) == [10, 0, 5, 385, 0, 0, 0, 1, 0, 0]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert contention._cpu_ticks(STAT) == [300, 0, 100, 800, 0, 0, 0, 5, 0, 0]  # all of them: the total
