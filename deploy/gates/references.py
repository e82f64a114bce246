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
from deploy.gates import cases
from deploy.pipeline.errors import ConfigError, StageFailed, first_line
from deploy.runtimes import arrays
from deploy.runtimes.arrays import dim_sizes, inputs_at, random_input
from deploy.runtimes.base import Session
from deploy.runtimes.dtypes import numpy_name
from deploy.spec.config import DeployConfig
from deploy.spec.tensors import LABELS, InputSpec, Label, ValueKind


@dataclass(frozen=True)
class Case:
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]


# A golden case's name: min / opt / max (the shape spec's), sample1.. (shapes drawn inside
# [min, max]), low / high (the opt inputs at the edges of their values: gates/cases.py).
CaseName = str
# The golden record: each case's inputs and eager outputs (what `golden` writes, every
# later stage reads).
Golden = dict[CaseName, Case]
# A runtime's answers to every golden case (the compared side of a parity table).
Answers = dict[CaseName, dict[str, np.ndarray]]
Inputs = dict[CaseName, dict[str, np.ndarray]]

FIELD = "model.golden_inputs"


@dataclass(frozen=True)
class Plan:
    """Which cases golden makes beyond min / opt / max (the golden stage's params)."""

    sampled_shapes: int = 0
    edges: bool = False


def probe_sample(config: DeployConfig) -> dict[str, np.ndarray]:
    """The golden inputs at the min shape: what the probe calls the model with."""
    return golden_inputs(config, np.random.default_rng(config.model.seed))["min"]


def make_inputs(config: DeployConfig, label: Label, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return inputs_at(config.inputs, {spec.name: spec.shape(label) for spec in config.inputs}, rng)


def golden_inputs(config: DeployConfig, rng: np.random.Generator, plan: Plan = Plan()) -> Inputs:
    """The inputs at min / opt / max, at the sampled shapes, then at the edges of their
    values: from `model.golden_inputs` where it has them, else drawn; refused when one the
    shape spec names is constant (parity on a constant input proves nothing)."""
    _refuse_beyond_memory(config)
    given = _load_given(config.model.golden_inputs)
    _refuse_unknown_keys(given, config)
    shapes: dict[str, dict[str, tuple[int, ...]]] = {
        label: {spec.name: spec.shape(label) for spec in config.inputs} for label in LABELS
    }
    shapes |= cases.sampled_shapes(config.inputs, plan.sampled_shapes, config.model.seed)
    found = {name: _case_inputs(config, name, shape, rng, given) for name, shape in shapes.items()}
    refuse_constant("golden input", {lb: _drawn(config, found[lb]) for lb in LABELS}, _input_hint(config))
    if plan.edges:
        found |= {e.value: cases.at_edge(config.inputs, found["opt"], e, rng) for e in cases.Edge}
    return found


def _refuse_beyond_memory(config: DeployConfig) -> None:
    """An input whose max shape alone outgrows this machine's memory (a typo such as 1e12):
    named with its field, not as numpy's MemoryError."""
    import os

    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    sizes = {
        (i, s.name): int(np.prod(s.max, dtype=np.float64)) * np.dtype(numpy_name(s.dtype)).itemsize
        for i, s in enumerate(config.inputs)
    }
    issues = [
        Issue(
            f"inputs[{i}].max",
            f"'{name}' at {list(config.inputs[i].max)} is {size / 2**30:.3g} GiB, more than this machine's memory ({memory / 2**30:.3g} GiB): golden runs the model at max",
        )
        for (i, name), size in sizes.items()
        if size > memory
    ]
    if issues:
        raise ConfigError("inputs", issues)


def _drawn(config: DeployConfig, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inputs drawn at random: a mask or lengths may be constant by meaning."""
    return {s.name: inputs[s.name] for s in config.inputs if s.values is ValueKind.RANDOM}


def _case_inputs(
    config: DeployConfig,
    name: CaseName,
    shapes: dict[str, tuple[int, ...]],
    rng: np.random.Generator,
    given: dict[str, np.ndarray],
) -> dict[str, np.ndarray]:
    sizes = dim_sizes(config.inputs, shapes)
    return {spec.name: _one_input(spec, name, shapes[spec.name], rng, given, sizes) for spec in config.inputs}


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
    spec: InputSpec,
    case: CaseName,
    want: tuple[int, ...],
    rng: np.random.Generator,
    given: dict[str, np.ndarray],
    sizes: dict[str, int],
) -> np.ndarray:
    exact, shared = given.get(f"{case}.{spec.name}"), given.get(spec.name)
    if exact is not None:
        _check_shape(spec, case, want, exact, exact.shape == want)
        return _cast(spec, exact)
    if shared is not None:
        fits = shared.ndim == len(want) and all(have >= need for have, need in zip(shared.shape, want))
        _check_shape(spec, case, want, shared, fits or case not in LABELS)
        if fits:  # The leading block: a batch's first rows, a token sequence's first tokens.
            return _cast(spec, shared[tuple(slice(0, n) for n in want)])
    return random_input(spec, want, rng, sizes)


def _check_shape(
    spec: InputSpec, case: CaseName, want: tuple[int, ...], array: np.ndarray, fits: bool
) -> None:
    """A given array too small for a shape the spec names is refused; at a sampled
    shape it is left for a drawn one (it was never promised that size)."""
    if not fits:
        where = f"{FIELD}[{spec.name}]"
        raise ConfigError(
            where, [Issue(where, f"shape {list(array.shape)} cannot give the {case} shape {list(want)}")]
        )


def _cast(spec: InputSpec, array: np.ndarray) -> np.ndarray:
    dtype = np.dtype(numpy_name(spec.dtype))
    if not np.can_cast(array.dtype, dtype, casting="same_kind"):
        where = f"{FIELD}[{spec.name}]"
        raise ConfigError(where, [Issue(where, f"dtype {array.dtype} cannot be cast to the input's {dtype}")])
    return np.require(array.astype(dtype), requirements="C")


def refuse_constant(what: str, found: Inputs, hint: str, everywhere: bool = False) -> None:
    """Raises StageFailed naming every tensor that is NaN, or constant, at some shape
    (`everywhere`: only a tensor constant at every shape; an output that is constant at
    batch 1 alone, a ReLU's or a flag's, still compares something at the others)."""
    flagged = {
        (label, name): why
        for label, arrays in found.items()
        for name, a in arrays.items()
        if (why := _degenerate(a))
    }
    if everywhere:
        always = {n for _, n in flagged if all((lb, n) in flagged for lb in found)}
        flagged = {(lb, n): why for (lb, n), why in flagged.items() if n in always or "NaN" in why}
    bad = sorted(f"{name} at {label} ({why})" for (label, name), why in flagged.items())
    if bad:
        raise StageFailed(
            f"{what}s are constant or NaN, so parity would compare nothing: {', '.join(bad)}. {hint}"
        )


def _degenerate(array: np.ndarray) -> str | None:
    if array.dtype.kind in "fc" and np.any(np.isnan(array)):
        return f"{int(np.sum(np.isnan(array)))} of {array.size} values NaN"
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


def save(path: Path, found: Golden, clients: Sequence[Case] = ()) -> None:
    """golden.npz: the cases by name, and the client requests as `client<i>`."""
    arrays = {}
    named = [*found.items(), *((f"{CLIENT}{i}", case) for i, case in enumerate(clients))]
    for label, case in named:
        arrays.update({f"{label}.in.{k}": v for k, v in case.inputs.items()})
        arrays.update({f"{label}.out.{k}": v for k, v in case.outputs.items()})
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


def load(path: Path) -> Golden:
    """Every golden case (min / opt / max first, then the sampled shapes and the edges, in
    the order golden made them), without the clients' requests."""
    arrays = _arrays(path)
    names = [k.split(".", 1)[0] for k in arrays]
    return {n: _case(arrays, n) for n in dict.fromkeys(names) if not n.startswith(CLIENT)}


def spec_cases(golden: Golden) -> Golden:
    """min / opt / max only: the shape spec's own points."""
    return {label: golden[label] for label in LABELS}


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


def client_inputs(found: Inputs, batched: bool) -> list[dict[str, np.ndarray]]:
    """Distinct requests of varied batch sizes cut from the `max` inputs (rows a model was
    already checked on); without a batch dim, or too few rows for three requests, the
    min / opt / max inputs themselves."""
    biggest = found["max"]
    rows = len(next(iter(biggest.values()))) if batched else 0
    cuts: list[slice] = []
    start = 0
    for size in (CLIENT_BATCHES * CLIENTS)[:CLIENTS]:
        if start + size > rows:
            break
        cuts.append(slice(start, start + size))
        start += size
    if len(cuts) < 3:
        return [found[label] for label in LABELS]
    return [{k: np.require(v[cut], requirements="C") for k, v in biggest.items()} for cut in cuts]


def varying_axes(golden: Golden, output: str) -> set[int]:
    """Axes of an output whose length differs across the recorded shapes: dynamic."""
    return arrays.varying_axes([case.outputs[output].shape for case in golden.values()])


def run(runtime: Session, golden: Golden) -> Answers:
    """The runtime's outputs on every recorded case's inputs; a case the runtime cannot
    run at all fails naming the case and its shapes (typically a shape the export froze:
    the graph runs at the opt shape it was traced with and nowhere else)."""
    return {label: infer_case(runtime, label, case) for label, case in golden.items()}


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
            f"{getattr(runtime, 'name', type(runtime).__name__)} cannot run the model on the golden inputs at "
            f"{label} ({shapes}); "
            f"if only the opt shape works, the export froze a shape: {first_line(exc)}"
        ) from exc
