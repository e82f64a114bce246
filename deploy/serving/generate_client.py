"""A client of a generate model (serving/generate_model.py), as users call it: over HTTP
or gRPC, in one response or streamed (gRPC's bidirectional stream, HTTP's
`generate_stream` server-sent events), with the time to the first token and between
tokens as the client sees them. Imports tritonclient inside the functions."""

from __future__ import annotations

import json
import queue
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deploy.domain.vocabulary import Protocol
from deploy.serving.generate_record import OUTPUT_TEXT, PROMPT, SETTINGS, STOP, TEXT, TOKENS


@dataclass(frozen=True)
class Asked:
    """One generate request: the prompt, the settings it gives (the rest: the model's defaults)."""

    prompt: Sequence[int]
    settings: Mapping[str, float | int] = field(default_factory=dict)
    stop: Sequence[int] = ()
    text: str | None = None  # sent in place of the prompt's ids (a model with a tokenizer)


@dataclass(frozen=True)
class Generated:
    tokens: list[int]
    first_s: float  # request sent -> first token received
    gaps_s: list[float]  # between tokens as they arrived (streamed; [] for one response)
    total_s: float
    text: str | None = None  # output_text, joined (a model with a tokenizer)


def generate(
    url: str, protocol: Protocol, model: str, asked: Asked, stream: bool, timeout_s: float = 60.0
) -> Generated:
    if protocol == Protocol.HTTP:
        return (
            _http_stream(url, model, asked, timeout_s)
            if stream
            else _whole(url, protocol, model, asked, timeout_s)
        )
    return (
        _grpc_stream(url, model, asked, timeout_s)
        if stream
        else _whole(url, protocol, model, asked, timeout_s)
    )


def _tensors(module: Any, asked: Asked) -> list[Any]:
    arrays: dict[str, np.ndarray] = (
        {TEXT: np.asarray([asked.text.encode("utf-8")], dtype=object)}
        if asked.text is not None
        else {PROMPT: np.asarray(asked.prompt, dtype=np.int64)}
    )
    for name, value in asked.settings.items():
        arrays[name] = np.asarray([value], dtype=SETTINGS[name][1])
    if asked.stop:
        arrays[STOP] = np.asarray(asked.stop, dtype=np.int64)
    from tritonclient.utils import np_to_triton_dtype

    tensors = []
    for name, array in arrays.items():
        tensor = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def _whole(url: str, protocol: Protocol, model: str, asked: Asked, timeout_s: float) -> Generated:
    if protocol == Protocol.HTTP:
        import tritonclient.http as module

        client: Any = module.InferenceServerClient(
            url, network_timeout=timeout_s, connection_timeout=timeout_s
        )
        per_call: dict[str, float] = {}  # the connection's timeouts apply
    else:
        import tritonclient.grpc as module  # type: ignore[no-redef]

        client = module.InferenceServerClient(url)
        per_call = {"client_timeout": timeout_s}
    start = time.perf_counter()
    result = client.infer(model, _tensors(module, asked), **per_call)
    took = time.perf_counter() - start
    client.close()
    said = result.as_numpy(OUTPUT_TEXT)
    text = _text(said) if said is not None else None
    return Generated([int(t) for t in result.as_numpy(TOKENS).reshape(-1)], took, [], took, text)


def _grpc_stream(url: str, model: str, asked: Asked, timeout_s: float) -> Generated:
    stream = Stream(url)
    try:
        return stream.generate(model, asked, timeout_s)
    finally:
        stream.close()


class Stream:
    """One gRPC stream kept open for a caller's requests, one at a time, as a serving
    client keeps its connection: after the first, no request's time includes a connect."""

    def __init__(self, url: str) -> None:
        import tritonclient.grpc as grpc

        self.arrived: queue.Queue[tuple[float, Any, Any]] = queue.Queue()
        self.client = grpc.InferenceServerClient(url)
        self.client.start_stream(
            callback=lambda result, error: self.arrived.put((time.perf_counter(), result, error))
        )

    def generate(self, model: str, asked: Asked, timeout_s: float = 60.0) -> Generated:
        import tritonclient.grpc as grpc

        start = time.perf_counter()
        self.client.async_stream_infer(model, _tensors(grpc, asked), enable_empty_final_response=True)
        times, tokens, text = _collect(self.arrived, start + timeout_s)
        return _timed(start, times, tokens, text)

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


def _collect(
    arrived: queue.Queue[tuple[float, Any, Any]], deadline: float
) -> tuple[list[float], list[int], str | None]:
    """(each token's arrival, the tokens, the text pieces joined: None without any)."""
    times: list[float] = []
    tokens: list[int] = []
    pieces: list[str] = []
    while True:
        at, result, error = arrived.get(timeout=max(0.1, deadline - time.perf_counter()))
        if error is not None:
            raise error
        response = result.get_response()
        found = result.as_numpy(TOKENS) if response.outputs else None
        if found is not None and found.size:
            tokens += [int(t) for t in found.reshape(-1)]
            times.append(at)
        if response.outputs and result.as_numpy(OUTPUT_TEXT) is not None:
            pieces += [_text(result.as_numpy(OUTPUT_TEXT))]
        if response.parameters["triton_final_response"].bool_param:
            return times, tokens, "".join(pieces) if pieces else None


def _text(found: np.ndarray) -> str:
    value = found.reshape(-1)[0]
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _http_stream(url: str, model: str, asked: Asked, timeout_s: float) -> Generated:
    """Triton's generate extension: the request's JSON keys name the inputs; each event one token."""
    prompt: dict[str, Any] = {TEXT: asked.text} if asked.text is not None else {PROMPT: list(asked.prompt)}
    body: dict[str, Any] = {**prompt, **asked.settings}
    if asked.stop:
        body[STOP] = list(asked.stop)
    request = urllib.request.Request(
        f"http://{url}/v2/models/{model}/generate_stream",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    start = time.perf_counter()
    times, tokens, pieces = [], [], []
    with urllib.request.urlopen(request, timeout=timeout_s) as answer:
        for line in answer:
            if not line.startswith(b"data:"):
                continue
            event = json.loads(line[5:])
            if "error" in event:
                raise RuntimeError(event["error"])
            found = [int(t) for t in np.asarray(event.get(TOKENS, [])).reshape(-1)]
            if found:
                tokens += found
                times.append(time.perf_counter())
            if OUTPUT_TEXT in event:
                pieces.append(str(np.asarray(event[OUTPUT_TEXT]).reshape(-1)[0]))
    return _timed(start, times, tokens, "".join(pieces) if pieces else None)


def _timed(start: float, times: list[float], tokens: list[int], text: str | None = None) -> Generated:
    if not times:
        return Generated(tokens, 0.0, [], time.perf_counter() - start, text)
    gaps = [b - a for a, b in zip(times, times[1:])]
    return Generated(tokens, times[0] - start, gaps, times[-1] - start, text)
