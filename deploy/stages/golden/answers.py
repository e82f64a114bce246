"""What golden refuses in eager's answers, or leaves out, before anything is compared with
them: an answer that is NaN is named as such, with the inputs that produced it (never as a
dependence on the batch, which a NaN row also shows), while an infinity is an answer (masked
logits), said and compared by equality; answers that are the same whatever the input values
are named (parity on them proves only the shape logic); an edge case whose
answers compare nothing is left out, saying why; and where a fixed detection layout cut
rows eager returned, that is recorded and said. Numpy; torch only for the detections.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import combinations
from typing import TYPE_CHECKING

import numpy as np

from deploy.domain.issues import Issue
from deploy.gates.cases import SAMPLE
from deploy.gates.eager_record import Truncated
from deploy.gates.references import Case, Golden
from deploy.pipeline.errors import ConfigError, StageFailed
from deploy.spec.tensors import LABELS

if TYPE_CHECKING:
    from deploy.modelio.adapter import IOAdapter

Arrays = Mapping[str, np.ndarray]


def primary(golden: Golden) -> Golden:
    """The cases every parity check must pass: min / opt / max and the sampled shapes."""
    return {name: case for name, case in golden.items() if name in LABELS or name.startswith(SAMPLE)}


def refuse_non_finite(golden: Golden, batched: bool) -> None:
    """StageFailed naming each output that is NaN, where, and the inputs that produced it.
    An infinity is an answer (masked logits: -inf at padding), compared by equality."""
    bad = [
        _non_finite(name, case, output, batched)
        for name, case in primary(golden).items()
        for output in case.outputs
    ]
    found = [line for line in bad if line]
    if found:
        raise StageFailed(
            "eager's answers are NaN, so nothing can be compared with them: "
            + "; ".join(found[:6])
            + ". The model is not defined on these inputs (a length of 0 divided by, a log of a negative value): "
            "give each input the values it is defined on (its value_range, or values: mask / lengths / indices), "
            "or real inputs in model.golden_inputs"
        )


def refuse_empty(golden: Golden, batched: bool) -> None:
    """An output with an axis of size 0 at every case (`y[:, :0]`): Triton serves no empty
    dimension (config.pbtxt's dims must be >= 1), and it failed only in smoke, in Triton's
    words. The batch axis is left out: a batch is never empty."""
    cases = list(primary(golden).values())
    first = 1 if batched else 0
    empty = [
        f"'{name}' {list(cases[0].outputs[name].shape)}"
        for name in cases[0].outputs
        if any(
            all(c.outputs[name].shape[axis] == 0 for c in cases)
            for axis in range(first, cases[0].outputs[name].ndim)
        )
    ]
    if empty:
        raise StageFailed(
            f"outputs: {', '.join(empty)} has an axis that is empty at every shape: Triton serves no empty "
            "dimension; return a tensor with data there, or drop that output from outputs"
        )


def refuse_centred_at_one(golden: Golden, dependent: set[str]) -> None:
    """An output that depends on the rest of its batch (`y - y.mean(0)`) and is all zeros at
    a batch of 1: no cosine can judge a converted answer against it, and every later stage
    failed there advising a tolerance that could not help."""
    cases = primary(golden)
    zero = [
        (label, name)
        for label, case in cases.items()
        for name in dependent
        if name in case.outputs and not np.any(case.outputs[name])
        and any(a.shape[:1] == (1,) for a in case.inputs.values())
    ]  # fmt: skip
    if zero:  # the config's shapes: a config error (exit 3), as init refuses it
        label, name = zero[0]
        shapes = ", ".join(f"{n} {list(a.shape)}" for n, a in cases[label].inputs.items())
        raise ConfigError(
            "inputs",
            [
                Issue(
                    "inputs[].min",
                    f"output '{name}' depends on the rest of its batch and is all zeros at {label} ({shapes}): "
                    "a converted answer cannot be judged against zeros; make min's batch 2 or more, or drop it from outputs",
                )
            ],
        )


def _non_finite(case_name: str, case: Case, output: str, batched: bool) -> str:
    array = case.outputs[output]
    if array.dtype.kind not in "fc" or not np.any(np.isnan(array)):
        return ""
    bad = np.isnan(array)
    rows = _rows(bad, batched)
    return (
        f"{output} at {case_name} is NaN in {int(bad.sum())} of {array.size} values{rows}; "
        f"the inputs there: {describe(case.inputs, _row_index(bad, batched))}"
    )


def _rows(bad: np.ndarray, batched: bool) -> str:
    if not batched or bad.ndim == 0:
        return ""
    rows = sorted({int(i) for i in np.argwhere(bad)[:, 0]})
    return f" (sample{'s' if len(rows) > 1 else ''} {', '.join(map(str, rows[:8]))} of the batch)"


def _row_index(bad: np.ndarray, batched: bool) -> int | None:
    return int(np.argwhere(bad)[0, 0]) if batched and bad.ndim else None


def describe(inputs: Arrays, row: int | None = None) -> str:
    """Each input in a few words: its shape and dtype, and its values where they are few
    (that row's, for a batch)."""
    return ", ".join(_one(name, array, row) for name, array in inputs.items())


def _one(name: str, array: np.ndarray, row: int | None) -> str:
    head = f"{name} {list(array.shape)} {array.dtype}"
    if row is not None and array.ndim and row < len(array):
        head, array = f"{head}, sample {row}:", array[row]
    if array.size <= 8:
        return f"{head} = {array.tolist()}"
    return f"{head} in {array.min().item():.4g}..{array.max().item():.4g}"


def usable_edges(golden: Golden, edges: list[str]) -> tuple[Golden, dict[str, str]]:
    """The golden cases without the edge cases whose answers compare nothing (NaN,
    constant: a ReLU on all-negative inputs), and why each was left out."""
    dropped = {name: why for name in edges if (why := _degenerate(golden[name].outputs))}
    return {n: c for n, c in golden.items() if n not in dropped}, dropped


def infinities(golden: Golden) -> str:
    """The outputs holding infinities (masked logits), said: every gate compares them by
    equality, the same infinity at the same place, and the rest by the numbers."""
    found = sorted(
        {
            name
            for case in golden.values()
            for name, array in case.outputs.items()
            if array.dtype.kind in "fc" and np.any(np.isinf(array))
        }
    )
    return (
        f"±inf in {', '.join(found)} (masked values): compared by equality, the rest by value"
        if found
        else ""
    )


def _degenerate(outputs: Arrays) -> str:
    for name, array in outputs.items():
        if array.dtype.kind in "fc" and np.any(np.isnan(array)):
            return f"{name} is NaN there"
        flat = array.reshape(-1)
        if flat.size > 1 and np.all(flat == flat[0]):
            return f"{name} is constant there ({flat[0].item()!r}): it would compare nothing"
    return ""


def truncated(adapter: IOAdapter, golden: Golden) -> list[Truncated]:
    """Per case, where eager returned more detections for an image than the layout keeps."""
    import torch

    from deploy.modelio import detections

    padding = adapter.padding
    if padding is None:
        return []
    found = []
    for name, case in golden.items():
        args = tuple(torch.from_numpy(np.require(case.inputs[n], requirements="C")) for n in adapter.names)
        with torch.no_grad():
            images = detections.per_image(adapter.binding.call(adapter.model, args))
        counts = [len(next(iter(image.values()))) for image in images]
        if max(counts, default=0) > padding.max_detections:
            found.append(Truncated(name, counts, padding.max_detections))
    return found


def input_blind(golden: Golden) -> str | None:
    """Why parity will prove little, where every output is the same, bit for bit, at two
    cases whose inputs differ; None where the answers follow the input values.

    Named, not refused: an untrained network whose signal dies before its head (GoogLeNet
    with random weights: every image gets the classifier's bias) passes every parity check
    whatever a converter did to the layers before; but a model that computes from shapes
    alone (anchors, positions, a nonzero count of inputs that have no zeros) is right to."""
    pairs = [(a, b) for (a, first), (b, second) in combinations(golden.items(), 2) if _blind(first, second)]
    if not pairs:
        return None
    cases = ", ".join(f"{a} and {b}" for a, b in pairs[:3])
    return (
        f"eager's answers do not depend on the input values: at {cases} the inputs differ but every output is the "
        "same, bit for bit, so parity checks only what the model computes from shapes (and what it adds whatever "
        "its input, e.g. a bias). For an untrained network, give real weights (model.checkpoint); for inputs "
        "that do not exercise it, real ones (model.golden_inputs)"
    )


def _blind(first: Case, second: Case) -> bool:
    """Same input shapes, different input values, every output identical."""
    if first.inputs.keys() != second.inputs.keys() or first.outputs.keys() != second.outputs.keys():
        return False
    if any(first.inputs[n].shape != second.inputs[n].shape for n in first.inputs):
        return False
    if all(np.array_equal(first.inputs[n], second.inputs[n]) for n in first.inputs):
        return False
    return all(np.array_equal(first.outputs[n], second.outputs[n]) for n in first.outputs)
