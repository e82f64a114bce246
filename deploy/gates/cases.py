"""The golden cases beyond the shape spec's three points: a seeded sample of shapes drawn
inside [min, max] for every dynamic dim, and the opt inputs moved to the edges of their
values (every value negative, then positive; the low and the high end of a value_range;
a mask with one token, then none padded). Three points prove little: an export that
froze a shape or a branch agrees with eager wherever the golden inputs took the path it
traced (a resize to the same inner size at min, opt and max; a sign test every random
input passed), and differs everywhere else. Numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum

import numpy as np

from deploy.runtimes.arrays import dim_sizes
from deploy.spec.tensors import InputSpec, ValueKind

Shapes = dict[str, tuple[int, ...]]
SAMPLE = "sample"  # the sampled shapes' case names: sample1, sample2, ...
EDGE = 0.25  # the share of a value_range an edge case's values are drawn from (its low or high end)


class Edge(str, Enum):
    """The two value edges a golden case is made at (the opt shape)."""

    LOW = "low"
    HIGH = "high"


def sampled_shapes(specs: Sequence[InputSpec], count: int, seed: int) -> dict[str, Shapes]:
    """`count` shapes, each dynamic dim drawn uniformly in its [min, max] (a dim shared by
    inputs drawn once), named sample1..; none where no dim is dynamic."""
    spans = {dim: (s.min[a], s.max[a]) for s in specs for a, dim in s.dynamic_axes().items()}
    if not spans or all(low == high for low, high in spans.values()):
        return {}
    rng = np.random.default_rng(seed + 7919)  # not the golden inputs' own stream
    found = {}
    for index in range(1, count + 1):
        sizes = {dim: int(rng.integers(low, high, endpoint=True)) for dim, (low, high) in spans.items()}
        found[f"{SAMPLE}{index}"] = {s.name: shape_of(s, sizes) for s in specs}
    return found


def shape_of(spec: InputSpec, sizes: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else sizes[d] for d in spec.dims)


def at_edge(
    specs: Sequence[InputSpec], inputs: Mapping[str, np.ndarray], edge: Edge, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """The inputs moved to one edge of their values, shapes kept."""
    sizes = dim_sizes(specs, {s.name: tuple(inputs[s.name].shape) for s in specs})
    return {s.name: _edge(s, inputs[s.name], edge, rng, sizes.get(s.of or "", 0)) for s in specs}


def _edge(spec: InputSpec, array: np.ndarray, edge: Edge, rng: np.random.Generator, bound: int) -> np.ndarray:
    high = edge is Edge.HIGH
    if spec.values is not ValueKind.RANDOM:
        return _structured_edge(spec, array, high, bound)
    if array.dtype == np.bool_:
        return array
    if spec.value_range is None:  # standard normal: every value of one sign
        # Each edge draws its own magnitudes: |x| and -|x| beside x gave an even function
        # (x², |rfft(x)|, a norm) the same answers three times, read as ignoring its input.
        magnitude = np.abs(rng.standard_normal(array.shape))
        return (magnitude if high else -magnitude).astype(array.dtype)
    low, top = spec.value_range
    if spec.integer:
        width = max(int((top - low) * EDGE), 0)
        start = int(top) - width if high else int(low)
        return rng.integers(start, start + width, size=array.shape, endpoint=True).astype(array.dtype)
    # Spread over the edge's quarter, not piled at the bound: an image of one grey has
    # tied scores everywhere, and a detector's NMS breaks ties any way it likes.
    span = (top - low) * rng.uniform(0.0, EDGE, size=array.shape)
    return (top - span if high else low + span).astype(array.dtype)


def _structured_edge(spec: InputSpec, array: np.ndarray, high: bool, bound: int) -> np.ndarray:
    """Mask: none padded / one token kept. Lengths: all full / all 1 (the first full, so
    padded outputs keep their size). Indices: the last / the first. Offsets: as they were."""
    out = array.copy()
    if spec.values in (ValueKind.MASK, ValueKind.PADDING):
        kept, padded = (1, 0) if spec.values is ValueKind.MASK else (0, 1)
        out[...] = kept
        if not high and out.shape[-1] > 1:
            out[..., 1:] = padded
    elif spec.values is ValueKind.LENGTHS:
        out[...] = bound if high else 1
        out.reshape(-1)[:1] = bound
    elif spec.values is ValueKind.INDICES and bound > 0:
        out[...] = bound - 1 if high else 0
    return out
