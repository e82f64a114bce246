"""batching.json, the golden stage's record of whether each output of the model is
computed per sample or depends on the rest of its batch (a batch-centred output, CLIP's
`logits_per_image`, a loss over the batch): measured, never assumed, because a server
that merges requests (Triton's dynamic batcher) answers each client with a row computed
beside other clients' data. triton_config refuses dynamic batching for such a model,
triton_search leaves batching out of its search, and `deploy init` writes
`max_batch_size: 0` for it. Stdlib at import (triton_config reads it); numpy in `measure`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from deploy.pipeline.errors import StageFailed
from deploy.pipeline.graph.records import read_record, record_json

if TYPE_CHECKING:
    import numpy as np

    Arrays = Mapping[str, np.ndarray]

# batching.json's layout; bumped with the golden stage's version (its key).
SCHEMA = 1
# A sample computed alone and the same sample inside a batch differ by float noise (other
# kernel blocking at another batch size): ~1e-7 of the output's scale on CPU. A batch-centred
# output differs by the order of its own scale. Between the two, by four orders of magnitude.
NOISE = 1e-3


@dataclass(frozen=True)
class OutputBatching:
    """One output: a sample's answer inside a batch of distinct samples vs alone."""

    name: str
    independent: bool
    shape_in_batch: list[int]  # the whole batch's output
    shape_alone: list[int]  # one sample's output
    max_abs: float | None = None  # None: the shapes already differ
    scaled_err: float | None = None  # max_abs / max |output in the batch|

    def difference(self) -> str:
        """What was measured, for a message: the shapes, or the largest difference."""
        if self.max_abs is None and self.shape_in_batch == self.shape_alone:
            return (
                f"it has no batch axis (shape {self.shape_in_batch} for the batch and for one sample alone)"
            )
        if self.max_abs is None:
            return f"its shape is {self.shape_in_batch} for the batch but {self.shape_alone} for one sample alone"
        scaled = f" ({100 * self.scaled_err:.3g} % of its scale)" if self.scaled_err is not None else ""
        return f"a sample's answer inside the batch differs from its answer alone by max |Δ| {self.max_abs:.3g}{scaled}"


@dataclass(frozen=True)
class BatchIndependence:
    """batching.json: every output, measured on `batch` distinct samples (0: not measured,
    `reason` says why)."""

    batch: int
    outputs: list[OutputBatching] = field(default_factory=list)
    reason: str = ""

    @property
    def measured(self) -> bool:
        return self.batch > 0

    def dependent(self) -> list[OutputBatching]:
        return [o for o in self.outputs if not o.independent]

    def text(self) -> str:
        """One line for the console and the report."""
        if not self.measured:
            return f"batch independence not measured: {self.reason}"
        bad = self.dependent()
        if not bad:
            return f"every output per sample (batch of {self.batch} vs each alone)"
        return f"{', '.join(o.name for o in bad)} depend(s) on the rest of the batch (batch of {self.batch})"

    def to_json(self) -> dict[str, object]:
        return record_json(self, SCHEMA)

    @classmethod
    def read(cls, path: Path) -> BatchIndependence:
        return read_record(path, cls, SCHEMA, "a batching record")


def not_measured(reason: str) -> BatchIndependence:
    return BatchIndependence(0, [], reason)


def measure(infer: Callable[[Arrays], Arrays], inputs: Arrays, in_batch: Arrays) -> BatchIndependence:
    """`in_batch`: the outputs of `infer(inputs)`; each sample (row of axis 0) is run alone
    and compared with its row. Refused (not measured) when the rows are not distinct: a
    batch of copies hides any dependence on the batch."""
    batch = len(next(iter(inputs.values())))
    if batch < 2:
        return not_measured("a batch of one sample shows nothing")
    if not _distinct_rows(inputs):
        return not_measured(f"the {batch} samples of the batch are not distinct")
    alone = [infer({k: v[i : i + 1] for k, v in inputs.items()}) for i in range(batch)]
    if any(set(a) != set(in_batch) for a in alone):  # e.g. a list with one tensor per sample
        raise StageFailed(
            f"a sample alone gets {len(alone[0])} output(s), the batch of {batch} gets {len(in_batch)}: "
            "the number of outputs follows the batch, which no served model can declare; return one "
            "tensor for the batch (torch.stack), or give the inputs a fixed batch (min = opt = max)"
        )
    return BatchIndependence(
        batch, [_compare(name, out, [a[name] for a in alone]) for name, out in in_batch.items()]
    )


def _distinct_rows(inputs: Arrays) -> bool:
    rows = {
        b"".join(v[i].tobytes() for v in inputs.values()) for i in range(len(next(iter(inputs.values()))))
    }
    return len(rows) == len(next(iter(inputs.values())))


def _compare(name: str, in_batch: np.ndarray, alone: list[np.ndarray]) -> OutputBatching:
    import numpy as np

    shape, one = list(in_batch.shape), list(alone[0].shape)
    if shape[1:] != one[1:] or one[:1] != [1] or shape[:1] != [len(alone)]:
        return OutputBatching(name, False, shape, one)
    from deploy.gates.metrics import shared_infinities_zeroed

    together, separate = shared_infinities_zeroed(in_batch, np.concatenate(alone))
    with np.errstate(invalid="ignore"):
        max_abs = float(np.nan_to_num(np.abs(together - separate), nan=np.inf).max(initial=0.0))
    scale = float(np.abs(together[np.isfinite(together)]).max(initial=0.0))
    scaled = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    return OutputBatching(name, scaled <= NOISE, shape, one, max_abs, scaled)
