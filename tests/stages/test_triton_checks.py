"""Reading Triton's statistics after a burst: the counters lag the last response."""

from __future__ import annotations

import time

from deploy.serving.requests import settled


def test_settled_waits_until_the_last_batch_is_counted() -> None:
    reads = iter([(60, 9), (62, 10), (64, 11), (64, 11)])
    assert settled(lambda: next(reads), lambda c: c[0], 64, timeout_s=2.0) == (64, 11)


def test_settled_returns_the_last_read_at_the_deadline() -> None:
    calls: list[float] = []

    def read() -> tuple[int, int]:
        calls.append(time.monotonic())
        return (10, 2)

    start = time.monotonic()
    assert settled(read, lambda c: c[0], 64, timeout_s=0.5) == (10, 2)
    # Read again and again until the deadline (a loaded machine may stall one sleep).
    assert 0.5 <= time.monotonic() - start < 3.0 and len(calls) >= 3


def test_settled_waits_for_the_counters_to_stop_moving_not_only_for_the_count() -> None:
    """Triton counts a request before its execution lands in the other counters: a read at
    the target with the executions still moving is not the answer (1032 requests against
    4 x 1031 executions once)."""
    reads = iter([(1031, 1030), (1032, 1031), (1032, 1032), (1032, 1032)])
    assert settled(lambda: next(reads), lambda c: c[0], 1032, timeout_s=2.0) == (1032, 1032)
