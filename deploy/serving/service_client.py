"""Talking to a published service as its clients do: encoded images or sentences in,
the ensemble's outputs back, over HTTP or gRPC. Used by the smoke stage's service check
and `deploy infer`; tritonclient is imported by the call."""

from __future__ import annotations

import io
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from deploy.domain.vocabulary import Protocol
from deploy.serving.generate_record import GENERATE_PARAMETER
from deploy.serving.repository import Model
from deploy.serving.requests import Client, Feed
from deploy.serving.service import (
    IMAGE_INPUT,
    ROLE_PARAMETER,
    SERVICE_PARAMETER,
    TEXT_INPUT,
    RequestKind,
    Role,
)
from deploy.serving.service_record import (
    EnsembleRecord,
    ImageRecord,
    PreRecord,
    ServiceRecord,
    TextRecord,
    read_record,
)


@dataclass(frozen=True)
class Answer:
    outputs: dict[str, np.ndarray]  # by the ensemble's output names
    latency_ms: float


def ask(conn: Client, protocol: Protocol, model: str, name: str, items: list[bytes]) -> Answer:
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


def _module(protocol: Protocol) -> ModuleType:
    if protocol == Protocol.HTTP:
        import tritonclient.http as httpclient

        return httpclient
    import tritonclient.grpc as grpcclient

    return grpcclient


def _response_outputs(result: Any, protocol: Protocol) -> list[dict[str, Any]]:
    response = result.get_response() if protocol == Protocol.HTTP else result.get_response(as_json=True)
    return list(response.get("outputs", []))


GENERATE_REACHED = (
    "a decoder's generate model, which `deploy infer` does not send to: reach it with "
    "deploy.serving.generate_client, Triton's generate endpoint (curl) or tritonclient (docs/how-to/decoders.md)"
)


def service_input(conn: Client, protocol: Protocol, model: str) -> str:
    """The ensemble's client input: `image` or `text`; a ConfigError-worthy ValueError
    naming the model when it is not a service this project published."""
    config = (
        conn.get_model_config(model, as_json=True)["config"]
        if protocol == Protocol.GRPC
        else conn.get_model_config(model)
    )
    parameters = config.get("parameters", {})
    role = parameters.get(ROLE_PARAMETER, {}).get("string_value")
    names = [i["name"] for i in config.get("input", [])]
    if GENERATE_PARAMETER in parameters:  # takes text too, but answers tokens, not a service's words
        raise ValueError(f"model '{model}' is {GENERATE_REACHED}")
    if role != Role.ENSEMBLE.value or not set(names) & {IMAGE_INPUT, TEXT_INPUT}:
        raise ValueError(f"model '{model}' is not a published service taking images or text (inputs {names})")
    return IMAGE_INPUT if IMAGE_INPUT in names else TEXT_INPUT


# -- what the checks and benchmarks send ------------------------------------------------------
# Sentences of our own for text services (a file of lines replaces them: smoke.samples).
SENTENCES = (
    "The engine was rebuilt after the weights changed.",
    "A cat sleeps on the warm windowsill.",
    "Latency matters more than throughput for this endpoint.",
    "Rain is expected tomorrow afternoon.",
    "She ordered a second coffee before the meeting.",
    "The bridge was closed for repairs all week.",
    "Quarterly revenue grew faster than analysts expected.",
    "Children played football in the park until dark.",
)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")


@dataclass(frozen=True)
class Sample:
    name: str
    data: bytes  # encoded image, or a UTF-8 sentence


def record(model: Model) -> ServiceRecord:
    """The service record in a repository model's config.pbtxt (ValueError: it has none)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse((model.directory / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    found = read_record(config.parameters)
    if found is None:
        raise ValueError(f"{model.directory} is no service model (no {SERVICE_PARAMETER} parameter)")
    return found


def pre_of(found: dict[str, Model], ensemble: str) -> PreRecord:
    """The pre-processing record of a published ensemble."""
    wiring = record(found[ensemble])
    pre = record(found[wiring.pre]) if isinstance(wiring, EnsembleRecord) and wiring.pre else None
    if not isinstance(pre, ImageRecord | TextRecord):
        raise ValueError(f"{ensemble} has no pre-processing model")
    return pre


def samples(kind: str, source: Path | None) -> list[Sample]:
    if kind == RequestKind.TEXT:
        lines = source.read_text(encoding="utf-8").splitlines() if source else SENTENCES
        return [Sample(f"sentence {i}", line.encode()) for i, line in enumerate(lines) if line.strip()]
    if source is not None:
        files = sorted(p for p in source.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        return [Sample(p.name, p.read_bytes()) for p in files]
    return _packaged_images()


def _packaged_images() -> list[Sample]:
    """The two photos shipped with deploy (deploy/samples): the first as the JPEG it is,
    the second re-encoded as PNG, so a service is asked to decode both formats."""
    from PIL import Image

    from deploy.samples import PHOTOS

    jpeg, other = PHOTOS
    buffer = io.BytesIO()
    with Image.open(other) as image:
        image.convert("RGB").save(buffer, format="PNG")
    return [Sample(jpeg.name, jpeg.read_bytes()), Sample(other.with_suffix(".png").name, buffer.getvalue())]


def input_name(pre: PreRecord) -> str:
    return IMAGE_INPUT if isinstance(pre, ImageRecord) else TEXT_INPUT


def service_feed(found: dict[str, Model], ensemble: str, batch: int) -> Feed:
    """`batch` copies of the first packaged sample (a JPEG photo or a sentence) for the
    ensemble's client input: what a client of the service sends, for timing it."""
    pre = pre_of(found, ensemble)
    sample = samples(pre.kind, None)[0]
    return Feed(input_name(pre), np.array([[sample.data]] * batch, dtype=np.object_), "BYTES")


def variants(kind: str, items: list[Sample], count: int) -> list[Sample]:
    """`count` distinct samples for concurrent clients: the samples, then (images) crops of
    them, every other one mirrored, encoded as the original was. Sentences are what they
    are: a file with fewer lines gives fewer distinct requests."""
    if kind == RequestKind.TEXT or not items:
        return items[:count] if len(items) >= count else items
    return [items[i] if i < len(items) else _variant(items[i % len(items)], i) for i in range(count)]


def _variant(sample: Sample, index: int) -> Sample:
    from PIL import Image, ImageOps

    image = Image.open(io.BytesIO(sample.data))
    fmt = image.format or "PNG"
    width, height = image.size
    inset = 0.04 * (1 + index % 4)  # 4 %..16 % off each side, by index
    box = (int(width * inset), int(height * inset), int(width * (1 - inset)), int(height * (1 - inset)))
    cropped = image.convert("RGB" if image.mode not in ("L", "RGB") else image.mode).crop(box)
    if index % 2:
        cropped = ImageOps.mirror(cropped)
    buffer = io.BytesIO()
    cropped.save(buffer, format=fmt)
    stem, _, suffix = sample.name.rpartition(".")
    return Sample(f"{stem or sample.name}-variant{index}.{suffix or fmt.lower()}", buffer.getvalue())
