"""End-to-end timing through a live tritonserver, measured the way perf_analyzer does.

For each concurrency N, N closed-loop gRPC clients (stages/_bench_streams.py): client
latency percentiles and throughput over the kept windows (windows are added until the last
K agree, perf_analyzer's stability rule), and from Triton's statistics API, read at the
kept windows' edges, the server's share per request: queue,
compute input / infer / output, and the average batch the dynamic batcher formed. What
remains of the client latency is the client + network overhead.

perf_analyzer itself ships only in Triton's SDK image (the `perf-analyzer` wheel on PyPI
is an empty placeholder), hence this loop on tritonclient. Imports tritonclient.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from pipeline.errors import StageFailed
from stages.bench import streams
from stages.bench.harness import Settings, Timing, summarize

# Triton's per-request duration statistics, in the order a request passes them.
PHASES = ("queue", "compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class Feed:
    name: str  # the server's input name
    array: np.ndarray
    datatype: str  # Triton's, e.g. FP32


def _request(feeds: list[Feed]) -> list[Any]:
    items = []
    for feed in feeds:
        item = grpcclient.InferInput(feed.name, list(feed.array.shape), feed.datatype)
        item.set_data_from_numpy(np.ascontiguousarray(feed.array))
        items.append(item)
    return items


def sweep(
    url: str, model: str, feeds: list[Feed], concurrency: tuple[int, ...], settings: Settings
) -> list[dict[str, Any]]:
    batch = int(feeds[0].array.shape[0]) if feeds[0].array.ndim else 1
    rows = []
    for level in concurrency:
        timing, server = _window(url, model, feeds, level, settings)
        row = {"concurrency": level, **summarize(timing, batch, settings), "server": server}
        row["server"]["client_overhead_us"] = 1000 * row["mean_ms"] - sum(server[f"{p}_us"] for p in PHASES)
        rows.append(row)
    return rows


def _window(
    url: str, model: str, feeds: list[Feed], level: int, settings: Settings
) -> tuple[Timing, dict[str, Any]]:
    clients = [grpcclient.InferenceServerClient(url) for _ in range(level)]
    requests = [_request(feeds) for _ in range(level)]
    stats = grpcclient.InferenceServerClient(url)
    calls = [partial(conn.infer, model, request) for conn, request in zip(clients, requests)]
    try:
        timing, (before, after) = streams.measure(calls, settings, lambda: _statistics(stats, model))
    except StageFailed as exc:
        raise StageFailed(f"Triton benchmark of {model} at concurrency {level}: {exc}") from None
    finally:
        for conn in [*clients, stats]:
            conn.close()
    return timing, _server_share(before, after)


def _statistics(conn: Any, model: str) -> dict[str, int]:
    """Cumulative counters of the model (all versions): ns per phase, requests,
    inferences and executions."""
    totals = dict.fromkeys([*(f"{p}_ns" for p in PHASES), "requests", "inferences", "executions"], 0)
    for stats in conn.get_inference_statistics(model, as_json=True).get("model_stats", []):
        inference = stats.get("inference_stats", {})
        for phase in PHASES:
            totals[f"{phase}_ns"] += int(inference.get(phase, {}).get("ns", 0))
        totals["requests"] += int(inference.get("success", {}).get("count", 0))
        totals["inferences"] += int(stats.get("inference_count", 0))
        totals["executions"] += int(stats.get("execution_count", 0))
    return totals


def _server_share(before: dict[str, int], after: dict[str, int]) -> dict[str, Any]:
    delta = {k: after[k] - before[k] for k in after}
    requests = max(delta["requests"], 1)
    share: dict[str, Any] = {f"{p}_us": delta[f"{p}_ns"] / requests / 1000 for p in PHASES}
    share.update(requests=delta["requests"], executions=delta["executions"], inferences=delta["inferences"])
    share["avg_server_batch"] = delta["inferences"] / delta["executions"] if delta["executions"] else 0.0
    return share
