"""select's conclusion, which the run report opens with: what to deploy and for which
target (verified by which server), how much faster it is than eager PyTorch and than the
best FP32 candidate, and how close it stays to FP32 on which kind of data."""

from __future__ import annotations

from pathlib import Path

from deploy.pipeline.contract import Conclusion
from deploy.stages.select.candidates import Target
from deploy.stages.select.output import headline
from deploy.stages.select.selection import Decision, Standing

EAGER = "eager"
FP32 = "fp32"


def conclusion(decisions: list[Decision], target: Target, repository: Path | None) -> Conclusion:
    main = next((d for d in decisions if d.winner is not None), None)
    facts: list[tuple[str, str]] = []
    if main is not None and main.winner is not None:
        facts.append((f"{main.objective.metric} (batch {main.batch})", _value(main, main.winner)))
        facts.append(("speed vs eager PyTorch", _against(main, _eager(main))))
        facts.append(("speed vs FP32", _against_fp32(main)))
        facts.append(("accuracy vs FP32", _accuracy(main.winner)))
    decision = headline(decisions, target, repository).split("; target: ")[0]
    shown = target.text if target.server else f"{target.text}: verified by no server"
    return Conclusion(decision, shown, facts, chart_stage="select")


def _value(d: Decision, e: Standing) -> str:
    where = f", {e.basis.value}" if e.basis is not d.basis else ""
    return f"{e.value:.4g} {d.unit()}{where}" if e.value is not None else "not measured"


def _eager(d: Decision) -> Standing | None:
    return next((e for e in d.entries if e.candidate.runtime == EAGER and e.value is not None), None)


def _against_fp32(d: Decision) -> str:
    assert d.winner is not None
    if d.winner.candidate.precision == FP32:
        return "the pick is FP32"
    return _against(d, _best_fp32(d))


def _best_fp32(d: Decision) -> Standing | None:
    """The best measured FP32 candidate on the decision's basis (eager PyTorch only when
    nothing else ran in FP32: it has its own line)."""
    rivals = [
        e for e in d.entries if e.candidate.precision == FP32 and e.value is not None and e.basis is d.basis
    ]
    exported = [e for e in rivals if e.candidate.runtime != EAGER]
    return min(exported or rivals, key=lambda e: _cost(d, e), default=None)


def _cost(d: Decision, e: Standing) -> float:
    assert e.value is not None
    return e.value if d.objective.metric == "latency" else -e.value


def _against(d: Decision, other: Standing | None) -> str:
    win = d.winner
    assert win is not None and win.value is not None
    if other is None or other.value is None or other.value <= 0:
        return "not measured"
    gain = other.value / win.value if d.objective.metric == "latency" else win.value / other.value
    where = f", {other.basis.value}" if other.basis is not d.basis else ""
    return (
        f"{gain:.2f}x ({_value(d, win)} vs {other.value:.4g} {d.unit()} for {other.candidate.label}{where})"
    )


def _accuracy(win: Standing) -> str:
    c = win.candidate
    if c.cosine is None:
        return "FP32: the reference precision"
    data = f"measured on {c.evidence}" if c.evidence else "measured on the configured held-out data"
    return f"worst cosine to FP32 {c.cosine:.5f} ({data})"
