"""Input arrays that runtimes are fed when no real data is given, and the shape facts
several places need. numpy only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from deploy.runtimes.dtypes import numpy_name
from deploy.spec.config import DeployConfig
from deploy.spec.tensors import InputSpec


def opt_inputs(config: DeployConfig, batch: int) -> dict[str, np.ndarray]:
    """Random inputs at the shape spec's opt shape, with the batch axis set to `batch`
    (what the benchmarks and the Triton search send)."""
    rng = np.random.default_rng(0)
    batched = config.batch_dim is not None
    return {s.name: random_input(s, (batch, *s.opt[1:]) if batched else s.opt, rng) for s in config.inputs}


def random_input(spec: InputSpec, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Values that fit the input: its value_range (integers inclusive, as documented),
    else standard normal; booleans 0/1."""
    if spec.dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if spec.value_range is not None:
        low, high = spec.value_range
        if spec.dtype.startswith(("int", "uint")):
            # Inclusive: value_range [0, 1] is a real mask, not all zeros.
            return rng.integers(int(low), int(high), size=shape, endpoint=True).astype(spec.dtype)
        return rng.uniform(low, high, size=shape).astype(numpy_name(spec.dtype))
    return rng.standard_normal(size=shape).astype(numpy_name(spec.dtype))


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
