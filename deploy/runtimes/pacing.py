"""Open-loop load at a request rate: perf_analyzer's --request-rate-range.

A dispatcher sends on a schedule (constant gaps of 1/rate, or exponential gaps for a
Poisson process, perf_analyzer's --request-distribution) whatever the server's answers,
so queueing shows in the latency the way real traffic sees it; a closed loop hides it by
slowing down. Calls are asynchronous: `submit(done)` starts one and `done(result, error)`
is called when it ends. Latency runs from the actual send, as perf_analyzer measures it.
At most `limit` calls are in flight: a send held back by that, or by a dispatcher that
could not keep the schedule, is *late*, and the schedule restarts from it (no catch-up
burst), so the share of late sends says how much of the offered rate was really offered. Windows and the stability rule are the closed loop's
(runtimes/streams.py). Stdlib only.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from typing import Any

from deploy.runtimes import streams
from deploy.runtimes.harness import Settings, Timing

Done = Callable[[Any, Any], None]
# A send more than this behind its scheduled time counts as late.
LATE_NS = 1_000_000


class Distribution(str, Enum):
    CONSTANT = "constant"
    POISSON = "poisson"


@dataclass(frozen=True)
class Pace:
    rate: float  # requests per second offered
    distribution: Distribution = Distribution.CONSTANT
    limit: int = 64  # calls in flight at most
    seed: int = 0  # of the Poisson gaps: the same schedule on every run


@dataclass(frozen=True)
class Offered:
    """How the schedule went: sends, and the share that left late."""

    sent: int
    late: int

    @property
    def late_share(self) -> float:
        return self.late / self.sent if self.sent else 0.0


@dataclass
class _Paced(streams.Load):
    submit: Callable[[Done], None] = lambda done: None
    pace: Pace = Pace(1.0)
    sent: int = 0
    late: int = 0
    in_flight: int = 0
    cond: threading.Condition = field(default_factory=threading.Condition)

    def threads(self) -> list[threading.Thread]:
        return [threading.Thread(target=self.dispatch, daemon=True)]

    def dispatch(self) -> None:
        gaps = _gaps(self.pace)
        due = time.perf_counter_ns()
        try:
            while not self.stop.is_set():
                due += next(gaps)
                _sleep_until(due, self.stop)
                if not self._slot():
                    return
                begin = time.perf_counter_ns()
                late = begin - due > LATE_NS
                self.sent, self.late = self.sent + 1, self.late + late
                # A late send re-anchors the schedule: a backlog sent in a burst would
                # offer more than the rate (and measure the burst, not the rate).
                due = begin if late else due
                self.submit(partial(self.done, begin))
        except Exception as exc:
            self.fail(exc)

    def _slot(self) -> bool:
        """Waits for a free slot under the in-flight limit; False once stopped."""
        with self.cond:
            while self.in_flight >= self.pace.limit and not self.stop.is_set():
                self.cond.wait(0.05)
            if self.stop.is_set():
                return False
            self.in_flight += 1
            return True

    def done(self, begin: int, result: Any, error: Any) -> None:
        """Called as tritonclient calls back: `callback(result=..., error=...)`."""
        del result
        with self.cond:
            # The end is read under the lock, so records stay in end order.
            self.records[0].append((begin, time.perf_counter_ns()))
            self.in_flight -= 1
            self.cond.notify()
        if error is not None:
            self.fail(RuntimeError(str(error)))


def measure(
    submit: Callable[[Done], None], pace: Pace, settings: Settings, snapshot: Callable[[], Any] | None = None
) -> tuple[Timing, tuple[Any, Any], Offered]:
    """The kept windows' timing, the snapshots at their edges, and how the schedule went."""
    load = _Paced([[]], submit=submit, pace=pace)
    timing, edges = streams.run(load, settings, snapshot)
    _drain(load)
    timing.completed = sum(len(rows) for rows in load.records)  # the drained ones too
    return timing, edges, Offered(load.sent, load.late)


def _drain(load: _Paced, timeout_s: float = 30.0) -> None:
    """Lets calls still in flight finish, so nothing answers into a closed client."""
    deadline = time.monotonic() + timeout_s
    with load.cond:
        while load.in_flight > 0 and time.monotonic() < deadline:
            load.cond.wait(0.05)


def _gaps(pace: Pace) -> Any:
    """Nanoseconds between sends."""
    if pace.distribution is Distribution.CONSTANT:
        while True:
            yield int(1e9 / pace.rate)
    rng = random.Random(pace.seed)
    while True:
        yield int(1e9 * rng.expovariate(pace.rate))


def _sleep_until(due: int, stop: threading.Event) -> None:
    while not stop.is_set():
        left = due - time.perf_counter_ns()
        if left <= 0:
            return
        time.sleep(min(left / 1e9, streams.POLL_S))
