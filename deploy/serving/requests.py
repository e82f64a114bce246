"""What goes over the wire to a Triton server and what comes back as statistics, for
the smoke checks and the Triton benchmark alike. Imports numpy only; the tritonclient
module (http or grpc) is passed in."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar, Union

import numpy as np

from deploy.domain.vocabulary import Protocol

if TYPE_CHECKING:
    import tritonclient.grpc
    import tritonclient.http

    from deploy.serving.repository import Model
    from deploy.spec.config import DeployConfig

# A connection to one server over either protocol: tritonclient's two client classes
# answer the calls made here alike (gRPC's metadata calls take as_json=True).
Client = Union["tritonclient.http.InferenceServerClient", "tritonclient.grpc.InferenceServerClient"]

T = TypeVar("T")
SETTLE_S = 5.0  # how long the statistics may lag the last response

# Triton's per-request duration statistics, in the order a request passes them.
PHASES = ("queue", "compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class Feed:
    name: str  # the server's input name (torchscript: <name>__<i>)
    array: np.ndarray
    datatype: str  # Triton's, e.g. FP32


def connect(url: str, protocol: Protocol, timeout_s: float) -> Client:
    """A client of the server at `url` (host:port of that protocol)."""
    if protocol == Protocol.HTTP:
        import tritonclient.http as httpclient

        return httpclient.InferenceServerClient(url, network_timeout=timeout_s, connection_timeout=timeout_s)
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(url)


def opt_feeds(config: DeployConfig, model: Model, batch: int) -> list[Feed]:
    """Random inputs at the spec's opt shape (batch `batch`), named as the served model
    names them (torchscript: <name>__<i>), in the layout its batching implies."""
    from deploy.runtimes.arrays import opt_inputs
    from deploy.runtimes.dtypes import triton_name
    from deploy.serving.layout import io_name, to_wire

    arrays = opt_inputs(config, batch)
    # A 0-d tensor per sample (Triton batching) or per call (none) travels with one more axis of 1.
    rank = 1 if model.batched else 0
    return [
        Feed(
            io_name(model.fmt, s.name, i), to_wire(arrays[s.name], len(s.dims) == rank), triton_name(s.dtype)
        )
        for i, s in enumerate(config.inputs)
    ]


def infer_inputs(client_module: ModuleType, feeds: list[Feed]) -> list[Any]:
    """InferInput objects of `client_module` (tritonclient.http or .grpc) holding the feeds."""
    from tritonclient.utils import triton_to_np_dtype

    items = []
    for feed in feeds:
        # The client's own numpy type for the datatype: bf16 data is float32 here, and since
        # r26.06 tritonclient wants ml_dtypes.bfloat16 for BF16 (before, float32).
        array = np.require(feed.array, dtype=triton_to_np_dtype(feed.datatype), requirements="C")
        item = client_module.InferInput(feed.name, list(array.shape), feed.datatype)
        item.set_data_from_numpy(array)
        items.append(item)
    return items


@dataclass(frozen=True)
class Statistics:
    """A model's cumulative counters (all versions) as the server reports them."""

    phases_ns: dict[str, int]
    requests: int  # successful requests
    inferences: int  # items (a batch of 8 counts 8)
    executions: int  # model executions (fewer than inferences when batched)
    cache_hits: int = 0  # requests the response cache answered (no execution)

    def as_totals(self) -> dict[str, int]:
        return {
            **{f"{p}_ns": n for p, n in self.phases_ns.items()},
            "requests": self.requests,
            "inferences": self.inferences,
            "executions": self.executions,
        }


def statistics(conn: Client, model: str) -> Statistics:
    phases, requests, inferences, executions, hits = dict.fromkeys(PHASES, 0), 0, 0, 0, 0
    for stats in conn.get_inference_statistics(model, as_json=True).get("model_stats", []):
        inference = stats.get("inference_stats", {})
        for phase in PHASES:
            phases[phase] += int(inference.get(phase, {}).get("ns", 0))
        requests += int(inference.get("success", {}).get("count", 0))
        hits += int(inference.get("cache_hit", {}).get("count", 0))
        inferences += int(stats.get("inference_count", 0))
        executions += int(stats.get("execution_count", 0))
    return Statistics(phases, requests, inferences, executions, hits)


def settled(
    read: Callable[[], T], count: Callable[[T], int], target: int, timeout_s: float, interval_s: float = 0.02
) -> T:
    """`read()` once `count` of it reaches `target` and a second read `interval_s` later
    is the same. Triton updates its statistics after it sends the responses, and its
    counters (requests, inferences, executions) one after another, so a read right after
    the last answer can miss some; the last read is returned when the deadline passes."""
    deadline = time.monotonic() + timeout_s
    value = read()
    while time.monotonic() < deadline:
        time.sleep(interval_s)
        again = read()
        if count(again) >= target and again == value:
            return again
        value = again
    return value
