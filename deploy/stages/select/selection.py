"""The select stage's decision: candidates (what deploys, with its measured rows and
accuracy, and whether the target verified it), and per objective the winner and every
other candidate's verdict with its reason; `record` turns the decisions into
selection.json (`runtimes.selection_record`). Stdlib and the shared records only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from deploy.domain.vocabulary import LOWER_IS_BETTER, UNITS, GenerationMetric, Metric, Precision
from deploy.runtimes.plugin import Family
from deploy.runtimes.record import BenchRow
from deploy.runtimes.selection_record import Basis, Chosen, Judged, Selection, Verdict
from deploy.serving.generation_perf import GenerationRow

FLAGGED = (Verdict.UNSTABLE, Verdict.CONTENDED, Verdict.IMPLAUSIBLE)


class Goal(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def metric(self) -> Metric | GenerationMetric: ...
    @property
    def batch(self) -> int | None: ...
    @property
    def prompt(self) -> int | None: ...
    @property
    def concurrency(self) -> int | None: ...
    @property
    def max_latency_ms(self) -> float | None: ...
    @property
    def percentile(self) -> float | None: ...
    @property
    def min_cosine(self) -> float | None: ...


@dataclass(frozen=True)
class Candidate:
    runtime: str  # the in-process runtime that runs the same file (a catalog name)
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
    generation: tuple[GenerationRow, ...] = ()  # a generate model's served rows (bench.generation)

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
    # Why no verdict may rest on that row (UNSTABLE / CONTENDED / IMPLAUSIBLE, with the
    # reason); None: it may (runtimes/plausibility.py).
    flag: tuple[Verdict, str] | None = None

    @property
    def comparable(self) -> bool:
        return self.flag is None


@dataclass(frozen=True)
class Decision:
    objective: Goal
    batch: int | None
    entries: list[Standing]
    basis: Basis = Basis.IN_PROCESS
    # Why the timings decided nothing (every contender's row unstable, contended or
    # implausible): the pick is then the FP32 reference, said wherever it is shown.
    withheld: str = ""
    cell: str = ""  # a generation metric's row: "prompt 16, concurrency 1" ("": a batch)

    @property
    def winner(self) -> Standing | None:
        return next((e for e in self.entries if e.verdict is Verdict.SELECTED), None)

    @property
    def set_aside(self) -> list[Standing]:
        """The entries no verdict was given on (unstable, contended, implausible rows)."""
        return [e for e in self.entries if e.verdict in FLAGGED]

    def winner_label(self) -> str | None:
        return None if self.winner is None else self.winner.candidate.label

    def unit(self) -> str:
        return UNITS[self.objective.metric]

    def at(self) -> str:
        """What the rows compared were measured at."""
        return self.cell or f"batch {self.batch}"


def decide(found: list[Candidate], objective: Goal, min_gain: float = 0.0, server: bool = False) -> Decision:
    """The best contender among what the target verified; a reduced-precision one only when
    it beats the best FP32 one by more than `min_gain` (a gain inside the measurement's
    spread does not pay for the accuracy it costs). Served rows decide where bench timed
    every verified candidate through the server."""
    if isinstance(objective.metric, GenerationMetric):
        return _ranked(_generation_decision(found, objective, server), min_gain)
    basis = _basis(found, objective, server)
    batch = objective.batch or _default_batch(found, objective.metric, basis)
    judged = [_judge(c, objective, batch, basis, server) for c in found]
    return _ranked(Decision(objective, batch, judged, basis), min_gain)


def _ranked(d: Decision, min_gain: float) -> Decision:
    """The judged entries ranked: the best contender selected, or the reference kept where
    every contender's timing is flagged."""
    objective = d.objective
    contenders = [e for e in d.entries if e.verdict is Verdict.SLOWER]
    if contenders and not any(e.comparable for e in contenders):
        return _reference(d, contenders)
    entries = [_set_aside(e) for e in d.entries]
    ranked = sorted((e for e in entries if e.verdict is Verdict.SLOWER), key=lambda e: _order(e, objective))
    if not ranked:
        return replace(d, entries=entries)
    best = _worth_it(ranked, objective, min_gain)
    return replace(d, entries=[_against(e, best, objective) for e in entries])


def _generation_decision(found: list[Candidate], objective: Goal, server: bool) -> Decision:
    """A decoder's generate models on bench's served generation rows at one cell."""
    prompts = sorted({r.prompt for c in found for r in c.generation})
    prompt = objective.prompt or (prompts[0] if prompts else 0)
    levels = sorted({r.concurrency for c in found for r in c.generation if r.prompt == prompt})
    fewest = objective.metric == GenerationMetric.TTFT
    clients = objective.concurrency or ((levels[0] if fewest else levels[-1]) if levels else 0)
    judged = [_judge_generation(c, objective, prompt, clients, server) for c in found]
    return Decision(objective, None, judged, Basis.SERVED, cell=f"prompt {prompt}, concurrency {clients}")


def _judge_generation(c: Candidate, objective: Goal, prompt: int, clients: int, server: bool) -> Standing:
    row = next((r for r in c.generation if (r.prompt, r.concurrency) == (prompt, clients)), None)
    ttft = objective.metric == GenerationMetric.TTFT
    value = None if row is None else (row.ttft_ms_median if ttft else row.tokens_per_s)
    load = f"p{prompt} c{clients}"
    if server and c.unverified:
        return Standing(c, Verdict.UNVERIFIED, value, c.unverified, load, Basis.SERVED)
    if row is None:
        return Standing(c, Verdict.SKIPPED, None, f"not measured at prompt {prompt}, concurrency {clients}")
    broken = _accuracy_broken(c, objective)
    broken += ["its tokens differed from its own loop's under load"] if row.token_exact is False else []
    flag = _generation_flag(row)
    if broken and flag is not None:
        return Standing(
            c, flag[0], value, f"{'; '.join(broken)}, but {flag[1]}: not judged", load, Basis.SERVED, flag
        )
    verdict = Verdict.REJECTED if broken else Verdict.SLOWER
    return Standing(c, verdict, value, "; ".join(broken), load, Basis.SERVED, flag)


def _set_aside(e: Standing) -> Standing:
    """No verdict on a row that cannot carry one: shown with its flag, never compared."""
    if e.verdict is not Verdict.SLOWER or e.flag is None:
        return e
    verdict, why = e.flag
    return replace(e, verdict=verdict, reason=f"{why}: not compared")


def _reference(d: Decision, contenders: list[Standing]) -> Decision:
    """Every contender's timing is flagged: speed decides nothing. The pick is the first
    FP32 contender (the accuracy reference: reduced precision must earn its place with a
    speed-up this run could not measure), else the first contender, and says so."""
    pick = next((e for e in contenders if e.candidate.precision == Precision.FP32), contenders[0])
    flags = sorted({e.flag[0].value for e in contenders if e.flag})
    withheld = f"every contender's timing is {' / '.join(flags)}"
    why = f"no speed verdict ({withheld}): the reference kept until a quiet rerun decides"
    entries = [
        replace(e, verdict=Verdict.SELECTED, reason=why)
        if e is pick
        else (_unranked(e, pick, d.objective) if e in contenders else e)
        for e in d.entries
    ]
    return replace(d, entries=entries, withheld=withheld)


def _unranked(e: Standing, pick: Standing, objective: Goal) -> Standing:
    """A contender beside a pick no timing made: its flag as its verdict (it read `slower`
    though faster than the pick), and whether it looked faster, as a question."""
    if e.flag is None:
        return e
    flagged = replace(e, verdict=e.flag[0], reason=f"{e.flag[1]}: not compared")
    if e.value is None or pick.value is None:
        return flagged
    return _maybe_faster(flagged, pick, objective)


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
    return other.value / e.value if objective.metric in LOWER_IS_BETTER else e.value / other.value


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
    accuracy, timing, flag = _accuracy_broken(c, objective), _timing_broken(row, objective), _flag(row)
    if accuracy:  # measured against FP32, not timed: a flag on the row changes nothing
        return Standing(c, Verdict.REJECTED, value, "; ".join(accuracy + timing), load, measured, flag)
    if flag is not None and objective.max_latency_ms is not None:  # met or broken, a timing constraint
        said = "; ".join(timing) or f"its {_tail(row, objective)} within {objective.max_latency_ms} ms"
        return Standing(c, flag[0], value, f"{said}, but {flag[1]}: not judged", load, measured, flag)
    verdict = Verdict.REJECTED if timing else Verdict.SLOWER
    return Standing(c, verdict, value, "; ".join(timing), load, measured, flag)


def _generation_flag(row: GenerationRow) -> tuple[Verdict, str] | None:
    if row.contended:
        return Verdict.CONTENDED, f"{row.machine} while it was timed"
    if row.spread is None:
        return Verdict.UNSTABLE, f"{row.rounds} round(s): its stability is unknown (bench.generation.rounds)"
    if not row.stable:
        why = f"its {row.rounds} rounds spread {100 * row.spread:.0f} %: its timing did not settle"
        return Verdict.UNSTABLE, why
    return None


def _flag(row: BenchRow) -> tuple[Verdict, str] | None:
    """Why no verdict may rest on the row, the strongest reason first."""
    if row.implausible:
        return Verdict.IMPLAUSIBLE, f"implausible: {row.implausible}"
    if row.contended and row.environment is not None:
        return Verdict.CONTENDED, f"{row.environment.text()} while it was timed"
    if not row.stable:
        return Verdict.UNSTABLE, "its timing did not settle (bench's stability rule)"
    return None


def _row(c: Candidate, objective: Goal, batch: int | None, basis: Basis) -> tuple[BenchRow | None, Basis]:
    """Served: concurrency 1 for latency, the best concurrency for throughput. A candidate
    the server never ran has only its in-process row (shown, never compared)."""
    if basis is Basis.IN_PROCESS or not c.served:
        return (c.rows.get(batch) if batch is not None else None), Basis.IN_PROCESS
    rows = [r for r in c.served if r.batch == batch]
    if objective.metric == Metric.LATENCY:
        return next((r for r in rows if r.single_stream), None), Basis.SERVED
    return max(rows, key=lambda r: r.items_per_s, default=None), Basis.SERVED


def _tail(row: BenchRow, objective: Goal) -> str:
    return f"p{objective.percentile:g}" if objective.percentile else row.tail()


def _timing_broken(row: BenchRow, objective: Goal) -> list[str]:
    """The objective's latency constraint against the row (a busy machine can make a call
    faster as well as slower: bench fits fewer threads; so a flagged row judges neither)."""
    found: list[str] = []
    if objective.max_latency_ms is not None:
        tail = _tail(row, objective)
        value = row.percentiles_ms.get(tail)
        if value is None:
            found.append(f"{tail} was not measured (bench.percentiles)")
        elif not row.supported(tail):
            found.append(f"{tail} not supported by {row.iterations} samples")
        elif value > objective.max_latency_ms:
            found.append(f"{tail} {value:.3f} ms > {objective.max_latency_ms} ms")
    return found


def _accuracy_broken(c: Candidate, objective: Goal) -> list[str]:
    """A reduced precision's accuracy against FP32 must be measured, and be enough."""
    if objective.min_cosine is None or not Precision(c.precision).reduced:
        return []
    if c.cosine is None:
        return ["no accuracy measured"]
    return [f"cosine {c.cosine:.5f} < {objective.min_cosine}"] if c.cosine < objective.min_cosine else []


def _order(e: Standing, objective: Goal) -> float:
    assert e.value is not None
    return e.value if objective.metric in LOWER_IS_BETTER else -e.value


def _against(e: Standing, best: Standing, objective: Goal) -> Standing:
    if e is best:
        return replace(e, verdict=Verdict.SELECTED, reason="")
    if e.flag is not None and e.value is not None and best.value is not None:
        return _maybe_faster(e, best, objective)
    if e.verdict is not Verdict.SLOWER or e.value is None or best.value is None:
        return e
    unit = UNITS[objective.metric]
    numbers = f"{e.value:.3f} {unit} vs {best.value:.3f} {unit}"
    gain = _gain(e, best, objective)
    if gain >= 1:  # better, but not by enough to leave FP32
        reason = f"{numbers}: {100 * (gain - 1):.1f} % better than {best.candidate.label}, within min_gain"
    else:
        reason = f"{numbers} ({1 / gain:.2f}x worse than {best.candidate.label})"
    return replace(e, reason=reason)


def _maybe_faster(e: Standing, best: Standing, objective: Goal) -> Standing:
    """A flagged row that looks faster than the pick is a question, not an answer."""
    assert e.value is not None and best.value is not None
    if _gain(e, best, objective) <= 1:
        return e
    return replace(
        e, reason=f"{e.reason}; possibly faster than the pick ({best.candidate.label}): rerun quiet"
    )


def served_pick(decision: Decision, serves: Callable[[Candidate], list[str]]) -> Standing | None:
    """What the repository serves for this objective: the winner, or where Triton serves
    no model of it (eager PyTorch; a format triton_config does not write), the best-ranked
    contender it does serve; with no speed verdict (every timing flagged), the first FP32
    one it serves, in the candidates' order: the reference's precision, ranked by nothing."""
    if decision.withheld and decision.winner is not None and not serves(decision.winner.candidate):
        fp32 = (
            e for e in decision.entries if e.candidate.precision == Precision.FP32 and e.verdict in FLAGGED
        )
        return next((e for e in fp32 if serves(e.candidate)), None)
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
            d.withheld,
            d.cell,
        )
        for d in decisions
    ]
    accuracy = {str(c.runtime): c.cosine for c in found if c.cosine is not None}
    return Selection(chosen, accuracy, target=target)


def _judged(e: Standing) -> Judged:
    c = e.candidate
    return Judged(c.runtime, c.format, c.precision, e.verdict, e.value, e.reason, c.model)
