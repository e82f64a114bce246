"""End-to-end timing through a live tritonserver, measured the way perf_analyzer does.

For each concurrency N, N closed-loop gRPC clients each send their next request as soon
as the previous one is answered. After a time-based warm-up, a window of at least
`duration` seconds and at least `iterations` requests is measured: the client latency of
every request that started and finished inside it, throughput as those requests over the
window, and from Triton's statistics API (read at the window's edges) the server's share
per request: queue, compute input / infer / output, and the average batch the dynamic
batcher formed. What remains of the client latency is the client + network overhead.

perf_analyzer itself ships only in Triton's SDK image (the `perf-analyzer` wheel on PyPI
is an empty placeholder), hence this loop on tritonclient. Imports tritonclient.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from pipeline.errors import StageFailed
from stages._bench import Settings, Timing, summarize

# Triton's per-request duration statistics, in the order a request passes them.
PHASES = ("queue", "compute_input", "compute_infer", "compute_output")
POLL_S = 0.01


@dataclass(frozen=True)
class Feed:
    name: str  # the server's input name
    array: np.ndarray
    datatype: str  # Triton's, e.g. FP32


@dataclass
class _Clients:
    """The closed-loop clients of one concurrency level and what they recorded."""

    url: str
    model: str
    feeds: list[Feed]
    stop: threading.Event = field(default_factory=threading.Event)
    records: list[list[tuple[int, int]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def worker(self, index: int) -> None:
        conn = grpcclient.InferenceServerClient(self.url)
        request = _request(self.feeds)
        mine = self.records[index]
        try:
            while not self.stop.is_set():
                begin = time.perf_counter_ns()
                conn.infer(self.model, request)
                mine.append((begin, time.perf_counter_ns()))
        except InferenceServerException as exc:
            self.errors.append(str(exc.message()))
            self.stop.set()
        finally:
            conn.close()

    def started_since(self, origin: int) -> int:
        return sum(1 for rows in self.records for begin, _ in rows if begin >= origin)


def _request(feeds: list[Feed]) -> list[Any]:
    items = []
    for feed in feeds:
        item = grpcclient.InferInput(feed.name, list(feed.array.shape), feed.datatype)
        item.set_data_from_numpy(np.ascontiguousarray(feed.array))
        items.append(item)
    return items


def sweep(url: str, model: str, feeds: list[Feed], concurrency: tuple[int, ...], settings: Settings) -> list[dict[str, Any]]:
    batch = int(feeds[0].array.shape[0]) if feeds[0].array.ndim else 1
    rows = []
    for level in concurrency:
        timing, server = _window(url, model, feeds, level, settings)
        row = {"concurrency": level, **summarize(timing, batch, settings), "server": server}
        row["server"]["client_overhead_us"] = 1000 * row["mean_ms"] - sum(server[f"{p}_us"] for p in PHASES)
        rows.append(row)
    return rows


def _window(url: str, model: str, feeds: list[Feed], level: int, settings: Settings) -> tuple[Timing, dict[str, Any]]:
    clients = _Clients(url, model, feeds, records=[[] for _ in range(level)])
    threads = [threading.Thread(target=clients.worker, args=(i,), daemon=True) for i in range(level)]
    stats = grpcclient.InferenceServerClient(url)
    try:
        for thread in threads:
            thread.start()
        _sleep_while(clients, settings.warmup_ms / 1000)
        before, origin = _statistics(stats, model), time.perf_counter_ns()
        _wait_window(clients, origin, settings)
        end, after = time.perf_counter_ns(), _statistics(stats, model)
    finally:
        clients.stop.set()
        for thread in threads:
            thread.join()
        stats.close()
    if clients.errors:
        raise StageFailed(f"Triton benchmark of {model} at concurrency {level}: {clients.errors[0]}")
    return _timing(clients, origin, end), _server_share(before, after)


def _sleep_while(clients: _Clients, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not clients.stop.is_set():
        time.sleep(POLL_S)


def _wait_window(clients: _Clients, origin: int, settings: Settings) -> None:
    """At least `duration` and at least `iterations` requests started in the window
    (and, for the last of those to finish, a little more)."""
    deadline = origin + int(settings.duration_s * 1e9)
    while not clients.stop.is_set():
        if time.perf_counter_ns() >= deadline and clients.started_since(origin) > settings.iterations + len(clients.records):
            return
        time.sleep(POLL_S)


def _timing(clients: _Clients, origin: int, end: int) -> Timing:
    inside = sorted((b, e) for rows in clients.records for b, e in rows if b >= origin and e <= end)
    warmups = sum(1 for rows in clients.records for b, _ in rows if b < origin)
    latencies = [(e - b) / 1e6 for b, e in inside]
    starts = [(b - origin) / 1e6 for b, _ in inside]
    return Timing(latencies, starts, (end - origin) / 1e9, warmups)


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
