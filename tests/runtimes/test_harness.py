"""The timing harness on a call of known duration: percentiles by nearest rank, the
samples a percentile needs, and windows until stable."""

from __future__ import annotations

import time

import pytest

from deploy.runtimes import harness


def test_nearest_rank_percentiles_and_required_samples() -> None:
    values = [float(v) for v in range(1, 101)]
    assert harness.percentile(values, 50) == 50.0 and harness.percentile(values, 99) == 99.0
    assert harness.percentile(values, 7) == 7.0  # 0.07 * 100 must not skip a rank
    assert [harness.required_samples(p) for p in (90, 95, 99, 100)] == [10, 20, 100, 1]
    assert harness.supported(99, 100) and not harness.supported(99, 99)


def test_a_sleeping_call_measures_its_sleep() -> None:
    settings = harness.Settings(warmup_ms=20, duration_s=0.2, iterations=10, percentiles=(50.0, 99.0))
    timing = harness.measure(lambda: time.sleep(0.01), settings)
    summary = harness.summarize(timing, 4, settings)
    assert 10.0 <= summary.median_ms < 30.0  # a loaded machine wakes a sleeper late
    assert summary.items_per_s == pytest.approx(4 * summary.qps)
    # the samples are the kept windows' (the last K; a loaded machine may need more windows)
    assert summary.iterations == sum(w.n for w in summary.windows[-settings.stability_windows :])
    assert summary.supported("p50") and summary.supported("p99") == (summary.iterations >= 100)
    assert summary.windows_used >= settings.stability_windows
