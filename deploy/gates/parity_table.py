"""A parity table as a record: label (min/opt/max) -> output name -> `Compared` (the
numbers) or `Incomparable` (why there are none). Stdlib only: the smoke report carries
tables and the select stage reads that report without numpy (gates/parity.py computes
them)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Compared:
    max_abs: float
    mean_abs: float
    max_rel: float
    ref_scale: float  # max |ref|
    scaled_err: float  # max_abs / ref_scale
    cosine: float | None  # None: an all-zero vector has no direction
    atol_bites: bool
    within_tolerance: bool
    passed: bool
    # An integer or boolean output (argmax labels, masks, indices): equal or wrong, no
    # tolerance and no cosine (1.0 when equal); an all-zero one is an answer like any other.
    exact: bool = False


@dataclass(frozen=True)
class Incomparable:
    error: str
    passed: bool = False


OutputParity = Compared | Incomparable
Table = dict[str, dict[str, OutputParity]]


def to_json(table: Table) -> dict[str, dict[str, dict[str, object]]]:
    return {label: {name: asdict(p) for name, p in outs.items()} for label, outs in table.items()}
