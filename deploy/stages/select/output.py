"""What select says: the decision first (the model directory to deploy, for which target),
then Model Navigator's status table (format x precision: conversion, accuracy, latency,
throughput, selected for), then one table per objective with every candidate's verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deploy.domain.vocabulary import LOWER_IS_BETTER, Metric, Precision
from deploy.pipeline.graph.contract import StageContext
from deploy.runtimes.selection_record import Basis
from deploy.stages.select.candidates import Target
from deploy.stages.select.selection import FLAGGED, Candidate, Decision


def quoted(names: list[str]) -> str:
    """Objective names as a list a reader can split ('throughput, cosine >= 0.995' is one)."""
    return ", ".join(f"'{n}'" for n in names)


def _where(c: Candidate, repository: Path | None) -> str:
    if not c.model:
        return c.label
    return str(repository / c.model) if repository is not None else c.model


def headline(decisions: list[Decision], target: Target, repository: Path | None) -> str:
    """The first line: what to deploy, for which objectives, where the choice holds."""
    chosen: dict[str, list[str]] = {}
    for d in decisions:
        if d.winner is not None:
            chosen.setdefault(_where(d.winner.candidate, repository), []).append(d.objective.name)
    unmet = [d.objective.name for d in decisions if d.winner is None]
    parts = [f"deploy {where} for {quoted(names)}" for where, names in chosen.items()]
    parts += [f"none meets the constraints of {quoted(unmet)}"] if unmet else []
    return f"{withheld_warning(decisions)}{'; '.join(parts)}; target: {target.text}"


def withheld_warning(decisions: list[Decision]) -> str:
    """The decision's first words where the timings decided nothing (all flagged)."""
    withheld = {d.objective.name: d.withheld for d in decisions if d.winner is not None and d.withheld}
    if not withheld:
        return ""
    why = "; ".join(dict.fromkeys(withheld.values()))
    return (
        f"NO SPEED VERDICT for {quoted(list(withheld))} ({why}: the FP32 reference is kept; rerun on a "
        "quiet machine, `deploy run --wait-quiet SECONDS`): "
    )


def report(ctx: StageContext, decisions: list[Decision], found: list[Candidate], target: Target) -> None:
    """The decision (also in the console), the status table, then each objective's verdicts."""
    repository = ctx.config.repository
    rows = [_decision_row(d, repository) for d in decisions]
    ctx.report_table(
        headline(decisions, target, repository),
        ["objective", "deploy", "value", "compared on"],
        rows,
        note=f"Target: {target.text}. Unverified candidates (never loaded or checked on it) are not chosen for it.",
        console=True,
    )
    lat = next((d for d in decisions if d.objective.metric in LOWER_IS_BETTER), None)
    thr = next((d for d in decisions if d.objective.metric not in LOWER_IS_BETTER), None)
    columns = ["candidate", "verified", "accuracy (cosine to FP32)"]
    columns += [_column(lat, "latency", "median ms"), _column(thr, "throughput", "items/s"), "selected for"]
    status = [_status_row(c, decisions, lat, thr) for c in found]
    ctx.report_table("Status per format and precision", columns, status, console=True)
    for d in decisions:
        body = [[e.candidate.label, e.verdict.value, _entry_value(e, d), e.reason] for e in d.entries]
        title = f"Selection for '{d.objective.name}' ({d.objective.metric} at {d.at()}, {_basis(d)})"
        ctx.report_table(title, ["candidate", "verdict", "value", "why"], body)


def _entry_value(e: Any, d: Decision) -> str:
    elsewhere = f" ({e.basis.value}, not compared)" if e.value is not None and e.basis is not d.basis else ""
    return _number(e.value) + elsewhere


def _decision_row(d: Decision, repository: Path) -> list[Any]:
    if d.winner is None:
        return [d.objective.name, "none meets the constraints", "", _basis(d)]
    value = f"{d.winner.value:.4g} {d.unit()}" if d.winner.value is not None else ""
    return [d.objective.name, _where(d.winner.candidate, repository), value, _basis(d)]


def _basis(d: Decision) -> str:
    if d.cell:
        return "generate models served through Triton (gRPC streams)"
    batch = _batch(d)
    if d.basis is Basis.SERVED:
        load = "concurrency 1" if d.objective.metric == Metric.LATENCY else "the best concurrency"
        return f"served end to end through Triton (gRPC, {batch}, {load})"
    return f"in-process runtimes ({batch})"


def _batch(d: Decision) -> str:
    """The batch decided at, and whether the user chose it."""
    if d.objective.batch is not None:
        return f"batch {d.batch}, the objective's"
    extreme = "smallest" if d.objective.metric == Metric.LATENCY else "largest"
    return f"batch {d.batch}, the {extreme} measured: set the objective's batch to decide at another"


def _column(d: Decision | None, metric: str, unit: str) -> str:
    if d is None:
        return f"{metric} {unit}"
    where = "served" if d.basis is Basis.SERVED else "in-process"
    if d.cell:
        return f"{d.objective.metric} {d.unit()} ({d.cell}, {where})"
    return f"{metric} b{d.batch} {unit} ({where})"


def _status_row(
    c: Candidate, decisions: list[Decision], lat: Decision | None, thr: Decision | None
) -> list[Any]:
    chosen = [d.objective.name for d in decisions if d.winner is not None and d.winner.candidate == c]
    accuracy = "reference" if c.precision == Precision.FP32 else _number(c.cosine, ".5f")
    if c.evidence and c.cosine is not None:
        accuracy += f" ({c.evidence})"
    verified = "skipped: " + c.skipped if c.skipped else ("no: " + c.unverified if c.unverified else "yes")
    return [
        c.label,
        verified,
        accuracy,
        _value(c, lat, ".3f"),
        _value(c, thr, ".1f"),
        quoted(chosen),
    ]


def _value(c: Candidate, d: Decision | None, spec: str) -> str:
    """The number the decision saw; one measured elsewhere than the decision's basis (an
    unverified model's in-process row) says where."""
    entry = next((e for e in d.entries if e.candidate == c), None) if d is not None else None
    if entry is None or entry.value is None:
        return ""
    assert d is not None
    if entry.basis is not d.basis:
        return f"{format(entry.value, spec)} ({entry.basis.value}, not compared)"
    # A flagged row's number beside the pick's would read as a better one passed over.
    flagged = f" ({entry.verdict.value}, not compared)" if entry.verdict in FLAGGED else ""
    return format(entry.value, spec) + flagged


def _number(value: float | None, spec: str = ".4g") -> str:
    return "" if value is None else format(value, spec)
