"""The select stage's decision, as typed records: candidates (a runtime and what it
deploys, with its measured rows and accuracy), and per objective the winner and every
other candidate's verdict with its reason, and `Selection`, selection.json (a versioned
record). Stdlib and the shared records only."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from pipeline.records import SchemaMismatch, expect_schema
from runtimes.catalog import CATALOG, IN_PROCESS
from runtimes.record import BenchRow

# selection.json's layout; bumped with the select stage's version (see pipeline/records.py).
SCHEMA = 1


class Goal(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def metric(self) -> str: ...
    @property
    def batch(self) -> int | None: ...
    @property
    def max_latency_ms(self) -> float | None: ...
    @property
    def percentile(self) -> float | None: ...
    @property
    def min_cosine(self) -> float | None: ...


class Verdict(str, Enum):
    SELECTED = "selected"
    SLOWER = "slower"
    REJECTED = "rejected"  # measured, but breaks a constraint
    SKIPPED = "skipped"  # not measured at all


@dataclass(frozen=True)
class Candidate:
    runtime: str
    format: str
    precision: str
    cosine: float | None  # to FP32 on held-out data; None for FP32 itself
    rows: dict[int, BenchRow] = field(default_factory=dict)  # batch -> its single-stream row
    skipped: str = ""  # why bench did not measure it

    @property
    def label(self) -> str:
        return f"{self.format} {self.precision} ({self.runtime})"


@dataclass(frozen=True)
class Entry:
    candidate: Candidate
    verdict: Verdict
    value: float | None  # ms (latency) or items/s (throughput)
    reason: str = ""


@dataclass(frozen=True)
class Decision:
    objective: Goal
    batch: int | None
    entries: list[Entry]

    @property
    def winner(self) -> Entry | None:
        return next((e for e in self.entries if e.verdict is Verdict.SELECTED), None)

    def winner_label(self) -> str | None:
        return None if self.winner is None else self.winner.candidate.label


def candidates(
    rows: list[BenchRow], skipped: Mapping[str, str], cosines: Mapping[str, float | None]
) -> list[Candidate]:
    """One per in-process runtime bench measured or skipped (Triton rows are serving
    measurements of the same files, not candidates of their own)."""
    found = []
    for runtime in IN_PROCESS:
        deploys = CATALOG[runtime]
        mine = {r.batch: r for r in rows if r.runtime == runtime and r.load == "1"}
        if mine or runtime in skipped:
            cosine = cosines.get(deploys.precision)
            reason = skipped.get(runtime, "")
            found.append(Candidate(runtime.value, deploys.format, deploys.precision, cosine, mine, reason))
    return found


def decide(found: list[Candidate], objective: Goal, min_gain: float = 0.0) -> Decision:
    """The best contender; a reduced-precision one only when it beats the best FP32 one by
    more than `min_gain` (a gain inside the measurement's spread does not pay for the
    accuracy it costs)."""
    batch = objective.batch or _default_batch(found, objective.metric)
    entries = [_judge(c, objective, batch) for c in found]
    ranked = sorted((e for e in entries if e.verdict is Verdict.SLOWER), key=lambda e: _order(e, objective))
    if not ranked:
        return Decision(objective, batch, entries)
    best = _worth_it(ranked, objective, min_gain)
    return Decision(objective, batch, [_against(e, best, objective) for e in entries])


def _worth_it(ranked: list[Entry], objective: Goal, min_gain: float) -> Entry:
    best = ranked[0]
    fp32 = next((e for e in ranked if e.candidate.precision == "fp32"), None)
    if best.candidate.precision == "fp32" or fp32 is None:
        return best
    return best if _gain(best, fp32, objective) > 1 + min_gain else fp32


def _gain(e: Entry, other: Entry, objective: Goal) -> float:
    assert e.value is not None and other.value is not None
    return other.value / e.value if objective.metric == "latency" else e.value / other.value


def _default_batch(found: list[Candidate], metric: str) -> int | None:
    batches = {b for c in found for b in c.rows}
    if not batches:
        return None
    return min(batches) if metric == "latency" else max(batches)


def _judge(c: Candidate, objective: Goal, batch: int | None) -> Entry:
    """Measured and within the constraints: a contender (marked SLOWER until chosen)."""
    if c.skipped:
        return Entry(c, Verdict.SKIPPED, None, c.skipped)
    row = c.rows.get(batch) if batch is not None else None
    if row is None:
        return Entry(c, Verdict.SKIPPED, None, f"not measured at batch {batch}")
    value = row.median_ms if objective.metric == "latency" else row.items_per_s
    broken = _broken(c, row, objective)
    return Entry(c, Verdict.REJECTED if broken else Verdict.SLOWER, value, "; ".join(broken))


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
    if objective.min_cosine is not None and c.precision in ("int8", "fp16"):
        if c.cosine is None:
            found.append("no accuracy measured")
        elif c.cosine < objective.min_cosine:
            found.append(f"cosine {c.cosine:.5f} < {objective.min_cosine}")
    return found


def _order(e: Entry, objective: Goal) -> float:
    assert e.value is not None
    return e.value if objective.metric == "latency" else -e.value


def _against(e: Entry, best: Entry, objective: Goal) -> Entry:
    if e is best:
        return Entry(e.candidate, Verdict.SELECTED, e.value)
    if e.verdict is not Verdict.SLOWER or e.value is None or best.value is None:
        return e
    unit = "ms" if objective.metric == "latency" else "items/s"
    numbers = f"{e.value:.3f} {unit} vs {best.value:.3f} {unit}"
    gain = _gain(e, best, objective)
    if gain >= 1:  # better, but not by enough to leave FP32
        reason = f"{numbers}: {100 * (gain - 1):.1f} % better than {best.candidate.label}, within min_gain"
    else:
        reason = f"{numbers} ({1 / gain:.2f}x worse than {best.candidate.label})"
    return Entry(e.candidate, Verdict.SLOWER, e.value, reason)


def served_pick(decision: Decision, serves: Callable[[Candidate], list[str]]) -> Entry | None:
    """What the repository serves for this objective: the winner, or where Triton serves
    no model of it (eager PyTorch; a format triton_config does not write), the best-ranked
    contender it does serve."""
    ranked = sorted(
        (e for e in decision.entries if e.verdict is Verdict.SLOWER),
        key=lambda e: _order(e, decision.objective),
    )
    contenders = ([decision.winner] if decision.winner else []) + ranked
    return next((e for e in contenders if serves(e.candidate)), None)


# -- output -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Judged:
    """One candidate's line in selection.json."""

    runtime: str
    format: str
    precision: str
    verdict: Verdict
    value: float | None
    reason: str


@dataclass(frozen=True)
class Chosen:
    """One objective in selection.json: what won, at which batch, and every verdict."""

    name: str
    metric: str
    batch: int | None
    selected: str | None
    candidates: list[Judged]


@dataclass(frozen=True)
class Selection:
    """selection.json: per objective the pick and every verdict; the worst cosine to FP32
    per reduced-precision runtime; and, where a repository was given, its models that
    serve each objective's pick."""

    objectives: list[Chosen]
    accuracy: dict[str, float]
    served: dict[str, list[str]] | None = None

    @classmethod
    def of(cls, decisions: list[Decision], found: list[Candidate]) -> Selection:
        chosen = [
            Chosen(
                d.objective.name,
                d.objective.metric,
                d.batch,
                d.winner_label(),
                [_judged(e) for e in d.entries],
            )
            for d in decisions
        ]
        return cls(chosen, {c.runtime: c.cosine for c in found if c.cosine is not None})

    def to_json(self) -> dict[str, object]:
        data = {"schema": SCHEMA, **asdict(self)}
        return data if self.served is not None else {k: v for k, v in data.items() if k != "served"}

    @classmethod
    def read(cls, path: Path) -> Selection:
        data = expect_schema(json.loads(path.read_text()), str(path), SCHEMA)
        try:
            objectives = [_chosen(o) for o in data["objectives"]]  # type: ignore[attr-defined]
            return cls(objectives, dict(data["accuracy"]), data.get("served"))  # type: ignore[call-overload, arg-type]
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaMismatch(f"{path}: not a selection record ({type(exc).__name__}: {exc})") from exc


def _judged(e: Entry) -> Judged:
    c = e.candidate
    return Judged(c.runtime, c.format, c.precision, e.verdict, e.value, e.reason)


def _chosen(data: Mapping[str, Any]) -> Chosen:
    judged = [Judged(**{**j, "verdict": Verdict(j["verdict"])}) for j in data["candidates"]]
    return Chosen(data["name"], data["metric"], data["batch"], data["selected"], judged)


def headline(decisions: list[Decision]) -> str:
    return "; ".join(
        f"{d.objective.name}: {d.winner_label() or 'none meets the constraints'}"
        + (
            f" {d.winner.value:.3g} {'ms' if d.objective.metric == 'latency' else 'items/s'}"
            if d.winner
            else ""
        )
        for d in decisions
    )


def report(ctx: Any, decisions: list[Decision], found: list[Candidate]) -> None:
    """Model Navigator's status table, then one table per objective with the reasons."""
    lat = next((d.batch for d in decisions if d.objective.metric == "latency"), None)
    thr = next((d.batch for d in decisions if d.objective.metric == "throughput"), None)
    columns = ["format", "precision", "runtime", "conversion", "accuracy (cosine to FP32)"]
    columns += [f"latency b{lat} median ms", f"throughput b{thr} items/s", "selected for"]
    rows = [_status_row(c, decisions, lat, thr) for c in found]
    ctx.report_table("Status per format and precision", columns, rows, console=True)
    for d in decisions:
        body = [[e.candidate.label, e.verdict.value, _number(e.value), e.reason] for e in d.entries]
        title = f"Selection for '{d.objective.name}' ({d.objective.metric} at batch {d.batch})"
        ctx.report_table(title, ["candidate", "verdict", "value", "why"], body)


def _status_row(c: Candidate, decisions: list[Decision], lat: int | None, thr: int | None) -> list[Any]:
    chosen = [d.objective.name for d in decisions if d.winner is not None and d.winner.candidate == c]
    accuracy = "reference" if c.precision == "fp32" else _number(c.cosine, ".5f")
    latency = c.rows.get(lat) if lat is not None else None
    throughput = c.rows.get(thr) if thr is not None else None
    return [
        c.format,
        c.precision,
        c.runtime,
        f"skipped: {c.skipped}" if c.skipped else "ok",
        accuracy,
        _number(latency.median_ms if latency else None, ".3f"),
        _number(throughput.items_per_s if throughput else None, ".1f"),
        ", ".join(chosen),
    ]


def _number(value: float | None, spec: str = ".4g") -> str:
    return "" if value is None else format(value, spec)
