"""What `deploy init` and `deploy.optimize` learn by calling the model before writing its
config: its outputs, discovered at batch 1 (so a detection model's list of per-image
results is one image's, not a batch's), whether they are per-image detections (padded in
the config), and whether each output is computed per sample or depends on the rest of
its batch (measured as golden measures it; such a model is written with
max_batch_size: 0). Imports torch and numpy inside the functions."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deploy.domain.issues import Issue
from deploy.gates.batch_independence import BatchIndependence, measure
from deploy.pipeline.errors import ConfigError, StageFailed

# Rows per image a detection config starts with (torchvision's models keep up to 100-300).
MAX_DETECTIONS = 100
COUNT = "num_detections"


@dataclass(frozen=True)
class Found:
    """One tensor the model returned, as an output entry."""

    name: str
    path: str | None  # None: the default (a lone tensor, or positions in order)
    shape: tuple[int, ...]
    kind: str


@dataclass(frozen=True)
class Findings:
    outputs: list[Found]
    detections: bool  # one dict per image: written with model.detections, a fixed batch
    batching: BatchIndependence | None  # None: not measured (no batch dim, or detections)


def discover(result_tensors: list[tuple[str, tuple[int, ...], str]], batched: bool) -> list[Found]:
    """Output entries for what the model returned (modelio.adapter.returned_tensors)."""
    by_position = all(path.isdigit() for path, _, _ in result_tensors)
    found = []
    for index, (path, shape, dtype) in enumerate(result_tensors):
        name = (
            re.sub(r"\W", "_", path) if path and not by_position else f"output{index}" if path else "output"
        )
        keep_path = None if (by_position or not path or path == name) else path
        kind = _kind(name, shape, dtype, batched, len(result_tensors))
        found.append(Found(_valid_name(name), keep_path, shape, kind))
    return found


def _valid_name(name: str) -> str:
    return name if re.match(r"^[A-Za-z_]", name) else f"out_{name}"


def _kind(name: str, shape: tuple[int, ...], dtype: str, batched: bool, count: int) -> str:
    """A guess, marked as one in the file: class scores are [batch, classes] floats."""
    if not dtype.startswith(("float", "bfloat")):
        return "other"
    rank2 = len(shape) == 2 and (shape[1] >= 2) and batched
    if rank2 and ("logit" in name or "score" in name or count == 1):
        return "logits"
    if rank2 or any(word in name for word in ("embed", "pool", "hidden")):
        return "embedding"
    return "other"


def inspect(model: Any, specs: Sequence[Any]) -> Findings:
    """Calls `model` at the smallest batch of the opt shapes (InputSpec `specs`), then, for
    a batched model, at a batch of distinct samples against each sample alone."""
    import numpy as np

    from deploy.modelio import detections
    from deploy.modelio.adapter import probe, returned_tensors
    from deploy.spec.tensors import InputsBy

    names = tuple(s.name for s in specs)
    batched = any(s.min[0] != s.max[0] for s in specs)
    rng = np.random.default_rng(0)
    result, _ = probe(model, names, InputsBy.AUTO, _sample(specs, _smallest(specs), rng))
    if detections.hint(result):
        return Findings(_detection_outputs(result), True, None)
    tensors = returned_tensors(result)
    if not tensors:
        raise ConfigError("model", [Issue("model", "the model returned no tensors at the opt shapes")])
    found = discover(tensors, batched)
    batching = _batching(model, specs, names, rng) if batched else None
    return Findings(found, False, batching)


def _smallest(specs: Sequence[Any]) -> int:
    return min(s.min[0] for s in specs)


def _sample(specs: Sequence[Any], batch: int, rng: Any) -> dict[str, Any]:
    from deploy.runtimes.arrays import random_input

    return {s.name: random_input(s, (batch, *s.opt[1:]), rng) for s in specs}


def _detection_outputs(result: Any) -> list[Found]:
    """One output per key of the per-image dicts, padded, and the per-image count."""
    from deploy.modelio import detections
    from deploy.spec.tensors import Detections

    padded = detections.padded(result, Detections(max_detections=MAX_DETECTIONS, count=COUNT))
    return [Found(k, None, tuple(v.shape), "other") for k, v in padded.items()]


def _batching(model: Any, specs: Sequence[Any], names: tuple[str, ...], rng: Any) -> BatchIndependence:
    """The same measurement golden makes: a batch of distinct samples against each alone."""
    from deploy.modelio.adapter import flat, probe
    from deploy.spec.tensors import InputsBy

    batch = min(max(2, *(s.opt[0] for s in specs)), min(s.max[0] for s in specs))
    sample = _sample(specs, batch, rng)

    def infer(feeds: Mapping[str, Any]) -> dict[str, Any]:
        result, _ = probe(model, names, InputsBy.AUTO, feeds)
        return {path or "output": t.float().numpy() for path, t in flat(result).items()}

    try:
        return measure(infer, sample, infer(sample))
    except StageFailed as exc:  # a model that cannot take this batch: said, not measured
        raise ConfigError("model", [Issue("model", f"at batch {batch}: {exc}")]) from None
