"""Golden inputs and reference outputs at the min / opt / max shapes (numpy only).

Recorded once by `trace` from the eager model; every later stage compares against
them, so a parity number always means "distance from what PyTorch computed".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from deploy.domain.issues import Issue
from deploy.pipeline.errors import ConfigError, StageFailed, first_line
from deploy.runtimes import arrays
from deploy.runtimes.arrays import random_input
from deploy.runtimes.base import Session
from deploy.runtimes.dtypes import numpy_name
from deploy.spec.config import DeployConfig
from deploy.spec.tensors import LABELS, InputSpec, Label


@dataclass(frozen=True)
class Case:
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]


# The golden record: each shape's inputs and eager outputs (what `trace` writes, every
# later stage reads).
Golden = dict[Label, Case]
# A runtime's answers to every golden case (the compared side of a parity table).
Answers = dict[Label, dict[str, np.ndarray]]

FIELD = "model.golden_inputs"


def probe_sample(config: DeployConfig) -> dict[str, np.ndarray]:
    """The golden inputs at the min shape: what the probe calls the model with."""
    return golden_inputs(config, np.random.default_rng(config.model.seed))["min"]


def make_inputs(config: DeployConfig, label: Label, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {spec.name: random_input(spec, spec.shape(label), rng) for spec in config.inputs}


def golden_inputs(config: DeployConfig, rng: np.random.Generator) -> dict[Label, dict[str, np.ndarray]]:
    """The inputs at min / opt / max: from `model.golden_inputs` where it has them, else
    random; refused when any is constant (parity on a constant input proves nothing)."""
    given = _load_given(config.model.golden_inputs)
    _refuse_unknown_keys(given, config)
    cases = {
        label: {spec.name: _one_input(spec, label, rng, given) for spec in config.inputs} for label in LABELS
    }
    refuse_constant("golden input", cases, _input_hint(config))
    return cases


def _load_given(path: Path | None) -> dict[str, np.ndarray]:
    if path is None:
        return {}
    try:
        with np.load(path) as data:
            return {key: data[key] for key in data.files}
    except (OSError, ValueError) as exc:  # not a zip, truncated, pickled objects
        raise ConfigError(str(path), [Issue(FIELD, f"cannot read as .npz: {exc}")]) from exc


def _refuse_unknown_keys(given: dict[str, np.ndarray], config: DeployConfig) -> None:
    """A key that names no input (a typo) would silently leave that input random."""
    names = set(config.input_names())
    known = names | {f"{label}.{name}" for label in LABELS for name in names}
    unknown = sorted(set(given) - known)
    if unknown:
        where = FIELD
        raise ConfigError(
            where,
            [
                Issue(
                    where,
                    f"keys {unknown} name no input (inputs: {sorted(names)}; "
                    "keys are NAME or min.NAME / opt.NAME / max.NAME)",
                )
            ],
        )


def _one_input(
    spec: InputSpec, label: Label, rng: np.random.Generator, given: dict[str, np.ndarray]
) -> np.ndarray:
    want = spec.shape(label)
    exact, shared = given.get(f"{label}.{spec.name}"), given.get(spec.name)
    if exact is not None:
        _check_shape(spec, label, exact, exact.shape == want)
        return _cast(spec, exact)
    if shared is not None:
        fits = shared.ndim == len(want) and all(have >= need for have, need in zip(shared.shape, want))
        _check_shape(spec, label, shared, fits)
        # The leading block: a batch's first rows, a token sequence's first tokens.
        return _cast(spec, shared[tuple(slice(0, n) for n in want)])
    return random_input(spec, want, rng)


def _check_shape(spec: InputSpec, label: Label, array: np.ndarray, fits: bool) -> None:
    if not fits:
        where = f"{FIELD}[{spec.name}]"
        raise ConfigError(
            where,
            [
                Issue(
                    where,
                    f"shape {list(array.shape)} cannot give the {label} shape {list(spec.shape(label))}",
                )
            ],
        )


def _cast(spec: InputSpec, array: np.ndarray) -> np.ndarray:
    dtype = np.dtype(numpy_name(spec.dtype))
    if not np.can_cast(array.dtype, dtype, casting="same_kind"):
        where = f"{FIELD}[{spec.name}]"
        raise ConfigError(where, [Issue(where, f"dtype {array.dtype} cannot be cast to the input's {dtype}")])
    return np.ascontiguousarray(array.astype(dtype))


def refuse_constant(what: str, cases: dict[Label, dict[str, np.ndarray]], hint: str) -> None:
    """Raises StageFailed naming every tensor that is not finite, or constant, at some shape."""
    bad = sorted(
        {
            f"{name} at {label} ({why})"
            for label, arrays in cases.items()
            for name, a in arrays.items()
            if (why := _degenerate(a))
        }
    )
    if bad:
        raise StageFailed(
            f"{what}s are constant or not finite, so parity would compare nothing: {', '.join(bad)}. {hint}"
        )


def _degenerate(array: np.ndarray) -> str | None:
    if array.dtype.kind in "fc" and not np.all(np.isfinite(array)):
        return f"{int(np.sum(~np.isfinite(array)))} of {array.size} values NaN or infinite"
    return _value(array) if _constant(array) else None


def _constant(array: np.ndarray) -> bool:
    flat = array.reshape(-1)
    return flat.size > 1 and bool(np.all(flat == flat[0]))


def _value(array: np.ndarray) -> str:
    return f"all {array.reshape(-1)[0].item()!r}"


def _input_hint(config: DeployConfig) -> str:
    if config.model.golden_inputs is not None:
        return f"Give varied values in {FIELD} ({config.model.golden_inputs})."
    return "Widen the input's value_range, or give real inputs in model.golden_inputs (.npz keyed by input name)."


def save(path: Path, cases: dict[Label, Case], clients: Sequence[Case] = ()) -> None:
    """golden.npz: the cases by label, and the client requests as `client<i>`."""
    arrays = {}
    named = [*cases.items(), *((f"{CLIENT}{i}", case) for i, case in enumerate(clients))]
    for label, case in named:
        arrays.update({f"{label}.in.{k}": v for k, v in case.inputs.items()})
        arrays.update({f"{label}.out.{k}": v for k, v in case.outputs.items()})
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


def load(path: Path) -> dict[Label, Case]:
    arrays = _arrays(path)
    return {label: _case(arrays, label) for label in LABELS}


def load_clients(path: Path) -> list[Case]:
    """The concurrent clients' requests golden recorded, each with its own reference."""
    arrays = _arrays(path)
    count = len({k.split(".", 1)[0] for k in arrays if k.startswith(CLIENT)})
    return [_case(arrays, f"{CLIENT}{i}") for i in range(count)]


def _arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def _case(arrays: dict[str, np.ndarray], prefix: str) -> Case:
    ins = {k.split(".", 2)[2]: v for k, v in arrays.items() if k.startswith(f"{prefix}.in.")}
    outs = {k.split(".", 2)[2]: v for k, v in arrays.items() if k.startswith(f"{prefix}.out.")}
    return Case(ins, outs)


# What concurrent clients send (smoke): each its own rows of the golden `max` inputs,
# batch sizes cycling through these, at most CLIENTS requests.
CLIENT = "client"
CLIENT_BATCHES = (1, 2, 3)
CLIENTS = 8


def client_inputs(cases: dict[Label, dict[str, np.ndarray]], batched: bool) -> list[dict[str, np.ndarray]]:
    """Distinct requests of varied batch sizes cut from the `max` inputs (rows a model was
    already checked on); without a batch dim, or too few rows for three requests, the
    min / opt / max inputs themselves."""
    biggest = cases["max"]
    rows = len(next(iter(biggest.values()))) if batched else 0
    cuts: list[slice] = []
    start = 0
    for size in (CLIENT_BATCHES * CLIENTS)[:CLIENTS]:
        if start + size > rows:
            break
        cuts.append(slice(start, start + size))
        start += size
    if len(cuts) < 3:
        return [cases[label] for label in LABELS]
    return [{k: np.ascontiguousarray(v[cut]) for k, v in biggest.items()} for cut in cuts]


def varying_axes(cases: dict[Label, Case], output: str) -> set[int]:
    """Axes of an output whose length differs across the recorded shapes: dynamic."""
    return arrays.varying_axes([case.outputs[output].shape for case in cases.values()])


def run(runtime: Session, cases: Golden) -> Answers:
    """The runtime's outputs on every recorded case's inputs; a case the runtime cannot
    run at all fails naming the case and its shapes (typically a shape the export froze:
    the graph runs at the opt shape it was traced with and nowhere else)."""
    return {label: infer_case(runtime, label, case) for label, case in cases.items()}


# ONNX Runtime's words for a graph input nobody feeds: "Required inputs (['x']) are missing".
_UNFED = re.compile(r"Required inputs \((\[[^\]]*\])\) are missing")


def infer_case(runtime: Session, label: str, case: Case) -> dict[str, np.ndarray]:
    try:
        return runtime.infer(case.inputs)
    except (KeyboardInterrupt, StageFailed):
        raise
    except Exception as exc:
        shapes = ", ".join(f"{name} {list(array.shape)}" for name, array in case.inputs.items())
        unfed = _UNFED.search(str(exc))
        if unfed:  # not a shape at all: the graph has an input the config never declared
            raise StageFailed(
                f"{type(runtime).__name__} cannot run the model: its graph takes input(s) {unfed.group(1)} that no "
                f"declared input feeds (declared: {sorted(case.inputs)}); an argument of forward that is not a "
                "model input became a graph input: fix its value in model.forward_kwargs, or declare it under "
                "inputs"
            ) from exc
        raise StageFailed(
            f"{type(runtime).__name__} cannot run the model on the golden inputs at {label} ({shapes}); "
            f"if only the opt shape works, the export froze a shape: {first_line(exc)}"
        ) from exc
