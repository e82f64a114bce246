"""Open-loop load (perf_analyzer's request-rate mode) against a real single-worker
service on threads: below capacity it offers the rate it was asked for and latency is the
service time; above capacity latency grows with the queue, which a closed loop hides."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from deploy.runtimes import pacing
from deploy.runtimes.harness import Settings

SERVICE_S = 0.01  # one worker: capacity 100 requests/s
SETTINGS = Settings(warmup_ms=100, duration_s=1.0, iterations=10, stability_windows=2, max_windows=4)


@pytest.fixture
def service():
    pool = ThreadPoolExecutor(max_workers=1)

    def work() -> None:
        time.sleep(SERVICE_S)

    def submit(done) -> None:
        pool.submit(work).add_done_callback(lambda f: done(result=None, error=f.exception()))

    yield submit
    pool.shutdown(wait=True)


@pytest.mark.parametrize("distribution", list(pacing.Distribution))
def test_below_capacity_the_offered_rate_is_served_at_the_service_time(service, distribution) -> None:
    timing, _, offered = pacing.measure(service, pacing.Pace(50.0, distribution), SETTINGS)
    qps = len(timing.latencies_ms) / timing.wall_s
    # A late send restarts the constant schedule from itself, so load only lowers the rate
    # (about 10 % at 30-40 % late sends): the bound is as wide as the bench stage's own test.
    assert qps == pytest.approx(50.0, rel=0.25 if distribution is pacing.Distribution.POISSON else 0.15)
    median = sorted(timing.latencies_ms)[len(timing.latencies_ms) // 2]
    assert 1000 * SERVICE_S <= median < 3 * 1000 * SERVICE_S
    # Below capacity a send is late only when the dispatcher woke more than 1 ms after its
    # time: at most about half, however busy the machine (13 % seen with two test workers
    # loaded, 33 % in the bench stage's test with three), against > 50 % held back by the
    # limit above capacity (the next test).
    assert offered.sent >= len(timing.latencies_ms) and offered.late_share < 0.5


def test_above_capacity_the_queue_shows_in_latency_and_late_sends(service) -> None:
    timing, _, offered = pacing.measure(service, pacing.Pace(200.0, limit=8), SETTINGS)
    qps = len(timing.latencies_ms) / timing.wall_s
    # The service's capacity, not the 200/s offered: load can only stretch each service
    # call, so the bound below is loose and the one above is not.
    assert 0.5 / SERVICE_S < qps <= 1.05 / SERVICE_S
    median = sorted(timing.latencies_ms)[len(timing.latencies_ms) // 2]
    assert median > 5 * 1000 * SERVICE_S  # waiting behind up to 7 others
    assert offered.late_share > 0.5


def test_a_failed_call_stops_the_load_with_its_error() -> None:
    def submit(done) -> None:
        threading.Thread(target=done, kwargs={"result": None, "error": "model not ready"}).start()

    from deploy.pipeline.errors import StageFailed

    with pytest.raises(StageFailed, match="model not ready"):
        pacing.measure(submit, pacing.Pace(100.0), SETTINGS)
