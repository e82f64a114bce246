"""Several closed-loop streams at once: trtexec's --streams, perf_analyzer's concurrency.

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

from pipeline.errors import StageFailed
from runtimes.harness import Settings, Timing, Window, finished, window_of

POLL_S = 0.01


@dataclass
class _Streams:
    calls: Sequence[Callable[[], Any]]
    stop: threading.Event = field(default_factory=threading.Event)
    records: list[list[tuple[int, int]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def worker(self, index: int) -> None:
        call, mine = self.calls[index], self.records[index]
        try:
            while not self.stop.is_set():
                begin = time.perf_counter_ns()
                call()
                mine.append((begin, time.perf_counter_ns()))
        except Exception as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            self.stop.set()

    def completed_since(self, origin: int) -> int:
        """Calls that ended after `origin` (each stream's records are in end order)."""
        return sum(len(rows) - bisect_left(rows, origin, key=_end) for rows in self.records)

    def latencies(self, origin: int, end: int) -> list[float]:
        """Latencies (ms) of the calls that ended in [origin, end)."""
        return [
            (e - b) / 1e6
            for rows in self.records
            for b, e in rows[bisect_left(rows, origin, key=_end) : bisect_left(rows, end, key=_end)]
        ]


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
    calls: Sequence[Callable[[], Any]], settings: Settings, snapshot: Callable[[], Any] | None = None
) -> tuple[Timing, tuple[Any, Any]]:
    """Runs one stream per call; returns the kept windows' timing and (snapshot at their
    start, snapshot at their end)."""
    streams = _Streams(calls, records=[[] for _ in calls])
    threads = [threading.Thread(target=streams.worker, args=(i,), daemon=True) for i in range(len(calls))]
    take = snapshot or (lambda: None)
    try:
        for thread in threads:
            thread.start()
        _sleep(streams, settings.warmup_ms / 1000)
        edges = _windows(streams, settings, take)
    finally:
        streams.stop.set()
        for thread in threads:
            thread.join()
    if streams.errors:
        raise StageFailed(f"a stream failed: {streams.errors[0]}")
    # Recounted now that every stream has stopped: a call that ended just before an edge
    # may have been appended just after the window was first counted.
    windows = [window_of(streams.latencies(a.ns, b.ns), b.ns - a.ns) for a, b in pairwise(edges)]
    first, last = edges[-settings.stability_windows - 1], edges[-1]
    warmups = sum(1 for rows in streams.records for _, e in rows if e < edges[0].ns)
    return _timing(streams, first.ns, last.ns, windows, warmups), (first.before, last.after)


def _windows(streams: _Streams, settings: Settings, take: Callable[[], Any]) -> list[_Edge]:
    """Back-to-back windows until the stability rule holds or max_windows (or a stream fails)."""
    edges, windows = [_edge(take)], list[Window]()
    while not finished(windows, settings) and not streams.stop.is_set():
        _wait_window(streams, edges[-1].ns, settings)
        edges.append(_edge(take))
        windows.append(window_of(streams.latencies(edges[-2].ns, edges[-1].ns), edges[-1].ns - edges[-2].ns))
    return edges


def _sleep(streams: _Streams, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not streams.stop.is_set():
        time.sleep(POLL_S)


def _wait_window(streams: _Streams, origin: int, settings: Settings) -> None:
    """Until duration/K has passed and at least iterations/K calls have completed."""
    deadline, calls = origin + settings.window_ns(), settings.window_calls()
    while not streams.stop.is_set():
        if time.perf_counter_ns() >= deadline and streams.completed_since(origin) >= calls:
            return
        time.sleep(POLL_S)


def _timing(streams: _Streams, origin: int, end: int, windows: list[Window], warmups: int) -> Timing:
    """The calls that completed inside the kept windows, [origin, end)."""
    inside = sorted((b, e) for rows in streams.records for b, e in rows if origin <= e < end)
    return Timing(
        [(e - b) / 1e6 for b, e in inside],
        [(b - origin) / 1e6 for b, _ in inside],
        (end - origin) / 1e9,
        warmups,
        windows=windows,
    )
