"""Why a parity check failed, named from measurements, not guessed. "Loosen the tolerance"
is said only where the difference has been shown to be float rounding: it is of the size
of eager's own float32-vs-float64 difference at that case (eager.json), and the runtime
agrees with itself on the same file and inputs. Otherwise the cause named is the one
measured: the runtime disagrees with itself (its spread beside the tolerance), it answers
NaN, it fails only where the inputs took another path or shape than the three points
(a branch or a size frozen into the graph), or it computes something else. Numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deploy.gates.cases import SAMPLE, Edge
from deploy.gates.eager_record import EagerRecord
from deploy.gates.parity_table import Compared, Table
from deploy.gates.tolerance import Tolerance
from deploy.spec.tensors import LABELS

if TYPE_CHECKING:
    from deploy.gates.references import Case

# A difference within this many times eager's own float32-vs-float64 difference is rounding:
# another runtime sums in another order, and on deep models both grow alike.
ROUNDING_FACTOR = 100.0
REPEATS = 5  # runs of the same file on the same inputs, to see whether a runtime agrees with itself

Answer = Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]
Spread = dict[str, dict[str, float]]  # case -> output -> max |Δ| across REPEATS runs


@dataclass(frozen=True)
class Diagnosis:
    """The cause of a failed parity check in a sentence, and the numbers behind it."""

    cause: str
    rounding: bool = False  # shown to be float rounding: the one case to loosen a tolerance
    spread: Spread = field(default_factory=dict)

    def text(self) -> str:
        return self.cause


def self_spread(answer: Answer, inputs: Mapping[str, Mapping[str, np.ndarray]]) -> Spread:
    """The runtime run REPEATS times on each case's inputs: per output, the largest
    difference from its first answer (0 for a runtime that agrees with itself)."""
    found: Spread = {}
    for case, feeds in inputs.items():
        runs = [answer(feeds) for _ in range(REPEATS)]
        found[case] = {n: max(_max_abs(runs[0][n], r[n]) for r in runs[1:]) for n in runs[0]}
    return found


def _max_abs(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return math.inf
    x, y = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):  # the same infinity twice is no difference
        diff = np.where(x == y, 0.0, np.abs(x - y))
    return float(np.nan_to_num(diff, nan=math.inf).max(initial=0.0))


def judge(
    what: str,
    table: Table,
    tol: Tolerance,
    golden: Mapping[str, Case],
    eager: Path | None,
    answer: Answer | None = None,
    key: str = "",
) -> None:
    """parity.gate, its failure led by the measured cause: the runtime's own spread is
    measured at the failing cases (where `answer` runs it again), eager's rounding read
    from eager.json (`eager`, where golden wrote one). `key`: where the config sets `tol`,
    named where rounding is the cause (each stage's tolerance lives at its own key)."""
    from deploy.gates import parity

    bad = failing(table)
    if not bad:
        return
    record = EagerRecord.read(eager) if eager is not None and eager.exists() else None
    spread = self_spread(answer, {c: golden[c].inputs for c in bad}) if answer is not None else None
    found = explain(table, tol, record, spread)
    parity.gate(what, table, tol, found.text() + (f" (set at {key})" if found.rounding and key else ""))


def failing(table: Table) -> dict[str, list[str]]:
    """case -> the outputs that failed there."""
    found = {case: [n for n, p in outs.items() if not p.passed] for case, outs in table.items()}
    return {case: names for case, names in found.items() if names}


def explain(
    table: Table, tol: Tolerance, eager: EagerRecord | None, spread: Spread | None = None
) -> Diagnosis:
    """The measured cause of the failures in `table` (a runtime against eager)."""
    bad = failing(table)
    if not bad:
        return Diagnosis("")
    for check in (_non_finite, _unsteady, _path, _integer, _rounding):
        found = check(table, bad, tol, eager, spread or {})
        if found is not None:
            return found
    return Diagnosis(_not_rounding(table, bad, eager))


def _compared(table: Table, case: str, name: str) -> Compared | None:
    found = table[case][name]
    return found if isinstance(found, Compared) else None


def _non_finite(
    table: Table, bad: dict[str, list[str]], tol: Tolerance, eager: EagerRecord | None, spread: Spread
) -> Diagnosis | None:
    where = [
        f"{name} at {case}"
        for case, names in bad.items()
        for name in names
        if (m := _compared(table, case, name)) is not None and not math.isfinite(m.max_abs)
    ]
    if not where:
        return None
    return Diagnosis(
        f"the runtime answers NaN or infinity where eager's answer is finite ({', '.join(where[:4])}): not a "
        "tolerance question; an op overflows or is undefined in this runtime (a reduced precision, a division)"
    )


def _unsteady(
    table: Table, bad: dict[str, list[str]], tol: Tolerance, eager: EagerRecord | None, spread: Spread
) -> Diagnosis | None:
    """The runtime's own spread on the same file and inputs reaches the tolerance."""
    shaky = []
    for case, names in bad.items():
        for name in names:
            own, m = spread.get(case, {}).get(name, 0.0), _compared(table, case, name)
            if m is not None and own > 0 and own >= 0.1 * m.max_abs:
                allowed = (tol.atol or 0.0) + tol.rtol * m.ref_scale
                shaky.append(
                    f"{name} at {case}: spread {own:.3g} across {REPEATS} runs, tolerance ≈ {allowed:.3g}"
                )
    if not shaky:
        return None
    return Diagnosis(
        "the runtime disagrees with itself: the same file on the same inputs answers differently run to run ("
        + "; ".join(shaky[:4])
        + "), a kernel whose result depends on how threads split the work (e.g. ScatterND / ScatterElements with "
        "a reduction). No tolerance below that spread can pass it: set the tolerance above the spread, or run the "
        "runtime on one thread",
        spread=spread,
    )


def _path(
    table: Table, bad: dict[str, list[str]], tol: Tolerance, eager: EagerRecord | None, spread: Spread
) -> Diagnosis | None:
    """Passes at the three points, fails at a sampled shape or a value edge: frozen."""
    if any(case in LABELS for case in bad) or not any(case in LABELS for case in table):
        return None
    shapes = [c for c in bad if c.startswith(SAMPLE)]
    edges = [c for c in bad if c in {e.value for e in Edge}]
    said = []
    if shapes:
        shown = ", ".join(f"{c} {_shapes(eager, c)}" for c in shapes)
        said.append(
            f"it fails at the sampled shape(s) {shown} but passes at min / opt / max: the graph froze something "
            "those three share (a resize's target size computed in Python, a shape taken as a constant)"
        )
    if edges:
        said.append(
            f"it fails at the value edge(s) {', '.join(edges)} (every input at the low / high end of its values) but "
            "passes on the drawn inputs: a branch on the data was frozen into the graph (a Python `if` on a tensor; "
            "the export log names its line as a TracerWarning); write it with tensor ops (torch.where) or "
            "torch.cond"
        )
    return Diagnosis("; ".join(said) + ". A tolerance would hide a wrong graph")


def _shapes(eager: EagerRecord | None, case: str) -> str:
    if eager is None or case not in eager.shapes:
        return ""
    return "(" + ", ".join(f"{n} {s}" for n, s in eager.shapes[case].items()) + ")"


def _integer(
    table: Table, bad: dict[str, list[str]], tol: Tolerance, eager: EagerRecord | None, spread: Spread
) -> Diagnosis | None:
    """An integer or boolean output that differs: compared exactly, so no tolerance is the
    way out (one was advised, and the same failure came back with it set)."""
    found = [
        (c, n, m) for c, names in bad.items() for n in names if (m := _compared(table, c, n)) and m.exact
    ]
    if not found:
        return None
    case, name, m = found[0]
    return Diagnosis(
        f"{name} is an integer or boolean output and differs at {case} (by up to {m.max_abs:g}): it is compared "
        "exactly, so no tolerance applies. Where it is computed from floats (a cast, argmax, a threshold), the "
        "runtime's float rounding can move it: make the step robust to it (round before the cast), or return "
        "the float and let the client do the step"
    )


def _rounding(
    table: Table, bad: dict[str, list[str]], tol: Tolerance, eager: EagerRecord | None, spread: Spread
) -> Diagnosis | None:
    """Every failure within ROUNDING_FACTOR of eager's own float64 difference there."""
    if eager is None or not eager.rounding:
        return None
    needed = 0.0
    for case, names in bad.items():
        for name in names:
            m = _compared(table, case, name)
            r = _rounding_at(eager, case, name, m)
            if m is None or r is None or m.max_abs > ROUNDING_FACTOR * max(r, 1e-30):
                return None
            needed = max(needed, m.max_abs)
    return Diagnosis(
        f"float rounding: every difference is within {ROUNDING_FACTOR:g}× of eager's own float32-vs-float64 "
        f"difference at the same inputs, and the runtime agrees with itself: a tolerance of atol ≥ {needed:.2g} "
        "(or the matching rtol) passes it without hiding a wrong graph",
        rounding=True,
    )


def _not_rounding(table: Table, bad: dict[str, list[str]], eager: EagerRecord | None) -> str:
    """The largest failure set against eager's rounding there, where it was measured."""
    worst = max(
        ((c, n, m) for c, names in bad.items() for n in names if (m := _compared(table, c, n)) is not None),
        key=lambda item: item[2].scaled_err,
        default=None,
    )
    if worst is None:
        return "the runtime's answers cannot be compared with eager's (see each case)"
    case, name, m = worst
    r = _rounding_at(eager, case, name, m) if eager is not None else None
    if r is None:
        note = f" ({eager.rounding_note})" if eager is not None and eager.rounding_note else ""
        return f"not shown to be float rounding: eager's float64 difference was not measured{note}"
    return (
        f"not float rounding: at {case}, {name} differs from eager by {m.max_abs:.3g} while eager's own float32 "
        f"and float64 differ by {r:.3g} ({m.max_abs / max(r, 1e-30):.3g}×): the converted graph "
        "computes something else there; loosening the tolerance would hide it"
    )


def _rounding_at(eager: EagerRecord | None, case: str, name: str, m: Compared | None) -> float | None:
    """Eager's float32-vs-float64 max |Δ| at this case: measured there, else the opt
    case's relative to this case's own scale (rounding grows with the outputs)."""
    if eager is None or m is None:
        return None
    here = eager.rounding_of(case, name)
    if here is not None:
        return here.max_abs
    opt = eager.rounding_of("opt", name)
    return None if opt is None else opt.scaled_err * m.ref_scale
