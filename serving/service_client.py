"""Talking to a published service as its clients do: encoded images or sentences in,
the ensemble's outputs back, over HTTP or gRPC. Used by the smoke stage's service check
and `deploy infer`; tritonclient is imported by the call."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from serving.service import IMAGE_INPUT, ROLE_PARAMETER, TEXT_INPUT, Role

Protocol = Literal["http", "grpc"]


@dataclass(frozen=True)
class Answer:
    outputs: dict[str, np.ndarray]  # by the ensemble's output names
    latency_ms: float


def connect(url: str, protocol: Protocol, timeout_s: float) -> Any:
    if protocol == "http":
        import tritonclient.http as httpclient

        return httpclient.InferenceServerClient(url, network_timeout=timeout_s, connection_timeout=timeout_s)
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(url)


def ask(conn: Any, protocol: Protocol, model: str, name: str, items: list[bytes]) -> Answer:
    """One request holding `items` (a batch of encoded images or UTF-8 sentences) sent to
    the ensemble input `name`."""
    module = _module(protocol)
    array = np.array([[item] for item in items], dtype=np.object_)
    feed = module.InferInput(name, list(array.shape), "BYTES")
    feed.set_data_from_numpy(array)
    started = time.perf_counter()
    result = conn.infer(model, [feed])
    latency = (time.perf_counter() - started) * 1000
    names = [o["name"] for o in _response_outputs(result, protocol)]
    return Answer({n: result.as_numpy(n) for n in names}, latency)


def _module(protocol: Protocol) -> Any:
    if protocol == "http":
        import tritonclient.http as httpclient

        return httpclient
    import tritonclient.grpc as grpcclient

    return grpcclient


def _response_outputs(result: Any, protocol: Protocol) -> list[dict[str, Any]]:
    response = result.get_response() if protocol == "http" else result.get_response(as_json=True)
    return list(response.get("outputs", []))


def service_input(conn: Any, protocol: Protocol, model: str) -> str:
    """The ensemble's client input: `image` or `text`; a ConfigError-worthy ValueError
    naming the model when it is not a service this project published."""
    config = (
        conn.get_model_config(model, as_json=True)["config"]
        if protocol == "grpc"
        else conn.get_model_config(model)
    )
    parameters = config.get("parameters", {})
    role = parameters.get(ROLE_PARAMETER, {}).get("string_value")
    names = [i["name"] for i in config.get("input", [])]
    if role != Role.ENSEMBLE.value or not set(names) & {IMAGE_INPUT, TEXT_INPUT}:
        raise ValueError(f"model '{model}' is not a published service taking images or text (inputs {names})")
    return IMAGE_INPUT if IMAGE_INPUT in names else TEXT_INPUT
