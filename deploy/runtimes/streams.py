"""Several closed-loop streams at once: trtexec's --streams, perf_analyzer's concurrency;
and the windowing every load shares (runtimes/pacing.py adds the open-loop one).

Each stream sends its next call as soon as the previous one returns. After a time-based
warm-up, back-to-back windows, each of at least `duration / K` seconds and `iterations / K`
completed calls, are measured until perf_analyzer's stability rule holds (runtimes/harness.py:
the last K windows agree within the threshold, else up to `max_windows`). As perf_analyzer
does, the calls that *completed* inside a window give its throughput (their count over the
window) and latencies (a call that started before the window counts; one still running at
its end counts in the next), the set a server's counters also see. A `snapshot` taken just
before and just after every window edge lets the caller read counters that cover the kept
windows (Triton's statistics). Stdlib only.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from deploy.pipeline.errors import StageFailed
from deploy.runtimes.contention import Fit, usage
from deploy.runtimes.harness import Settings, Timing, Window, finished, window_of

POLL_S = 0.01


@dataclass
class Load:
    """A load running on threads, recording (begin, end) of each completed call; the
    windows below read it. Each list of `records` is in end order."""

    records: list[list[tuple[int, int]]]
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)

    def threads(self) -> list[threading.Thread]:
        raise NotImplementedError

    def fail(self, exc: BaseException) -> None:
        self.errors.append(f"{type(exc).__name__}: {exc}")
        self.stop.set()

    def completed_since(self, origin: int) -> int:
        """Calls that ended after `origin`."""
        return sum(len(rows) - bisect_left(rows, origin, key=_end) for rows in self.records)

    def latencies(self, origin: int, end: int) -> list[float]:
        """Latencies (ms) of the calls that ended in [origin, end)."""
        return [
            (e - b) / 1e6
            for rows in self.records
            for b, e in rows[bisect_left(rows, origin, key=_end) : bisect_left(rows, end, key=_end)]
        ]


@dataclass
class _Streams(Load):
    """Closed loop: one thread per call, each sending its next call when the last returns."""

    calls: Sequence[Callable[[], Any]] = ()

    def threads(self) -> list[threading.Thread]:
        return [threading.Thread(target=self.worker, args=(i,), daemon=True) for i in range(len(self.calls))]

    def worker(self, index: int) -> None:
        call, mine = self.calls[index], self.records[index]
        try:
            while not self.stop.is_set():
                begin = time.perf_counter_ns()
                call()
                mine.append((begin, time.perf_counter_ns()))
        except Exception as exc:
            self.fail(exc)


def _end(record: tuple[int, int]) -> int:
    return record[1]


@dataclass(frozen=True)
class _Edge:
    """A window boundary: when, and the caller's counters just before and just after, so
    the counters between two edges cover every call the windows between them count."""

    before: Any
    ns: int
    after: Any


def _edge(take: Callable[[], Any]) -> _Edge:
    before = take()
    return _Edge(before, time.perf_counter_ns(), take())


def measure(
    calls: Sequence[Callable[[], Any]],
    settings: Settings,
    snapshot: Callable[[], Any] | None = None,
    fit: Fit | None = None,
) -> tuple[Timing, tuple[Any, Any]]:
    """Runs one closed-loop stream per call; returns the kept windows' timing and
    (snapshot at their start, snapshot at their end)."""
    return run(_Streams([[] for _ in calls], calls=calls), settings, snapshot, fit)


def run(
    load: Load, settings: Settings, snapshot: Callable[[], Any] | None = None, fit: Fit | None = None
) -> tuple[Timing, tuple[Any, Any]]:
    """Warm-up, then windows until stable; the kept windows' timing (with the machine's
    usage over them: runtimes/contention.py) and the snapshots at their edges."""
    threads = load.threads()
    marks = [usage()]

    def take() -> Any:  # the caller's counters, and the machine's usage, at each edge
        marks.append(usage())
        return snapshot() if snapshot is not None else None

    try:
        for thread in threads:
            thread.start()
        _sleep(load, settings.warmup_ms / 1000)
        edges = _windows(load, settings, take)
    finally:
        load.stop.set()
        for thread in threads:
            thread.join()
    if load.errors:
        raise StageFailed(f"a stream failed: {load.errors[0]}")
    # Recounted now that every stream has stopped: a call that ended just before an edge
    # may have been appended just after the window was first counted.
    windows = [window_of(load.latencies(a.ns, b.ns), b.ns - a.ns) for a, b in pairwise(edges)]
    first, last = edges[-settings.stability_windows - 1], edges[-1]
    warmups = sum(1 for rows in load.records for _, e in rows if e < edges[0].ns)
    timing = _timing(load, first.ns, last.ns, windows, warmups)
    timing.completed = sum(len(rows) for rows in load.records)
    # Each edge took the usage twice (before and after its counters): the kept windows'
    # first edge is mark 2k+1 after the one taken at the start.
    kept = 1 + 2 * (len(edges) - settings.stability_windows - 1)
    timing.environment = (fit or Fit()).environment(marks[kept], marks[-1])
    return timing, (first.before, last.after)


def _windows(streams: Load, settings: Settings, take: Callable[[], Any]) -> list[_Edge]:
    """Back-to-back windows until the stability rule holds or max_windows (or a stream fails)."""
    edges, windows = [_edge(take)], list[Window]()
    while not finished(windows, settings) and not streams.stop.is_set():
        _wait_window(streams, edges[-1].ns, settings)
        edges.append(_edge(take))
        windows.append(window_of(streams.latencies(edges[-2].ns, edges[-1].ns), edges[-1].ns - edges[-2].ns))
    return edges


def _sleep(streams: Load, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not streams.stop.is_set():
        time.sleep(POLL_S)


def _wait_window(streams: Load, origin: int, settings: Settings) -> None:
    """Until duration/K has passed and at least iterations/K calls have completed."""
    deadline, calls = origin + settings.window_ns(), settings.window_calls()
    while not streams.stop.is_set():
        if time.perf_counter_ns() >= deadline and streams.completed_since(origin) >= calls:
            return
        time.sleep(POLL_S)


def _timing(streams: Load, origin: int, end: int, windows: list[Window], warmups: int) -> Timing:
    """The calls that completed inside the kept windows, [origin, end)."""
    inside = sorted((b, e) for rows in streams.records for b, e in rows if origin <= e < end)
    return Timing(
        [(e - b) / 1e6 for b, e in inside],
        [(b - origin) / 1e6 for b, _ in inside],
        (end - origin) / 1e9,
        warmups,
        windows=windows,
    )
