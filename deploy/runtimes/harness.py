"""Timing the way trtexec does, with perf_analyzer's stability rule: a time-based warm-up,
then a sequence of measurement windows, each of at least `duration / K` seconds *and* at
least `iterations / K` timed calls (K: `stability_windows`). The measurement stops once the
last K windows agree: each window's throughput and median latency within ±`stability_threshold`
of those K windows' mean; otherwise windows are added up to `max_windows`. Statistics come
from the samples of the last K windows, so a run that is stable at once takes about
`duration` seconds and `iterations` calls, as before.

A percentile p is reported as supported only when n >= ceil(1 / (1 - p/100)) samples back
it (p99 needs 100): with fewer, the nearest-rank p99 is simply the maximum.

Stdlib only: the timed loop is two perf_counter_ns calls and a list append per call, which
`benchmarks/harness_overhead.py` compares with a bare loop.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.runtimes.contention import Environment, Fit, usage
from deploy.runtimes.record import BenchRow, Measured, WindowSummary


@dataclass(frozen=True)
class Settings:
    warmup_ms: float = 200.0
    duration_s: float = 3.0
    iterations: int = 10
    percentiles: tuple[float, ...] = (90.0, 95.0, 99.0)
    # perf_analyzer's defaults: 3 windows, --stability-percentage 10, --max-trials 10.
    stability_windows: int = 3
    stability_threshold: float = 0.10
    max_windows: int = 10

    def __post_init__(self) -> None:
        if (
            self.stability_windows < 1
            or self.max_windows < self.stability_windows
            or not 0 < self.stability_threshold < 1
        ):
            raise ValueError(
                f"need stability_windows >= 1, max_windows >= stability_windows and 0 < stability_threshold < 1: {self}"
            )

    def window_ns(self) -> int:
        return int(self.duration_s * 1e9 / self.stability_windows)

    def window_calls(self) -> int:
        return math.ceil(self.iterations / self.stability_windows)


@dataclass(frozen=True)
class Window:
    """One measurement window: its completed calls, length and median latency."""

    calls: int
    wall_s: float
    median_ms: float

    @property
    def qps(self) -> float:
        return self.calls / self.wall_s if self.wall_s > 0 else 0.0


@dataclass
class Timing:
    """The samples of the kept (last K) windows; `windows` lists every window measured."""

    latencies_ms: list[float]
    starts_ms: list[float]  # host start of each call, from the first kept window's start
    wall_s: float  # from the first kept window's start to the last one's end
    warmup_calls: int
    notes: list[str] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    completed: int = 0  # every call that completed, warm-up and dropped windows included
    environment: Environment | None = None  # the machine during the kept windows


@dataclass
class _Raw:
    """A single-stream window as measured: call starts and ends (ns), its edges."""

    begin_ns: int
    # 8 bytes a call, where a list of ints took about 36 and allocated as it grew mid-loop
    starts: array[int] = field(default_factory=lambda: array("q"))
    ends: array[int] = field(default_factory=lambda: array("q"))
    end_ns: int = 0

    def latencies_ms(self) -> list[float]:
        return [(e - b) / 1e6 for b, e in zip(self.starts, self.ends)]


def measure(call: Callable[[], Any], settings: Settings, fit: Fit | None = None) -> Timing:
    """`fit`: the threads the runtime was given and the cores free then (recorded with the
    machine's usage over the kept windows: runtimes/contention.py)."""
    warmups = _warm_up(call, settings.warmup_ms)
    raws: list[_Raw] = []  # only the windows the statistics may come from
    windows: list[Window] = []
    marks = []  # the machine's usage at each window's start
    completed = warmups
    while not finished(windows, settings):
        marks.append(usage())
        raws = [*raws[max(0, len(raws) - settings.stability_windows + 1) :], _window(call, settings)]
        windows.append(window_of(raws[-1].latencies_ms(), raws[-1].end_ns - raws[-1].begin_ns))
        completed += len(raws[-1].ends)
    timing = _timing(raws[-settings.stability_windows :], warmups, windows)
    timing.completed = completed
    timing.environment = (fit or Fit()).environment(marks[-settings.stability_windows], usage())
    return timing


def _warm_up(call: Callable[[], Any], warmup_ms: float) -> int:
    warm_start, warmups = time.perf_counter_ns(), 0
    while warmups == 0 or (time.perf_counter_ns() - warm_start) / 1e6 < warmup_ms:
        call()
        warmups += 1
    return warmups


def _window(call: Callable[[], Any], settings: Settings) -> _Raw:
    """At least duration/K seconds and iterations/K calls; the hot loop as trtexec's."""
    raw = _Raw(time.perf_counter_ns())
    starts, ends, calls = raw.starts, raw.ends, settings.window_calls()
    deadline = raw.begin_ns + settings.window_ns()
    while len(ends) < calls or time.perf_counter_ns() < deadline:
        starts.append(time.perf_counter_ns())
        call()
        ends.append(time.perf_counter_ns())
    raw.end_ns = time.perf_counter_ns()
    return raw


def _timing(kept: list[_Raw], warmups: int, windows: list[Window]) -> Timing:
    origin = kept[0].begin_ns
    starts = [b for raw in kept for b in raw.starts]
    latencies = [lat for raw in kept for lat in raw.latencies_ms()]
    return Timing(
        latencies,
        [(b - origin) / 1e6 for b in starts],
        (kept[-1].end_ns - origin) / 1e9,
        warmups,
        windows=windows,
    )


# -- the stability rule (perf_analyzer's) -----------------------------------------------------
def window_of(latencies_ms: Sequence[float], wall_ns: int) -> Window:
    return Window(len(latencies_ms), wall_ns / 1e9, statistics.median(latencies_ms) if latencies_ms else 0.0)


def is_stable(windows: Sequence[Window], settings: Settings) -> bool:
    """The last K windows' throughput and median latency each within ±threshold of their mean."""
    last = windows[-settings.stability_windows :]
    if len(last) < settings.stability_windows or any(w.calls == 0 for w in last):
        return False
    return _agree([w.qps for w in last], settings.stability_threshold) and _agree(
        [w.median_ms for w in last], settings.stability_threshold
    )


def _agree(values: Sequence[float], threshold: float) -> bool:
    mean = statistics.fmean(values)
    return all(abs(v - mean) <= threshold * mean for v in values)


def finished(windows: Sequence[Window], settings: Settings) -> bool:
    return len(windows) >= settings.max_windows or is_stable(windows, settings)


# -- statistics ---------------------------------------------------------------------------------
def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile, as trtexec reports it."""
    # p * n / 100, rounded first: 0.07 * 100 is 7.000000000000001 in floats, and its
    # ceiling would skip a rank.
    rank = max(1, math.ceil(round(p * len(sorted_values) / 100, 9)))
    return sorted_values[rank - 1]


def required_samples(p: float) -> int:
    """Samples a percentile needs before it differs from the maximum: ceil(1 / (1 - p/100))
    (p90: 10, p95: 20, p99: 100). p100 is the sample maximum itself, defined for any n."""
    if p >= 100:
        return 1
    return math.ceil(round(100 / (100 - p), 6))  # rounded: 100 / (100 - 99.9) is 1000.0000000000568


def supported(p: float, n: int) -> bool:
    return n >= required_samples(p)


def summarize(timing: Timing, batch: int, settings: Settings) -> Measured:
    lat = sorted(timing.latencies_ms)
    mean = statistics.fmean(lat)
    qps = len(lat) / timing.wall_s
    return Measured(
        batch=batch,
        iterations=len(lat),
        warmup_calls=timing.warmup_calls,
        min_ms=lat[0],
        max_ms=lat[-1],
        mean_ms=mean,
        median_ms=statistics.median(lat),
        percentiles_ms={f"p{p:g}": percentile(lat, p) for p in settings.percentiles},
        percentiles_supported={f"p{p:g}": supported(p, len(lat)) for p in settings.percentiles},
        qps=qps,
        items_per_s=qps * batch,
        wall_s=timing.wall_s,
        cv=statistics.pstdev(lat) / mean if mean > 0 else 0.0,
        stable=is_stable(timing.windows, settings),
        windows_used=len(timing.windows),
        measured_s=sum(w.wall_s for w in timing.windows),
        windows=[WindowSummary(w.calls, w.qps, w.median_ms) for w in timing.windows],
        environment=timing.environment,
    )


# -- trtexec's text summary ---------------------------------------------------------------------
def report_lines(name: str, s: Measured, settings: Settings) -> list[str]:
    """trtexec's performance summary, line for line where the concept is the same."""
    lines = [
        f"[I] === Performance summary ({name}, batch {s.batch}) ===",
        f"[I] Throughput: {s.qps:.4g} qps ({s.items_per_s:.4g} items/s)",
        f"[I] Latency: min = {s.min_ms:.4g} ms, max = {s.max_ms:.4g} ms, mean = {s.mean_ms:.4g} ms, "
        f"median = {s.median_ms:.4g} ms, {_percentiles_text(s)}",
        f"[I] Total Host Walltime: {s.wall_s:.4g} s (n = {s.iterations} iterations after {s.warmup_calls} warm-up calls)",
    ]
    if isinstance(s, BenchRow):
        lines += _row_lines(s)
    return lines + _machine_lines(s) + _stability_lines(s, settings)


def _machine_lines(s: Measured) -> list[str]:
    """The machine while the kept windows ran, and the threads the runtime had."""
    env = s.environment
    if env is None:
        return ["[I] Machine: not measured (no /proc)"]
    threads = (
        f"; {env.threads} intra-op threads, {env.cores_free:g} cores free at the start" if env.threads else ""
    )
    if not env.contended:
        return [f"[I] Machine: {env.text()}{threads}"]
    return [
        f"[W] * {env.text()}{threads}: other processes' work was timed with this one; "
        "no verdict should rest on it (rerun on a quiet machine)"
    ]


def _row_lines(row: BenchRow) -> list[str]:
    """What a runtime adds: the GPU phases, Triton's server-side share."""
    lines = [f"[I] {GPU_PHASES[k]}: {_stats_text(v, row)}" for k, v in (row.gpu or {}).items()]
    if row.server is not None:
        server = row.server
        phases = ", ".join(
            f"{k.removesuffix('_us').replace('_', ' ')} {getattr(server, k):.0f} us" for k in SERVER_PHASES
        )
        lines.append(
            f"[I] Server (per request): {phases}; client + network {_overhead(server.client_overhead_us)}; "
            f"avg server batch {server.avg_server_batch:.2f}"
        )
    return lines


def _overhead(us: float) -> str:
    """Client less server time; below zero it is the counters' window edges, not a time."""
    return f"{us:.0f} us" if us >= 0 else "below resolution"


def _percentiles_text(s: Measured) -> str:
    return ", ".join(
        _percentile_text(k, v, s) + (" ms" if s.supported(k) else "") for k, v in s.percentiles_ms.items()
    )


def _percentile_text(key: str, value: float, s: Measured) -> str:
    label = f"percentile({key[1:]}%)"
    if s.supported(key):
        return f"{label} = {value:.4g}"
    return f"{label} = n/a (needs >= {required_samples(float(key[1:]))} samples, have {s.iterations})"


def _stability_lines(s: Measured, settings: Settings) -> list[str]:
    k, used, pct = settings.stability_windows, s.windows_used, 100 * settings.stability_threshold
    per_window = ", ".join(f"{w.qps:.4g}/{w.median_ms:.4g}" for w in s.windows)
    lines = [
        f"[I] Windows: {used} in {s.measured_s:.4g} s (qps/median ms: {per_window}); statistics from the last {k}"
    ]
    if s.stable and s.contended:
        return lines + [  # windows that agree on another process's share: consistent, not right
            f"[W] * Stable only as windows: the last {k} agree within ±{pct:g} %, all of them contended"
        ]
    if s.stable:
        return lines + [
            f"[I] Stable: the last {k} windows agree within ±{pct:g} % (throughput and median latency)"
        ]
    return lines + [
        f"[W] * The last {k} of {used} windows differ by more than ±{pct:g} % (max {settings.max_windows} windows; "
        f"coefficient of variation {100 * s.cv:.1f} %): results are unstable; close other work or run longer (--duration)."
    ]


GPU_PHASES = {"h2d_ms": "H2D Latency", "compute_ms": "GPU Compute Time", "d2h_ms": "D2H Latency"}
SERVER_PHASES = ("queue_us", "compute_input_us", "compute_infer_us", "compute_output_us")


def phase_summary(
    phases: Sequence[tuple[float, float, float]], settings: Settings
) -> dict[str, dict[str, float]]:
    """trtexec's H2D / GPU compute / D2H split, from per-call CUDA event times (ms)."""
    return {name: _stats([p[i] for p in phases], settings) for i, name in enumerate(GPU_PHASES)}


def _stats(values: Sequence[float], settings: Settings) -> dict[str, float]:
    ordered = sorted(values)
    found = {
        "min": ordered[0],
        "max": ordered[-1],
        "mean": statistics.fmean(ordered),
        "median": statistics.median(ordered),
    }
    return found | {f"p{p:g}": percentile(ordered, p) for p in settings.percentiles}


def _stats_text(stats: dict[str, float], s: Measured) -> str:
    """GPU phases have one sample per timed call: their percentiles share the row's support."""
    return ", ".join(
        _percentile_text(k, v, s) + (" ms" if s.supported(k) else "")
        if k.startswith("p")
        else f"{k} = {v:.4g} ms"
        for k, v in stats.items()
    )


def export_times(path: Path, timing: Timing) -> None:
    """Per-call host times of the kept windows, like trtexec's --exportTimes."""
    rows = [{"startMs": s, "latencyMs": lat} for s, lat in zip(timing.starts_ms, timing.latencies_ms)]
    path.write_text(json.dumps(rows, indent=1))
