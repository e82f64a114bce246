"""Several closed-loop streams at once: trtexec's --streams, perf_analyzer's concurrency.

Each stream sends its next call as soon as the previous one returns. After a time-based
warm-up, a window of at least `duration` seconds and at least `iterations` calls is
measured as perf_analyzer does: the calls that *completed* inside it give the throughput
(their count over the window) and the latencies (a call that started before the window
counts; one still running at its end does not), the set a server's counters also see. A `snapshot` taken at the window's edges lets the caller read
counters that cover the same window (Triton's statistics). Stdlib only.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.errors import StageFailed
from stages._bench import Settings, Timing

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
        except Exception as exc:  # noqa: BLE001 - reported by the measuring thread
            self.errors.append(f"{type(exc).__name__}: {exc}")
            self.stop.set()

    def completed_since(self, origin: int) -> int:
        """Calls that ended after `origin` (each stream's records are in end order)."""
        return sum(len(rows) - bisect_left(rows, origin, key=_end) for rows in self.records)


def _end(record: tuple[int, int]) -> int:
    return record[1]


def measure(calls: Sequence[Callable[[], Any]], settings: Settings, snapshot: Callable[[], Any] | None = None) -> tuple[Timing, tuple[Any, Any]]:
    """Runs one stream per call; returns the window's timing and (snapshot at its start,
    snapshot at its end)."""
    streams = _Streams(calls, records=[[] for _ in calls])
    threads = [threading.Thread(target=streams.worker, args=(i,), daemon=True) for i in range(len(calls))]
    take = snapshot or (lambda: None)
    try:
        for thread in threads:
            thread.start()
        _sleep(streams, settings.warmup_ms / 1000)
        before, origin = take(), time.perf_counter_ns()
        _wait_window(streams, origin, settings)
        end, after = time.perf_counter_ns(), take()
    finally:
        streams.stop.set()
        for thread in threads:
            thread.join()
    if streams.errors:
        raise StageFailed(f"a stream failed: {streams.errors[0]}")
    return _timing(streams, origin, end), (before, after)


def _sleep(streams: _Streams, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not streams.stop.is_set():
        time.sleep(POLL_S)


def _wait_window(streams: _Streams, origin: int, settings: Settings) -> None:
    """Until `duration` has passed and at least `iterations` calls have completed."""
    deadline = origin + int(settings.duration_s * 1e9)
    while not streams.stop.is_set():
        if time.perf_counter_ns() >= deadline and streams.completed_since(origin) >= settings.iterations:
            return
        time.sleep(POLL_S)


def _timing(streams: _Streams, origin: int, end: int) -> Timing:
    inside = sorted((b, e) for rows in streams.records for b, e in rows if origin <= e <= end)
    warmups = sum(1 for rows in streams.records for _, e in rows if e < origin)
    return Timing([(e - b) / 1e6 for b, e in inside], [(b - origin) / 1e6 for b, _ in inside], (end - origin) / 1e9, warmups)
