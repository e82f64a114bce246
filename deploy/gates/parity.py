"""Parity between a runtime's outputs and the golden reference, with one vocabulary
of thresholds (atol / rtol / min_cosine) shared by every transforming stage.

A parity table (gates/parity_table.py) is label (min/opt/max) -> output name -> `Compared`
(the numbers) or `Incomparable` (why there are none: a shape mismatch, a missing output,
a failed call)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, final

import numpy as np
from typing_extensions import TypedDict  # pydantic reads typing's only from Python 3.12

from deploy.gates.detection_parity import DetectionLayout, aligned
from deploy.gates.metrics import EXACT_KINDS, all_zero, cosine, samples_equal, shared_infinities_zeroed
from deploy.gates.parity_table import Compared, Incomparable, OutputParity, Table, to_json
from deploy.gates.references import Case
from deploy.gates.tolerance import Tolerance
from deploy.pipeline.errors import StageFailed
from deploy.pipeline.graph.records import expect_schema, typed

# parity.json's layout (the validate stage's report); bumped with validate's version.
SCHEMA = 1

# atol "bites" only when it is small against the reference's own scale: an atol of 1e-4
# passes any answer at all for logits of size 1e-9 (random-init models).
ATOL_BITE = 0.01


def metrics(actual: np.ndarray, ref: np.ndarray, tol: Tolerance) -> OutputParity:
    if actual.shape != ref.shape:
        return Incomparable(f"shape {list(actual.shape)} != reference {list(ref.shape)}")
    if ref.dtype.kind in EXACT_KINDS:
        return _exact(actual, ref)
    r, a = (x.ravel() for x in shared_infinities_zeroed(ref, actual))
    with np.errstate(invalid="ignore"):  # an infinity on one side only: inf or NaN, a failure
        diff = np.abs(a - r)
        relative = diff / np.maximum(np.abs(r), np.finfo(np.float32).tiny)
    scale = float(np.abs(r).max(initial=0.0))
    # An all-zero reference: the golden inputs do not exercise this output, so the gate
    # compares nothing (gates.metrics would call zeros against zeros a perfect 1.0). An empty
    # one (nonzero() where nothing is) is an answer: the same empty shape is all of it.
    found = None if r.size and all_zero(r) else cosine(a, r)
    within = tol.atol is None or not a.size or bool(np.all(diff <= tol.atol + tol.rtol * np.abs(r)))
    return Compared(
        max_abs=float(diff.max(initial=0.0)),
        mean_abs=float(diff.mean()) if a.size else 0.0,
        max_rel=float(relative.max(initial=0.0)),
        ref_scale=scale,
        scaled_err=_scaled(float(diff.max(initial=0.0)), scale),
        cosine=found,
        atol_bites=tol.atol is not None and (not r.size or tol.atol < ATOL_BITE * scale),
        within_tolerance=within,
        passed=within and found is not None and found >= tol.min_cosine,
    )


def _exact(actual: np.ndarray, ref: np.ndarray) -> Compared:
    """An integer or boolean output compared by equality (metrics.samples_equal); a cosine
    is undefined where the answer is all zeros (class 0)."""
    same, delta = samples_equal(ref, actual)
    diff = delta.ravel() if delta is not None else np.array([np.inf])
    scale = float(np.abs(ref.astype(np.float64)).max(initial=0.0))
    equal = delta is not None and bool(same.all())
    return Compared(
        max_abs=float(diff.max(initial=0.0)),
        mean_abs=float(diff.mean()) if diff.size else 0.0,
        max_rel=float((diff / np.maximum(np.abs(ref.astype(np.float64)).ravel(), 1.0)).max(initial=0.0)),
        ref_scale=scale,
        scaled_err=_scaled(float(diff.max(initial=0.0)), scale),
        cosine=1.0 if equal else None,
        atol_bites=True,
        within_tolerance=equal,
        passed=equal,
        exact=True,
    )


def _scaled(max_abs: float, scale: float) -> float:
    """The largest error as a fraction of the reference's largest magnitude."""
    if scale > 0:
        return max_abs / scale
    return 0.0 if max_abs == 0 else float("inf")


def compare(
    results: dict[str, dict[str, np.ndarray]],
    golden: dict[str, Case],
    tol: Tolerance,
    layout: DetectionLayout | None = None,
) -> Table:
    """label -> output -> parity, for every recorded shape and output; padded detections
    (`layout`) compared row for matching row (gates/detections.py)."""
    table: Table = {}
    for label, case in golden.items():
        got = aligned(case.outputs, results[label], layout)
        table[label] = {
            name: metrics(got[name], ref, tol) if name in got else Incomparable("missing output")
            for name, ref in case.outputs.items()
        }
    return table


def unanswered(golden: dict[str, Case], outputs: list[str], error: str) -> Table:
    """The table of a runtime that could not answer at all (e.g. a failed request)."""
    return {label: {name: Incomparable(error) for name in outputs} for label in golden}


@dataclass(frozen=True)
class RuntimeParity:
    """One runtime's line in parity.json: its table and verdict, or why it was skipped."""

    table: Table | None = None
    passed: bool | None = None
    skipped: str | None = None

    def to_json(self) -> dict[str, object]:
        if self.table is None:
            return {"skipped": self.skipped}
        return {"passed": self.passed, "shapes": to_json(self.table)}


@dataclass(frozen=True)
class ParityReport:
    """parity.json (the validate stage's report): the thresholds, then per runtime its
    table or why it was skipped."""

    thresholds: Mapping[str, object]
    runtimes: dict[str, RuntimeParity]

    def to_json(self) -> dict[str, object]:
        lines = {name: r.to_json() for name, r in self.runtimes.items()}
        return {"schema": SCHEMA, "thresholds": dict(self.thresholds), **lines}

    @classmethod
    def read(cls, path: Path) -> ParityReport:
        """Checked field by field: the thresholds, then one line per runtime (its table and
        verdict as `shapes` and `passed`, or `skipped` and why)."""
        what = f"{path}: not a parity report"
        data = dict(expect_schema(json.loads(path.read_text()), str(path), SCHEMA))
        data.pop("schema")
        thresholds: dict[str, object] = typed(dict[str, object], data.pop("thresholds", None), what)
        lines: dict[str, _Checked | _Skipped] = typed(dict[str, _Checked | _Skipped], data, what)
        return cls(thresholds, {name: _runtime(line) for name, line in lines.items()})


@final  # so that `"skipped" in line` tells the two apart
class _Checked(TypedDict):
    shapes: Table
    passed: bool


@final
class _Skipped(TypedDict):
    skipped: str


def _runtime(line: _Checked | _Skipped) -> RuntimeParity:
    if "skipped" in line:
        return RuntimeParity(skipped=line["skipped"])
    return RuntimeParity(line["shapes"], line["passed"])


def failures(table: Table, tol: Tolerance) -> list[str]:
    return [
        f"{label}/{name}: " + (p.error if isinstance(p, Incomparable) else _numbers(p, tol))
        for label, outs in table.items()
        for name, p in outs.items()
        if not p.passed
    ]


def _numbers(m: Compared, tol: Tolerance) -> str:
    """Names the threshold(s) broken, with the numbers."""
    if m.exact:
        return f"not equal (max|Δ| {m.max_abs:g}, mean |Δ| {m.mean_abs:.3g}): an integer or boolean output is compared exactly"
    broken = []
    if not m.within_tolerance:
        broken.append(
            f"|diff| > atol {tol.atol:g} + rtol {tol.rtol:g}*|ref| (max_abs {m.max_abs:.3g}, max_rel {m.max_rel:.3g})"
        )
    if m.cosine is None:
        broken.append(
            "cosine undefined: an all-zero reference (the golden inputs do not exercise this output)"
        )
    elif m.cosine < tol.min_cosine:
        broken.append(f"cosine {_apart(m.cosine, tol.min_cosine)} < min_cosine {tol.min_cosine:g}")
    return "; ".join(broken)


def _apart(value: float, limit: float) -> str:
    """The value with the digits that tell it from the limit (never `1 < 1`)."""
    return next((f"{value:.{d}g}" for d in (9, 12, 17) if f"{value:.{d}g}" != f"{limit:.{d}g}"), f"{value!r}")


def gate(what: str, table: Table, tol: Tolerance, cause: str = "") -> None:
    """StageFailed naming every failed case and output, led by the cause where one was
    measured (gates/diagnosis.py)."""
    bad = failures(table, tol)
    if bad:
        lead = f": {cause}. The numbers" if cause else ""
        raise StageFailed(f"{what} parity failed{lead}: " + "; ".join(bad[:12]) + _more(len(bad)))


def _more(count: int) -> str:
    return f"; and {count - 12} more" if count > 12 else ""


def headline(table: Table, tol: Tolerance) -> str:
    rows = [p for outs in table.values() for p in outs.values() if isinstance(p, Compared)]
    if not rows:
        return "no comparable outputs"
    near = [m for m in rows if not m.exact]  # exact ones are equal or failed: no cosine to show
    cosines = [m.cosine for m in near if m.cosine is not None]
    cos = f"min cos {min(cosines):.6f}" if cosines else ("cos undefined" if near else "compared exactly")
    text = f"max|Δ| {max(m.max_abs for m in rows):.2g} ({max(m.scaled_err for m in rows):.2g} of max|ref|), {cos}"
    if len(cosines) < len(near):
        text += ", cosine undefined on an all-zero output"
    exact = sorted(
        {n for outs in table.values() for n, p in outs.items() if isinstance(p, Compared) and p.exact}
    )
    if exact and near:
        text += f"; {', '.join(exact)} compared exactly"
    if tol.atol is None:
        text += "; no elementwise bound (atol: null): judged by cosine"
    elif not all(m.atol_bites for m in rows):
        smallest = min(m.ref_scale for m in rows if not m.atol_bites)
        text += f"; atol {tol.atol:g} cannot bite (max|ref| {smallest:.2g}): judged by rtol and cosine"
    return text


def report_rows(what: str, table: Table) -> list[list[Any]]:
    """Rows for the run report: one per shape and output."""
    return [_report_row(what, label, name, p) for label, outs in table.items() for name, p in outs.items()]


def _report_row(what: str, label: str, name: str, p: OutputParity) -> list[Any]:
    if isinstance(p, Incomparable):
        return [what, label, name, p.error]
    shown = "undefined" if p.cosine is None else f"{p.cosine:.7f}"
    numbers = [p.max_abs, p.scaled_err, p.mean_abs, p.max_rel]
    return [what, label, name, *(f"{n:.3g}" for n in numbers), shown, "yes" if p.passed else "NO"]


REPORT_COLUMNS = [
    "runtime",
    "shape",
    "output",
    "max |Δ|",
    "max |Δ| / max |ref|",
    "mean |Δ|",
    "max rel",
    "cosine",
    "passed",
]


__all__ = ["Compared", "Incomparable", "OutputParity", "Table", "to_json"]
