"""Timing the way trtexec does: a time-based warm-up, then at least `duration` seconds
*and* at least `iterations` timed calls; latency percentiles, throughput, host wall time,
and a warning when the run is unstable (coefficient of variation above 10 %).

Stdlib only: the timed loop is two perf_counter_ns calls and a list append per call, which
`benchmarks/harness_overhead.py` compares with a bare loop.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

UNSTABLE_CV = 0.10


@dataclass(frozen=True)
class Settings:
    warmup_ms: float = 200.0
    duration_s: float = 3.0
    iterations: int = 10
    percentiles: tuple[float, ...] = (90.0, 95.0, 99.0)


@dataclass
class Timing:
    latencies_ms: list[float]
    starts_ms: list[float]  # host start of each call, from the first timed call
    wall_s: float
    warmup_calls: int
    notes: list[str] = field(default_factory=list)


def measure(call: Callable[[], Any], settings: Settings) -> Timing:
    warm_start, warmups = time.perf_counter_ns(), 0
    while warmups == 0 or (time.perf_counter_ns() - warm_start) / 1e6 < settings.warmup_ms:
        call()
        warmups += 1
    latencies: list[float] = []
    starts: list[float] = []
    origin = time.perf_counter_ns()
    deadline = origin + int(settings.duration_s * 1e9)
    while len(latencies) < settings.iterations or time.perf_counter_ns() < deadline:
        begin = time.perf_counter_ns()
        call()
        end = time.perf_counter_ns()
        latencies.append((end - begin) / 1e6)
        starts.append((begin - origin) / 1e6)
    return Timing(latencies, starts, (time.perf_counter_ns() - origin) / 1e9, warmups)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile, as trtexec reports it."""
    # p * n / 100, rounded first: 0.07 * 100 is 7.000000000000001 in floats, and its
    # ceiling would skip a rank.
    rank = max(1, math.ceil(round(p * len(sorted_values) / 100, 9)))
    return sorted_values[rank - 1]


def summarize(timing: Timing, batch: int, settings: Settings) -> dict[str, Any]:
    lat = sorted(timing.latencies_ms)
    mean = statistics.fmean(lat)
    cv = statistics.pstdev(lat) / mean if mean > 0 else 0.0
    qps = len(lat) / timing.wall_s
    summary: dict[str, Any] = {
        "batch": batch, "iterations": len(lat), "warmup_calls": timing.warmup_calls,
        "min_ms": lat[0], "max_ms": lat[-1], "mean_ms": mean, "median_ms": statistics.median(lat),
        "percentiles_ms": {f"p{p:g}": percentile(lat, p) for p in settings.percentiles},
        "qps": qps, "items_per_s": qps * batch, "wall_s": timing.wall_s, "cv": cv,
        "stable": cv <= UNSTABLE_CV,
    }
    return summary


def report_lines(name: str, s: dict[str, Any]) -> list[str]:
    """trtexec's performance summary, line for line where the concept is the same."""
    pcts = ", ".join(f"percentile({k[1:]}%) = {v:.4g} ms" for k, v in s["percentiles_ms"].items())
    lines = [
        f"[I] === Performance summary ({name}, batch {s['batch']}) ===",
        f"[I] Throughput: {s['qps']:.4g} qps ({s['items_per_s']:.4g} items/s)",
        f"[I] Latency: min = {s['min_ms']:.4g} ms, max = {s['max_ms']:.4g} ms, mean = {s['mean_ms']:.4g} ms, "
        f"median = {s['median_ms']:.4g} ms, {pcts}",
        f"[I] Total Host Walltime: {s['wall_s']:.4g} s ({s['iterations']} iterations after {s['warmup_calls']} warm-up calls)",
    ]
    lines += [f"[I] {GPU_PHASES[k]}: {_stats_text(v)}" for k, v in s.get("gpu", {}).items()]
    if "server" in s:
        server = s["server"]
        phases = ", ".join(f"{k.removesuffix('_us').replace('_', ' ')} {server[k]:.0f} us" for k in SERVER_PHASES)
        lines.append(f"[I] Server (per request): {phases}; client + network {server['client_overhead_us']:.0f} us; "
                     f"avg server batch {server['avg_server_batch']:.2f}")
    if not s["stable"]:
        lines.append(f"[W] * The coefficient of variation is {100 * s['cv']:.1f} % (> {100 * UNSTABLE_CV:.0f} %): results are unstable; "
                     "close other work or run longer (--duration).")
    return lines


GPU_PHASES = {"h2d_ms": "H2D Latency", "compute_ms": "GPU Compute Time", "d2h_ms": "D2H Latency"}
SERVER_PHASES = ("queue_us", "compute_input_us", "compute_infer_us", "compute_output_us")


def phase_summary(phases: Sequence[tuple[float, float, float]], settings: Settings) -> dict[str, dict[str, float]]:
    """trtexec's H2D / GPU compute / D2H split, from per-call CUDA event times (ms)."""
    return {name: _stats([p[i] for p in phases], settings) for i, name in enumerate(GPU_PHASES)}


def _stats(values: Sequence[float], settings: Settings) -> dict[str, float]:
    ordered = sorted(values)
    found = {"min": ordered[0], "max": ordered[-1], "mean": statistics.fmean(ordered), "median": statistics.median(ordered)}
    return found | {f"p{p:g}": percentile(ordered, p) for p in settings.percentiles}


def _stats_text(stats: dict[str, float]) -> str:
    return ", ".join(f"{'percentile(' + k[1:] + '%)' if k.startswith('p') else k} = {v:.4g} ms" for k, v in stats.items())


def export_times(path: Path, timing: Timing) -> None:
    """Per-call host times, like trtexec's --exportTimes."""
    rows = [{"startMs": s, "latencyMs": lat} for s, lat in zip(timing.starts_ms, timing.latencies_ms)]
    path.write_text(json.dumps(rows, indent=1))
