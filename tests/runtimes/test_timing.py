"""A Timed is what the harness measures: a fixed call plus, on GPU runtimes only, the
per-call phases; frozen, so a measurement cannot swap the call under it."""

from __future__ import annotations

import dataclasses
import time

import pytest

from deploy.runtimes import harness
from deploy.runtimes.timing import Timed


def test_a_timed_call_is_frozen_and_has_no_phases_by_default() -> None:
    timed = Timed(lambda: None)
    assert timed.phases is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        timed.call = lambda: 1  # type: ignore[misc]


def test_the_harness_times_the_call_of_a_timed() -> None:
    calls: list[int] = []

    def call() -> None:
        calls.append(1)
        time.sleep(0.002)

    timed = Timed(call)
    settings = harness.Settings(warmup_ms=0, duration_s=0.03, iterations=6, max_windows=3)
    timing = harness.measure(timed.call, settings)
    assert len(calls) == timing.warmup_calls + sum(w.calls for w in timing.windows)
    assert min(timing.latencies_ms) >= 2.0
