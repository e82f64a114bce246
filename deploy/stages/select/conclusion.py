"""select's conclusion, which the run report opens with: what to deploy and for which
target (verified by which server), how much faster it is than eager PyTorch and than the
best FP32 candidate, and how close it stays to FP32 on which kind of data."""

from __future__ import annotations

from pathlib import Path

from deploy.domain.vocabulary import LOWER_IS_BETTER, Metric
from deploy.pipeline.graph.contract import Conclusion
from deploy.runtimes.catalog import BASELINE as EAGER  # the speed-ups' baseline
from deploy.runtimes.plausibility import comparable
from deploy.runtimes.record import BenchRow
from deploy.runtimes.selection_record import Basis
from deploy.stages.select.candidates import Target
from deploy.stages.select.output import headline
from deploy.stages.select.selection import Decision, Standing

FP32 = "fp32"


def conclusion(decisions: list[Decision], target: Target, repository: Path | None) -> Conclusion:
    main = next((d for d in decisions if d.winner is not None), None)
    facts: list[tuple[str, str]] = []
    if main is not None and main.winner is not None:
        facts.append((f"{main.objective.metric} ({main.at()})", _value(main, main.winner)))
        facts.append(("speed vs eager PyTorch", _eager(main)))
        facts.append(("speed vs FP32", _against_fp32(main)))
        facts.append(("accuracy vs FP32", _accuracy(main.winner)))
        if faster := _possibly_faster(main):  # set aside for their timing, yet they read faster
            facts.append(("possibly faster, not judged", faster))
    decision = headline(decisions, target, repository).split("; target: ")[0]
    shown = target.text if target.server else f"{target.text}: verified by no server"
    return Conclusion(decision, shown, facts, chart_stage="select")


def _possibly_faster(d: Decision) -> str:
    """The candidates set aside (contended, implausible, unstable) whose numbers beat the
    pick's: the first screen names them, with why they were not compared."""
    pick = d.winner
    if pick is None or pick.value is None:
        return ""
    lower = d.objective.metric in LOWER_IS_BETTER
    better = [
        e
        for e in d.set_aside
        if e.value is not None and (e.value < pick.value if lower else e.value > pick.value)
    ]
    said = [
        f"{e.candidate.label} {e.value:.4g} {d.unit()} ({e.flag[1] if e.flag else e.verdict.value})"
        for e in better
    ]
    return "; ".join(said) + ": rerun quiet" if said else ""


def _value(d: Decision, e: Standing) -> str:
    where = f", {e.basis.value}" if e.basis is not d.basis else ""
    if e.value is None:
        return "not measured"
    return f"{e.value:.4g} {d.unit()}{where}{_noise(e.flag is None and not d.withheld)}"


def _eager(d: Decision) -> str:
    """Eager PyTorch runs in process only: the pick's in-process row at the same batch
    against eager's, whatever the decision's basis (a served number is never divided by
    an in-process one)."""
    assert d.winner is not None
    eager = next((c for c in (e.candidate for e in d.entries) if c.runtime == EAGER), None)
    mine = d.winner.candidate.rows.get(d.batch) if d.batch is not None else None
    theirs = eager.rows.get(d.batch) if eager is not None and d.batch is not None else None
    if mine is None or theirs is None:
        return f"not measured in process at {d.at()} for both"
    gain = _gain(d, _metric(d, mine), _metric(d, theirs))
    numbers = f"{_metric(d, mine):.4g} vs {_metric(d, theirs):.4g} {d.unit()}"
    return f"{gain:.2f}x (both in process, batch {d.batch}: {numbers}){_noise(comparable(mine), comparable(theirs))}"


def _against_fp32(d: Decision) -> str:
    assert d.winner is not None
    if d.winner.candidate.precision == FP32:
        return "the pick is FP32"
    best = _best_fp32(d)
    win = d.winner
    if best is None or best.value is None or win.value is None or best.value <= 0:
        return f"no FP32 candidate measured {_where(d)}"
    numbers = f"{win.value:.4g} vs {best.value:.4g} {d.unit()} for {best.candidate.label}"
    gain = _gain(d, win.value, best.value)
    return f"{gain:.2f}x ({_where(d)}: {numbers}){_noise(win.flag is None, best.flag is None)}"


def _best_fp32(d: Decision) -> Standing | None:
    """The best measured FP32 candidate on the decision's own basis and batch (eager
    PyTorch only when nothing else ran in FP32: it has its own line)."""
    rivals = [
        e for e in d.entries if e.candidate.precision == FP32 and e.value is not None and e.basis is d.basis
    ]
    exported = [e for e in rivals if e.candidate.runtime != EAGER]
    return min(exported or rivals, key=lambda e: _cost(d, e), default=None)


def _cost(d: Decision, e: Standing) -> float:
    assert e.value is not None
    return e.value if d.objective.metric in LOWER_IS_BETTER else -e.value


def _metric(d: Decision, row: BenchRow) -> float:
    return row.median_ms if d.objective.metric == Metric.LATENCY else row.items_per_s


def _gain(d: Decision, mine: float, theirs: float) -> float:
    return theirs / mine if d.objective.metric in LOWER_IS_BETTER else mine / theirs


def _where(d: Decision) -> str:
    if d.basis is Basis.SERVED:
        return f"both served end to end, {d.at()}"
    return f"both in process, {d.at()}"


def _noise(*comparable: bool) -> str:
    return "" if all(comparable) else "; a side's timing is unstable, contended or implausible: not a verdict"


def _accuracy(win: Standing) -> str:
    c = win.candidate
    if c.cosine is None:
        return "FP32: the reference precision"
    data = f"measured on {c.evidence}" if c.evidence else "measured on the configured held-out data"
    return f"worst cosine to FP32 {c.cosine:.5f} ({data})"
