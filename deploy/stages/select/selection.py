"""The select stage's decision: candidates (what deploys, with its measured rows and
accuracy, and whether the target verified it), and per objective the winner and every
other candidate's verdict with its reason; `record` turns the decisions into
selection.json (`runtimes.selection_record`). Stdlib and the shared records only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from deploy.domain.vocabulary import Metric, Precision, Runtime
from deploy.runtimes.catalog import Family
from deploy.runtimes.record import BenchRow
from deploy.runtimes.selection_record import Basis, Chosen, Judged, Selection, Verdict


class Goal(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def metric(self) -> Metric: ...
    @property
    def batch(self) -> int | None: ...
    @property
    def max_latency_ms(self) -> float | None: ...
    @property
    def percentile(self) -> float | None: ...
    @property
    def min_cosine(self) -> float | None: ...


@dataclass(frozen=True)
class Candidate:
    runtime: Runtime  # the in-process runtime that runs the same file
    format: Family
    precision: Precision
    cosine: float | None  # to FP32 on held-out data; None for FP32 itself
    rows: dict[int, BenchRow] = field(default_factory=dict)  # batch -> its single-stream row
    skipped: str = ""  # why bench did not measure it
    model: str = ""  # the Triton model serving it on the target ("": none)
    served: tuple[BenchRow, ...] = ()  # bench's end-to-end rows of `model` (runtime triton)
    unverified: str = ""  # why the target did not verify it ("": verified, or no server target)
    evidence: str = (
        ""  # what its accuracy rests on when that is not real data ("random data; real data goes in KEY")
    )

    @property
    def label(self) -> str:
        what = f"{self.format} {self.precision} ({self.runtime})"
        return f"{self.model}: {what}" if self.model else what


@dataclass(frozen=True)
class Standing:
    candidate: Candidate
    verdict: Verdict
    value: float | None  # ms (latency) or items/s (throughput)
    reason: str = ""
    load: str = ""  # the row the value comes from: "1", "c4" (served rows at a concurrency)
    basis: Basis = Basis.IN_PROCESS  # where that row was measured
    stable: bool = True  # that row's timing settled (bench's stability rule)


@dataclass(frozen=True)
class Decision:
    objective: Goal
    batch: int | None
    entries: list[Standing]
    basis: Basis = Basis.IN_PROCESS
    stable: bool = True  # False: no contender's timing settled, so the pick rests on noise (and says so)

    @property
    def winner(self) -> Standing | None:
        return next((e for e in self.entries if e.verdict is Verdict.SELECTED), None)

    def winner_label(self) -> str | None:
        return None if self.winner is None else self.winner.candidate.label

    def unit(self) -> str:
        return "ms" if self.objective.metric == Metric.LATENCY else "items/s"


def decide(found: list[Candidate], objective: Goal, min_gain: float = 0.0, server: bool = False) -> Decision:
    """The best contender among what the target verified; a reduced-precision one only when
    it beats the best FP32 one by more than `min_gain` (a gain inside the measurement's
    spread does not pay for the accuracy it costs). Served rows decide where bench timed
    every verified candidate through the server."""
    basis = _basis(found, objective, server)
    batch = objective.batch or _default_batch(found, objective.metric, basis)
    entries, stable = _steady([_judge(c, objective, batch, basis, server) for c in found])
    ranked = sorted((e for e in entries if e.verdict is Verdict.SLOWER), key=lambda e: _order(e, objective))
    if not ranked:
        return Decision(objective, batch, entries, basis, stable)
    best = _worth_it(ranked, objective, min_gain)
    return Decision(objective, batch, [_against(e, best, objective) for e in entries], basis, stable)


def _steady(entries: list[Standing]) -> tuple[list[Standing], bool]:
    """No verdict on noise: where some contenders' timings settled, only those compete
    (the others are UNSTABLE, with their numbers shown); where none did, all compete and
    the decision says it rests on unstable timings."""
    contenders = [e for e in entries if e.verdict is Verdict.SLOWER]
    if all(e.stable for e in contenders) or not any(e.stable for e in contenders):
        return entries, all(e.stable for e in contenders)
    reason = "its timing did not settle (bench's stability rule): not compared with the stable rows"
    return [
        replace(e, verdict=Verdict.UNSTABLE, reason=reason) if e in contenders and not e.stable else e
        for e in entries
    ], True


def _basis(found: list[Candidate], objective: Goal, server: bool) -> Basis:
    verified = [c for c in found if server and not c.unverified and not c.skipped]
    timed = verified and all(c.served for c in verified)
    batches = {r.batch for c in verified for r in c.served}
    fits = objective.batch is None or objective.batch in batches
    return Basis.SERVED if timed and fits else Basis.IN_PROCESS


def _worth_it(ranked: list[Standing], objective: Goal, min_gain: float) -> Standing:
    best = ranked[0]
    fp32 = next((e for e in ranked if e.candidate.precision == Precision.FP32), None)
    if best.candidate.precision == Precision.FP32 or fp32 is None:
        return best
    return best if _gain(best, fp32, objective) > 1 + min_gain else fp32


def _gain(e: Standing, other: Standing, objective: Goal) -> float:
    assert e.value is not None and other.value is not None
    return other.value / e.value if objective.metric == Metric.LATENCY else e.value / other.value


def _default_batch(found: list[Candidate], metric: str, basis: Basis) -> int | None:
    if basis is Basis.SERVED:
        batches = {r.batch for c in found for r in c.served}
    else:
        batches = {b for c in found for b in c.rows}
    if not batches:
        return None
    return min(batches) if metric == Metric.LATENCY else max(batches)


def _judge(c: Candidate, objective: Goal, batch: int | None, basis: Basis, server: bool) -> Standing:
    """Measured, verified and within the constraints: a contender (SLOWER until chosen)."""
    if c.skipped:
        return Standing(c, Verdict.SKIPPED, None, c.skipped)
    row, measured = _row(c, objective, batch, basis)
    value = (
        None if row is None else (row.median_ms if objective.metric == Metric.LATENCY else row.items_per_s)
    )
    load = "" if row is None else row.load
    if server and c.unverified:
        return Standing(c, Verdict.UNVERIFIED, value, c.unverified, load, measured)
    if row is None:
        where = "through the server" if basis is Basis.SERVED else "in process"
        return Standing(c, Verdict.SKIPPED, None, f"not measured {where} at batch {batch}")
    broken = _broken(c, row, objective)
    verdict = Verdict.REJECTED if broken else Verdict.SLOWER
    return Standing(c, verdict, value, "; ".join(broken), load, measured, row.stable)


def _row(c: Candidate, objective: Goal, batch: int | None, basis: Basis) -> tuple[BenchRow | None, Basis]:
    """Served: concurrency 1 for latency, the best concurrency for throughput. A candidate
    the server never ran has only its in-process row (shown, never compared)."""
    if basis is Basis.IN_PROCESS or not c.served:
        return (c.rows.get(batch) if batch is not None else None), Basis.IN_PROCESS
    rows = [r for r in c.served if r.batch == batch]
    if objective.metric == Metric.LATENCY:
        return next((r for r in rows if r.single_stream), None), Basis.SERVED
    return max(rows, key=lambda r: r.items_per_s, default=None), Basis.SERVED


def _broken(c: Candidate, row: BenchRow, objective: Goal) -> list[str]:
    found = []
    if objective.max_latency_ms is not None:
        tail = f"p{objective.percentile:g}" if objective.percentile else row.tail()
        value = row.percentiles_ms.get(tail)
        if value is None:
            found.append(f"{tail} was not measured (bench.percentiles)")
        elif not row.supported(tail):
            found.append(f"{tail} not supported by {row.iterations} samples")
        elif value > objective.max_latency_ms:
            found.append(f"{tail} {value:.3f} ms > {objective.max_latency_ms} ms")
    if (
        objective.min_cosine is not None and Precision(c.precision).reduced
    ):  # its accuracy against FP32 must be measured
        if c.cosine is None:
            found.append("no accuracy measured")
        elif c.cosine < objective.min_cosine:
            found.append(f"cosine {c.cosine:.5f} < {objective.min_cosine}")
    return found


def _order(e: Standing, objective: Goal) -> float:
    assert e.value is not None
    return e.value if objective.metric == Metric.LATENCY else -e.value


def _against(e: Standing, best: Standing, objective: Goal) -> Standing:
    if e is best:
        return replace(e, verdict=Verdict.SELECTED, reason="")
    if e.verdict is not Verdict.SLOWER or e.value is None or best.value is None:
        return e
    unit = "ms" if objective.metric == Metric.LATENCY else "items/s"
    numbers = f"{e.value:.3f} {unit} vs {best.value:.3f} {unit}"
    gain = _gain(e, best, objective)
    if gain >= 1:  # better, but not by enough to leave FP32
        reason = f"{numbers}: {100 * (gain - 1):.1f} % better than {best.candidate.label}, within min_gain"
    else:
        reason = f"{numbers} ({1 / gain:.2f}x worse than {best.candidate.label})"
    return replace(e, reason=reason)


def served_pick(decision: Decision, serves: Callable[[Candidate], list[str]]) -> Standing | None:
    """What the repository serves for this objective: the winner, or where Triton serves
    no model of it (eager PyTorch; a format triton_config does not write), the best-ranked
    contender it does serve."""
    ranked = sorted(
        (e for e in decision.entries if e.verdict is Verdict.SLOWER),
        key=lambda e: _order(e, decision.objective),
    )
    contenders = ([decision.winner] if decision.winner else []) + ranked
    return next((e for e in contenders if serves(e.candidate)), None)


def record(decisions: list[Decision], found: list[Candidate], target: str = "") -> Selection:
    """selection.json of these decisions."""
    chosen = [
        Chosen(
            d.objective.name,
            d.objective.metric,
            d.batch,
            d.winner_label(),
            [_judged(e) for e in d.entries],
            d.basis.value,
            d.winner.candidate.model or None if d.winner else None,
            d.stable,
        )
        for d in decisions
    ]
    accuracy = {str(c.runtime): c.cosine for c in found if c.cosine is not None}
    return Selection(chosen, accuracy, target=target)


def _judged(e: Standing) -> Judged:
    c = e.candidate
    return Judged(c.runtime, c.format, c.precision, e.verdict, e.value, e.reason, c.model)
