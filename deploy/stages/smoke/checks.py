"""What the smoke stage checks on each model a live server loaded: its metadata against
the shape spec, golden inputs over HTTP and gRPC against the eager reference, and the
production settings the server must be seen to honour. Imports tritonclient."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from deploy.domain import vocabulary
from deploy.runtimes.arrays import varying_axes
from deploy.runtimes.dtypes import triton_name
from deploy.serving.layout import from_wire, io_name, to_wire
from deploy.serving.requests import Client, Feed, connect, infer_inputs
from deploy.serving.tritonserver import Server
from deploy.spec.config import DeployConfig

PROTOCOLS = {"http": httpclient, "grpc": grpcclient}


class Example(Protocol):
    """Inputs and the outputs expected for them, at one shape (the golden data)."""

    @property
    def inputs(self) -> Mapping[str, np.ndarray]: ...

    @property
    def outputs(self) -> Mapping[str, np.ndarray]: ...


@dataclass(frozen=True)
class Tensor:
    name: str  # the name the server uses (torchscript: <name>__<i>)
    spec_name: str  # the name in the shape spec / golden data
    datatype: str
    shape: list[int]  # as the server's metadata gives it (a per-sample scalar: [.., 1])
    scalar: bool = False  # 0-d per sample: travels with one more axis of 1 (layout.wire_dims)


def client(server: Server, protocol: str, timeout_s: float) -> Client:
    http = protocol == vocabulary.Protocol.HTTP
    return connect(server.http if http else server.grpc, vocabulary.Protocol(protocol), timeout_s)


# -- expectations from the shape spec -----------------------------------------------------------
def expected(
    config: DeployConfig, fmt: str, golden: Mapping[str, Example], batched: bool
) -> tuple[list[Tensor], list[Tensor]]:
    """The tensors the served model should declare. `batched`: Triton batches it (its
    max_batch_size > 0), which is not implied by the spec's batch dim: a model whose output
    depends on its batch is served with max_batch_size 0, its tensors whole."""
    inputs = [
        _tensor(
            io_name(fmt, s.name, i),
            s.name,
            triton_name(s.dtype),
            [-1 if isinstance(d, str) else d for d in s.dims],
            batched,
        )
        for i, s in enumerate(config.inputs)
    ]
    outputs = []
    for i, s in enumerate(config.outputs):
        shapes = [case.outputs[s.name].shape for case in golden.values()]
        varying = varying_axes(shapes)
        shape = [-1 if a in varying else n for a, n in enumerate(shapes[0])]
        dtype = triton_name(str(next(iter(golden.values())).outputs[s.name].dtype))  # any case's: one dtype
        outputs.append(_tensor(io_name(fmt, s.name, i), s.name, dtype, shape, batched))
    return inputs, outputs


def _tensor(name: str, spec_name: str, datatype: str, shape: list[int], batched: bool) -> Tensor:
    scalar = len(shape) == (1 if batched else 0)
    return Tensor(name, spec_name, datatype, [*shape, 1] if scalar else shape, scalar)


def metadata_problems(meta: Mapping[str, Any], inputs: list[Tensor], outputs: list[Tensor]) -> list[str]:
    problems = []
    for kind, want in (("input", inputs), ("output", outputs)):
        have = {t["name"]: t for t in meta.get(f"{kind}s", [])}
        for tensor in want:
            got = have.get(tensor.name)
            if got is None:
                problems.append(f"{kind} '{tensor.name}' missing (server has {sorted(have)})")
                continue
            shape = [int(d) for d in got["shape"]]
            if got["datatype"] != tensor.datatype or shape != tensor.shape:
                problems.append(
                    f"{kind} '{tensor.name}': server says {got['datatype']} {shape}, "
                    f"shape spec says {tensor.datatype} {tensor.shape}"
                )
    return problems


def batch_problem(server_config: Mapping[str, Any], max_batch: int | None) -> str | None:
    size = int(server_config.get("max_batch_size", 0))
    if max_batch is not None and size > max_batch:
        return f"max_batch_size {size} exceeds the shape spec's max batch {max_batch}"
    return None


# -- inference --------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelEndpoint:
    """A model on a server, reached by one client."""

    conn: Client
    protocol: str  # http | grpc
    model: str
    max_batch_size: int  # 0: the model takes no batch dim


def infer(
    target: ModelEndpoint, case: Example, inputs: list[Tensor], outputs: list[Tensor]
) -> dict[str, np.ndarray]:
    """Runs a golden case, split into chunks of at most the model's max_batch_size; a
    model without a batch dim gets each input whole (their lengths are their own)."""
    if not target.max_batch_size:
        return _infer_chunk(target, case, inputs, outputs, slice(None))
    total = len(case.inputs[inputs[0].spec_name])
    step = target.max_batch_size
    parts = [
        _infer_chunk(target, case, inputs, outputs, slice(lo, lo + step)) for lo in range(0, total, step)
    ]
    if len(parts) == 1:
        return parts[0]
    return {t.spec_name: np.concatenate([p[t.spec_name] for p in parts]) for t in outputs}


def _infer_chunk(
    target: ModelEndpoint, case: Example, inputs: list[Tensor], outputs: list[Tensor], rows: slice
) -> dict[str, np.ndarray]:
    module = PROTOCOLS[target.protocol]
    requests = infer_inputs(
        module,
        [Feed(t.name, to_wire(_rows(case.inputs[t.spec_name], rows), t.scalar), t.datatype) for t in inputs],
    )
    wanted = [module.InferRequestedOutput(t.name) for t in outputs]
    result = target.conn.infer(target.model, requests, outputs=wanted)
    return {t.spec_name: from_wire(result.as_numpy(t.name), t.scalar) for t in outputs}


def _rows(array: np.ndarray, rows: slice) -> np.ndarray:
    return array if rows == slice(None) else array[rows]


# -- production settings the server must be seen to honour ---------------------------------------
def warmup_problems(server: Server, model: str, server_config: Mapping[str, Any]) -> list[str]:
    """Every model_warmup sample must appear in the server log as run (Triton logs it at
    --log-verbose 1, which smoke sets when the repository has warm-ups)."""
    samples = [str(w.get("name", "")) for w in server_config.get("model_warmup", [])]
    if not samples or (server.container is None and not server.log_path.exists()):
        return []
    log = server.log_path.read_text(errors="replace")
    ran = f"model '{model}' instance"
    return [
        f"warm-up sample '{s}' is not in the server log as run"
        for s in samples
        if not any(ran in line and f"running warmup sample '{s}'" in line for line in log.splitlines())
    ]


def cache_hits(conn: Client, model: str) -> int:
    """Responses the server's response cache answered for this model (all versions)."""
    stats = conn.get_inference_statistics(model, as_json=True).get("model_stats", [])
    return sum(int(s.get("inference_stats", {}).get("cache_hit", {}).get("count", 0)) for s in stats)
