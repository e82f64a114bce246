"""The harness's own rules beyond the sleeping call of tests/runtimes/test_harness.py:
settings that cannot work are refused, perf_analyzer's stability rule on given windows,
the summary's statistics on known samples, and the window bookkeeping of a real measure()."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest

from deploy.runtimes import harness
from deploy.runtimes.harness import Settings, Timing, Window


@pytest.mark.parametrize(
    "bad",
    [
        {"stability_windows": 0},
        {"stability_windows": 4, "max_windows": 3},
        {"stability_threshold": 0.0},
        {"stability_threshold": 1.0},
    ],
)
def test_settings_that_cannot_work_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError, match="need stability_windows >= 1"):
        Settings(**bad)


def test_each_window_is_a_kth_of_duration_and_iterations() -> None:
    settings = Settings(duration_s=3.0, iterations=10, stability_windows=3)
    assert settings.window_ns() == 1_000_000_000 and settings.window_calls() == 4  # ceil(10 / 3)
    assert Settings(duration_s=0.5, iterations=1, stability_windows=1).window_calls() == 1


def w(qps: float, median_ms: float) -> Window:
    return Window(calls=int(qps), wall_s=1.0, median_ms=median_ms)


K3 = Settings(stability_windows=3, stability_threshold=0.10, max_windows=6)


@pytest.mark.parametrize(
    ("windows", "stable"),
    [
        ([w(100, 5.0), w(104, 5.2), w(97, 4.9)], True),
        ([w(100, 5.0), w(100, 5.0)], False),  # fewer than K windows
        ([w(100, 5.0), w(100, 5.0), w(130, 5.0)], False),  # throughput off by more than 10 %
        ([w(100, 5.0), w(100, 5.0), w(100, 6.5)], False),  # median latency off
        ([w(10, 50.0), w(300, 1.0), w(100, 5.0), w(101, 5.1), w(99, 5.0)], True),  # only the last K count
        ([w(100, 5.0), w(100, 5.0), Window(0, 1.0, 0.0)], False),  # a window without calls
    ],
)
def test_the_last_k_windows_must_agree(windows: list[Window], stable: bool) -> None:
    assert harness.is_stable(windows, K3) is stable
    assert harness.finished(windows, K3) is stable


def test_at_max_windows_the_measurement_is_finished_though_unstable() -> None:
    noisy = [w(100, 5.0), w(200, 2.0)] * 3
    assert not harness.is_stable(noisy, K3)
    assert not harness.finished(noisy[:5], K3) and harness.finished(noisy, K3)


def test_a_window_reports_its_calls_rate_and_median() -> None:
    window = harness.window_of([3.0, 1.0, 2.0, 10.0], 500_000_000)
    assert (window.calls, window.wall_s, window.median_ms, window.qps) == (4, 0.5, 2.5, 8.0)
    empty = harness.window_of([], 0)
    assert (empty.calls, empty.median_ms, empty.qps) == (0, 0.0, 0.0)


def test_the_summary_of_known_samples() -> None:
    latencies = [4.0, 1.0, 3.0, 2.0, 10.0]
    windows = [Window(2, 0.5, 2.0), Window(2, 0.5, 2.1), Window(1, 0.5, 10.0)]
    timing = Timing(latencies, [0.0, 1.0, 2.0, 3.0, 4.0], 2.0, warmup_calls=7, windows=windows)
    settings = Settings(percentiles=(50.0, 90.0))
    s = harness.summarize(timing, batch=8, settings=settings)
    assert (s.min_ms, s.max_ms, s.mean_ms, s.median_ms) == (1.0, 10.0, 4.0, 3.0)
    assert s.percentiles_ms == {"p50": 3.0, "p90": 10.0}
    assert s.percentiles_supported == {"p50": True, "p90": False}  # p90 needs 10 samples
    assert (s.qps, s.items_per_s, s.wall_s, s.iterations, s.warmup_calls) == (2.5, 20.0, 2.0, 5, 7)
    assert s.cv == pytest.approx(statistics.pstdev(latencies) / 4.0)
    assert not s.stable and s.windows_used == 3 and s.measured_s == pytest.approx(1.5)
    assert [(x.n, x.qps, x.median_ms) for x in s.windows] == [(2, 4.0, 2.0), (2, 4.0, 2.1), (1, 2.0, 10.0)]
    lines = harness.report_lines("m", s, settings)
    assert "percentile(90%) = n/a (needs >= 10 samples, have 5)" in lines[2]
    assert lines[-1].startswith("[W] * The last 3 of 3 windows differ")


def test_a_stable_summary_says_so() -> None:
    windows = [Window(10, 1.0, 2.0)] * 3
    timing = Timing([2.0] * 30, [float(i) for i in range(30)], 3.0, 1, windows=windows)
    settings = Settings(percentiles=(95.0,))
    lines = harness.report_lines("m", harness.summarize(timing, 1, settings), settings)
    assert lines[-1] == "[I] Stable: the last 3 windows agree within ±10 % (throughput and median latency)"


def test_stable_windows_on_a_contended_machine_are_not_called_stable() -> None:
    """Each window shares the cores alike, so they agree: the line after CONTENDED said
    `[I] Stable`, which reads as a number to trust."""
    from deploy.runtimes.contention import Environment

    windows = [Window(10, 1.0, 2.0)] * 3
    timing = Timing([2.0] * 30, [float(i) for i in range(30)], 3.0, 1, windows=windows)
    timing.environment = Environment(2, 1, 0.1, 7.0, 0.6, 0.0, contended=True)
    settings = Settings(percentiles=(95.0,))
    lines = harness.report_lines("m", harness.summarize(timing, 1, settings), settings)
    assert lines[-3].startswith("[W] * CONTENDED") and "no verdict should rest on it" in lines[-3]
    assert lines[-1] == "[W] * Stable only as windows: the last 3 agree within ±10 %, all of them contended"


def test_measure_keeps_the_last_k_windows_and_counts_every_call() -> None:
    calls: list[float] = []

    def sleep_1ms() -> None:
        calls.append(time.perf_counter())
        time.sleep(0.001)

    settings = Settings(warmup_ms=0, duration_s=0.03, iterations=9, stability_windows=3, max_windows=5)
    timing = harness.measure(sleep_1ms, settings)
    assert timing.warmup_calls == 1  # warmup_ms 0: one untimed call all the same
    assert 3 <= len(timing.windows) <= 5
    assert all(window.calls >= settings.window_calls() for window in timing.windows)
    assert all(window.wall_s >= settings.window_ns() / 1e9 for window in timing.windows)
    kept = timing.windows[-3:]
    assert len(timing.latencies_ms) == sum(window.calls for window in kept)
    assert len(calls) == timing.warmup_calls + sum(window.calls for window in timing.windows)
    # One stream: calls follow each other within the kept windows' span.
    assert timing.starts_ms[0] >= 0 and timing.starts_ms == sorted(timing.starts_ms)
    assert sum(timing.latencies_ms) <= 1000 * timing.wall_s
    assert min(timing.latencies_ms) >= 1.0


def test_export_times_writes_each_kept_call(tmp_path: Path) -> None:
    timing = Timing([1.5, 2.5], [0.0, 1.5], 0.004, 1)
    harness.export_times(tmp_path / "times.json", timing)
    assert json.loads((tmp_path / "times.json").read_text()) == [
        {"startMs": 0.0, "latencyMs": 1.5},
        {"startMs": 1.5, "latencyMs": 2.5},
    ]


def test_gpu_phases_are_summarized_per_phase() -> None:
    phases = [(0.1, 2.0, 0.3), (0.3, 4.0, 0.1), (0.2, 3.0, 0.2)]
    found = harness.phase_summary(phases, Settings(percentiles=(50.0,)))
    assert list(found) == ["h2d_ms", "compute_ms", "d2h_ms"]
    assert found["compute_ms"] == {"min": 2.0, "max": 4.0, "mean": 3.0, "median": 3.0, "p50": 3.0}
    assert found["h2d_ms"]["max"] == 0.3 and found["d2h_ms"]["min"] == 0.1
