"""End-to-end timing through a live tritonserver, measured the way perf_analyzer does.

For each concurrency N, N closed-loop gRPC clients (runtimes/streams.py): client
latency percentiles and throughput over the kept windows (windows are added until the last
K agree, perf_analyzer's stability rule), and from Triton's statistics API, read before
the first request and once the last one is counted and the counters stopped moving (never
with a request in flight), the server's share per request over the whole measurement:
queue, compute input / infer / output, and the average batch the dynamic batcher formed.
What remains of the client latency is the client + network overhead.

`rate_sweep` is the open-loop mode (perf_analyzer's --request-rate-range,
runtimes/pacing.py): asynchronous gRPC requests on a schedule, whatever the answers.

perf_analyzer itself ships only in Triton's SDK image (the `perf-analyzer` wheel on PyPI
is an empty placeholder), hence this loop on tritonclient. Imports tritonclient.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import tritonclient.grpc as grpcclient

from deploy.pipeline.errors import StageFailed
from deploy.runtimes import pacing, streams
from deploy.runtimes.catalog import SERVED
from deploy.runtimes.harness import Settings, Timing, summarize
from deploy.runtimes.record import BenchRow, ServerShare
from deploy.serving.requests import PHASES, SETTLE_S, Feed, infer_inputs, settled, statistics


def sweep(
    url: str,
    model: str,
    feeds: list[Feed],
    concurrency: tuple[int, ...],
    settings: Settings,
    saturation: float = 0.0,
) -> list[BenchRow]:
    """One row per concurrency level, runtime `triton` (the row names the model) on device
    `server`, in the order given, up to the first level at which the server is saturated."""
    batch = int(feeds[0].array.shape[0]) if feeds[0].array.ndim else 1
    _first_request(url, model, feeds)
    rows: list[BenchRow] = []
    for level in concurrency:
        timing, (before, after) = _window(url, model, feeds, level, settings)
        measured = summarize(timing, batch, settings)
        row = BenchRow.of(measured, SERVED, "server", level, model=model)
        rows.append(replace(row, server=_server_share(before, after, measured.mean_ms)))
        if saturated(rows, saturation):
            break
    return rows


def _first_request(url: str, model: str, feeds: list[Feed]) -> None:
    """The first request after a load pays the backend's lazy start (the python stub's first
    execute, its allocations): sent untimed, before any counter is read, so that a stall
    there weighs on neither the client's numbers nor the server's share."""
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(url)
    try:
        client.infer(model, infer_inputs(grpcclient, feeds))
    except InferenceServerException as exc:
        raise StageFailed(f"Triton benchmark of {model}: the first request failed: {exc}") from None
    finally:
        client.close()


def saturated(rows: list[BenchRow], saturation: float) -> bool:
    """The last level's throughput is not `saturation` (a fraction) above the best before it:
    more clients would only queue. Only rows a verdict may rest on decide it (stable, quiet);
    0: never saturated, every level is measured."""
    if saturation <= 0 or len(rows) < 2 or any(not r.stable or r.flagged for r in rows):
        return False
    return rows[-1].qps < (1 + saturation) * max(r.qps for r in rows[:-1])


def rate_sweep(
    url: str, model: str, feeds: list[Feed], pace: pacing.Pace, rates: tuple[float, ...], settings: Settings
) -> list[BenchRow]:
    """One row per offered rate (concurrency 0: open loop), with the late-send share."""
    batch = int(feeds[0].array.shape[0]) if feeds[0].array.ndim else 1
    rows = []
    for rate in rates:
        timing, (before, after), offered = _paced_window(
            url, model, feeds, replace(pace, rate=rate), settings
        )
        measured = summarize(timing, batch, settings)
        row = BenchRow.of(measured, SERVED, "server", 0, model=model)
        share = _server_share(before, after, measured.mean_ms)
        rows.append(replace(row, server=share, request_rate=rate, late_share=offered.late_share))
    return rows


def _paced_window(
    url: str, model: str, feeds: list[Feed], pace: pacing.Pace, settings: Settings
) -> tuple[Timing, tuple[dict[str, int], dict[str, int]], pacing.Offered]:
    client, stats = grpcclient.InferenceServerClient(url), grpcclient.InferenceServerClient(url)
    request = infer_inputs(grpcclient, feeds)
    try:
        before = statistics(stats, model).as_totals()  # nothing of this point in flight yet
        timing, _, offered = pacing.measure(
            lambda done: client.async_infer(model, request, callback=done), pace, settings
        )
        after = _counted(stats, model, timing, before)
    except StageFailed as exc:
        raise StageFailed(f"Triton benchmark of {model} at {pace.rate:g} requests/s: {exc}") from None
    finally:
        client.close()
        stats.close()
    return timing, (before, after), offered


def _window(
    url: str, model: str, feeds: list[Feed], level: int, settings: Settings
) -> tuple[Timing, tuple[dict[str, int], dict[str, int]]]:
    clients = [grpcclient.InferenceServerClient(url) for _ in range(level)]
    requests = [infer_inputs(grpcclient, feeds) for _ in range(level)]
    stats = grpcclient.InferenceServerClient(url)
    calls = [partial(conn.infer, model, request) for conn, request in zip(clients, requests)]
    try:
        before = statistics(stats, model).as_totals()  # nothing of this level in flight yet
        timing, _ = streams.measure(calls, settings)
        after = _counted(stats, model, timing, before)
    except StageFailed as exc:
        raise StageFailed(f"Triton benchmark of {model} at concurrency {level}: {exc}") from None
    finally:
        for conn in [*clients, stats]:
            conn.close()
    return timing, (before, after)


def _counted(stats: Any, model: str, timing: Timing, before: dict[str, int]) -> dict[str, int]:
    """The server's counters once every request of the measurement (warm-up included) is in
    them and they stopped moving: read with nothing in flight, so `inferences` is exactly
    `batch` times `requests` (a read while a request was between its count and its
    execution once gave 1032 requests against 4 x 1031 executions)."""
    served = timing.completed + before["requests"]
    return settled(lambda: statistics(stats, model).as_totals(), lambda t: t["requests"], served, SETTLE_S)


def _server_share(before: dict[str, int], after: dict[str, int], client_mean_ms: float) -> ServerShare:
    delta = {k: after[k] - before[k] for k in after}
    per_request = {p: delta[f"{p}_ns"] / max(delta["requests"], 1) / 1000 for p in PHASES}
    return ServerShare(
        **{f"{p}_us": us for p, us in per_request.items()},
        requests=delta["requests"],
        executions=delta["executions"],
        inferences=delta["inferences"],
        avg_server_batch=delta["inferences"] / delta["executions"] if delta["executions"] else 0.0,
        client_overhead_us=1000 * client_mean_ms - sum(per_request.values()),
    )
