"""N closed-loop streams: each stream keeps one call in flight, so N sleeping streams
complete about N times the calls of one; every window holds its share of calls; all
streams stop when the measurement ends, and one failing stream fails it.
(tests/deploy/test_bench.py covers the snapshot edges and the stability rule.)"""

from __future__ import annotations

import statistics
import threading
import time

import pytest

from deploy.pipeline.errors import StageFailed
from deploy.runtimes import streams
from deploy.runtimes.harness import Settings

SLEEP_S = 0.01  # long beside a loaded machine's late wake-ups and thread switches
SETTINGS = Settings(warmup_ms=20, duration_s=0.15, iterations=12, percentiles=(50.0,), max_windows=4)


class Counted:
    """A call that sleeps SLEEP_S and counts itself, and the most calls in flight at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = self.running = self.peak = 0

    def __call__(self) -> None:
        with self.lock:
            self.calls += 1
            self.running += 1
            self.peak = max(self.peak, self.running)
        time.sleep(SLEEP_S)
        with self.lock:
            self.running -= 1


@pytest.mark.parametrize("n", [1, 3])
def test_n_streams_keep_n_calls_in_flight(n: int) -> None:
    counters = [Counted() for _ in range(n)]
    threads = threading.active_count()
    timing, edges = streams.measure(counters, SETTINGS)
    assert edges == (None, None)  # no snapshot asked for
    assert all(c.calls > 0 and c.peak == 1 for c in counters), "each stream: one call at a time"
    rate = len(timing.latencies_ms) / timing.wall_s
    # n calls in flight at the latency they took (load stretches the sleeps, not this ratio).
    mean_s = statistics.fmean(timing.latencies_ms) / 1000
    assert 0.7 * n / mean_s < rate < 1.1 * n / SLEEP_S
    assert SLEEP_S * 1000 <= sorted(timing.latencies_ms)[len(timing.latencies_ms) // 2] < 4 * SLEEP_S * 1000
    assert all(window.calls >= SETTINGS.window_calls() for window in timing.windows)
    assert SETTINGS.stability_windows <= len(timing.windows) <= SETTINGS.max_windows
    assert timing.warmup_calls >= n
    assert threading.active_count() == threads, "the stream threads are joined"


def test_no_call_runs_after_the_measurement_returns() -> None:
    counters = [Counted(), Counted()]
    streams.measure(counters, SETTINGS)
    settled = [c.calls for c in counters]
    time.sleep(5 * SLEEP_S)
    assert [c.calls for c in counters] == settled and all(c.running == 0 for c in counters)


def test_the_kept_calls_are_those_of_the_last_k_windows() -> None:
    timing, _ = streams.measure([Counted(), Counted()], SETTINGS)
    kept = timing.windows[-SETTINGS.stability_windows :]
    assert len(timing.latencies_ms) == sum(window.calls for window in kept)
    assert timing.wall_s == pytest.approx(sum(window.wall_s for window in kept), rel=1e-6)
    assert all(
        start + latency <= 1000 * timing.wall_s
        for start, latency in zip(timing.starts_ms, timing.latencies_ms)
    )


def test_one_failing_stream_stops_them_all_with_its_error() -> None:
    healthy = Counted()
    failures = 0

    def flaky() -> None:
        nonlocal failures
        time.sleep(SLEEP_S)
        failures += 1
        if failures == 3:
            raise ConnectionError("server went away")

    threads = threading.active_count()
    started = time.monotonic()
    with pytest.raises(StageFailed, match=r"^a stream failed: ConnectionError: server went away$"):
        streams.measure([healthy, flaky], Settings(warmup_ms=0, duration_s=10.0, iterations=10))
    assert time.monotonic() - started < 2.0, "the failure ends the measurement at once"
    assert threading.active_count() == threads and healthy.running == 0
