"""Golden inputs and reference outputs at the min / opt / max shapes (numpy only).

Recorded once by `trace` from the eager model; every later stage compares against
them, so a parity number always means "distance from what PyTorch computed".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.config import LABELS, DeployConfig, InputSpec, Label


@dataclass(frozen=True)
class Case:
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]


def make_inputs(config: DeployConfig, label: Label, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {spec.name: random_input(spec, spec.shape(label), rng) for spec in config.inputs}


def random_input(spec: InputSpec, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if spec.dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if spec.value_range is not None:
        low, high = spec.value_range
        if spec.dtype.startswith(("int", "uint")):
            return rng.integers(int(low), int(high), size=shape).astype(spec.dtype)
        return rng.uniform(low, high, size=shape).astype(_np_dtype(spec.dtype))
    return rng.standard_normal(size=shape).astype(_np_dtype(spec.dtype))


def _np_dtype(dtype: str) -> str:
    # numpy has no bfloat16; golden data for such inputs is float32, cast by the runtime.
    return "float32" if dtype == "bfloat16" else dtype


def save(path: Path, cases: dict[Label, Case]) -> None:
    arrays = {}
    for label, case in cases.items():
        arrays.update({f"{label}.in.{k}": v for k, v in case.inputs.items()})
        arrays.update({f"{label}.out.{k}": v for k, v in case.outputs.items()})
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


def load(path: Path) -> dict[Label, Case]:
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    cases = {}
    for label in LABELS:
        ins = {k.split(".", 2)[2]: v for k, v in arrays.items() if k.startswith(f"{label}.in.")}
        outs = {k.split(".", 2)[2]: v for k, v in arrays.items() if k.startswith(f"{label}.out.")}
        cases[label] = Case(ins, outs)
    return cases


def varying_axes(cases: dict[Label, Case], output: str) -> set[int]:
    """Axes of an output whose length differs across the recorded shapes: dynamic."""
    shapes = [case.outputs[output].shape for case in cases.values()]
    return {axis for axis in range(len(shapes[0])) if len({s[axis] for s in shapes}) > 1}
