"""Input arrays that runtimes are fed when no real data is given, and the shape facts
several places need. numpy only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from deploy.runtimes.dtypes import numpy_name
from deploy.spec.config import DeployConfig
from deploy.spec.tensors import InputSpec, ValueKind

Sizes = Mapping[str, int]  # a named dim -> its size in one case


def opt_inputs(config: DeployConfig, batch: int) -> dict[str, np.ndarray]:
    """Random inputs at the shape spec's opt shape, with the batch axis set to `batch`
    (what the benchmarks and the Triton search send)."""
    rng = np.random.default_rng(0)
    batched = config.batch_dim is not None
    shapes = {s.name: (batch, *s.opt[1:]) if batched else s.opt for s in config.inputs}
    return inputs_at(config.inputs, shapes, rng)


def inputs_at(
    specs: Sequence[InputSpec], shapes: Mapping[str, tuple[int, ...]], rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Each input at its shape, its values as its `values` kind says (sizes of the named
    dims read from these shapes)."""
    sizes = dim_sizes(specs, shapes)
    return {s.name: random_input(s, tuple(shapes[s.name]), rng, sizes) for s in specs}


def dim_sizes(specs: Sequence[InputSpec], shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """Every named dim's size in these shapes."""
    return {
        dim: int(shapes[s.name][axis])
        for s in specs
        for axis, dim in s.dynamic_axes().items()
        if s.name in shapes and axis < len(shapes[s.name])
    }


def random_input(
    spec: InputSpec, shape: tuple[int, ...], rng: np.random.Generator, sizes: Sizes | None = None
) -> np.ndarray:
    """Values that fit the input: a mask, lengths, indices or offsets where its `values`
    say so, else its value_range (integers inclusive, as documented), else standard
    normal; booleans 0/1."""
    if spec.values is not ValueKind.RANDOM:
        return structured(spec, shape, rng, sizes or {}).astype(numpy_name(spec.dtype))
    if spec.dtype == "bool":
        return _varied(rng.integers(0, 2, size=shape), 0, 1).astype(bool)
    if spec.value_range is not None:
        low, high = spec.value_range
        if spec.dtype.startswith(("int", "uint")):
            # Inclusive: value_range [0, 1] is a real mask, not all zeros.
            drawn = rng.integers(int(low), int(high), size=shape, endpoint=True)
            return _varied(drawn, int(low), int(high)).astype(spec.dtype)
        return rng.uniform(low, high, size=shape).astype(numpy_name(spec.dtype))
    return rng.standard_normal(size=shape).astype(numpy_name(spec.dtype))


def _varied(drawn: np.ndarray, low: int, high: int) -> np.ndarray:
    """A draw of few values (a flag at batch 2, ids in [1, 5] at 4 places) can come out all
    one value, which golden refuses as proving nothing: its last element is then the
    range's other end."""
    flat = drawn.reshape(-1)
    if flat.size > 1 and low < high and bool(np.all(flat == flat[0])):
        flat[-1] = high if flat[0] == low else low
    return drawn


def structured(spec: InputSpec, shape: tuple[int, ...], rng: np.random.Generator, sizes: Sizes) -> np.ndarray:
    """Values with a meaning (InputSpec.values)."""
    if spec.values is ValueKind.MASK:
        return mask(shape, rng)
    if spec.values is ValueKind.PADDING:  # the mask's complement: True (1) where a row is padded
        return 1 - mask(shape, rng)
    bound = _bound(spec, sizes)
    if spec.values is ValueKind.LENGTHS:
        return lengths(shape, bound, rng)
    if spec.values is ValueKind.OFFSETS:
        return offsets(shape, bound, rng)
    if spec.of is None and spec.value_range is not None:  # indices in a declared range
        low, high = spec.value_range
        return rng.integers(int(low), int(high), size=shape, endpoint=True)
    return rng.integers(0, max(bound, 1), size=shape)


def _bound(spec: InputSpec, sizes: Sizes) -> int:
    if spec.of is None:
        return 0
    if spec.of not in sizes:
        raise ValueError(
            f"input '{spec.name}': no size for dim '{spec.of}' (its values: {spec.values.value})"
        )
    return sizes[spec.of]


def mask(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Ones then zeros along the last axis, a length per row in 1..n: the first row whole
    (no padding), the others drawn, so a batch holds padded and unpadded rows."""
    width = shape[-1] if shape else 1
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    kept = rng.integers(1, width, size=rows, endpoint=True)
    kept[0] = width
    out = (np.arange(width)[None, :] < kept[:, None]).astype(np.int64)
    return out.reshape(shape)


def lengths(shape: tuple[int, ...], bound: int, rng: np.random.Generator) -> np.ndarray:
    """In 1..bound, longest first (pack_padded_sequence's default order), the longest the
    bound itself (so padded outputs keep the sequence's size)."""
    drawn = np.sort(rng.integers(1, max(bound, 1), size=shape, endpoint=True).reshape(-1))[::-1].copy()
    if drawn.size:
        drawn[0] = max(bound, 1)
    return drawn.reshape(shape)


def offsets(shape: tuple[int, ...], bound: int, rng: np.random.Generator) -> np.ndarray:
    """Ascending from 0, each below `bound` (the flat input's length): EmbeddingBag's."""
    count = int(np.prod(shape)) if shape else 1
    drawn = np.sort(rng.integers(0, max(bound, 1), size=count))
    drawn[0] = 0
    return drawn.reshape(shape)


def random_array(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    """For a model file without a shape spec (`deploy bench`): small integers for
    integer inputs (valid token ids and indices), standard normal otherwise."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.startswith(("int", "uint")):
        return rng.integers(0, 10, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(numpy_name(dtype))


def varying_axes(shapes: Sequence[tuple[int, ...]]) -> set[int]:
    """Axes whose length differs across shapes recorded at min / opt / max: dynamic."""
    return {axis for axis in range(len(shapes[0])) if len({s[axis] for s in shapes}) > 1}
