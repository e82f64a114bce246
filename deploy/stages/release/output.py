"""The release's outcome: the gate (nothing published when it refuses), the versions
placed, release.json, the headline and the report's table."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from deploy.domain.artifacts import RELEASE, RESULTS, SELECTION, SMOKE
from deploy.pipeline.errors import RegressionRefused, StageFailed
from deploy.pipeline.graph.contract import Cell, StageContext
from deploy.pipeline.graph.hashing import digest_file
from deploy.serving import releases
from deploy.stages.release.release_report import ModelRelease, ReleaseAction, ReleaseReport

if TYPE_CHECKING:
    from deploy.serving.releases import ReleaseRecord
    from deploy.stages.release.params import ReleaseParams

FACT = "vs the deployed release"  # the run report's conclusion line
COLUMNS = [
    "model",
    "action",
    "version",
    "against",
    "worst cosine",
    "top-1",
    "latency ×",
    "per item ×",
    "note",
]


def finish(
    ctx: StageContext,
    params: ReleaseParams,
    decided: list[ModelRelease],
    tree: Path,
    base: ReleaseRecord,
    recovered: list[str] = [],  # noqa: B006 (never mutated)
) -> None:
    """`recovered`: what finishing an interrupted release did first (the headline says it)."""
    decided = _whole(decided)
    report = ReleaseReport(decided, params.gate.model_dump(mode="json"), params.accept_regression)
    ctx.output(RELEASE).write_text(report.to_json())
    ctx.report_table(
        "Release against what is deployed", COLUMNS, [_row(m) for m in decided], note=_note(params)
    )
    refused = [m for m in decided if m.action is ReleaseAction.REFUSED]
    if refused:
        said = f"refused, nothing published: {'; '.join(p for m in refused for p in m.problems)}"
        ctx.headline(said)
        ctx.conclusion_fact(FACT, said)
        raise RegressionRefused(_refusal(refused))
    unsure = [m for m in decided if m.action is ReleaseAction.INCONCLUSIVE]
    if unsure:
        said = f"inconclusive, nothing published: {'; '.join(p for m in unsure for p in m.problems)}"
        ctx.headline(said + _while(unsure))
        ctx.conclusion_fact(FACT, said + _while(unsure))
        raise StageFailed(
            f"release {said}{_while(unsure)}. The machine's noise left the speed undecided: rerun on a quieter "
            "machine, raise stages.release.max_rounds / max_s, or publish anyway with --accept-regression REASON"
        )
    problems = _publish(ctx, params, decided, tree, base)
    placed = [m.model for m in decided if m.action in (ReleaseAction.FIRST, ReleaseAction.RELEASED)]
    unchecked = _grouped(unverified(ctx, placed))  # as a publish without verification says
    ctx.headline("; ".join([*recovered, headline(decided), *unchecked]))
    ctx.conclusion_fact(FACT, "; ".join([headline(decided), *unchecked]))
    for said in unchecked:
        ctx.log.warning("released %s", said)
    if problems:
        raise StageFailed(f"published, but not every server switched: {'; '.join(problems)}")


def _whole(decided: list[ModelRelease]) -> list[ModelRelease]:
    """A pipeline releases whole or not at all: where one model is refused or undecided,
    the others that would have been placed are held back (and say so, never "released")."""
    stopped = {ReleaseAction.REFUSED, ReleaseAction.INCONCLUSIVE}
    if not any(m.action in stopped for m in decided):
        return decided
    placing = {ReleaseAction.FIRST, ReleaseAction.RELEASED}
    note = "not published: another model of the pipeline was not released (a pipeline releases whole)"
    return [
        replace(m, action=ReleaseAction.HELD, version=None, note=note) if m.action in placing else m
        for m in decided
    ]


def _publish(
    ctx: StageContext, params: ReleaseParams, decided: list[ModelRelease], tree: Path, base: ReleaseRecord
) -> list[str]:
    """Every new version in one transaction (serving.release_journal); unchanged models
    settled. Returns the live servers that did not switch."""
    from deploy.pipeline.publish.tree import Verification, write_manifest_here
    from deploy.serving.publishing import publishing
    from deploy.serving.release_journal import releasing
    from deploy.serving.release_mirror import mirror
    from deploy.stages.release import versions

    repository, placed = ctx.config.repository, []
    for model in decided:
        if model.action in (ReleaseAction.FIRST, ReleaseAction.RELEASED) and model.version is not None:
            placed.append(
                (repository / model.model, tree / model.model / "1", _record(ctx, model, tree, base))
            )
        elif model.action is ReleaseAction.UNCHANGED:
            versions.settle(
                repository / model.model, tree / model.model / "config.pbtxt", params.keep, base.pipeline
            )
    unchecked = unverified(ctx, [m.model for m in decided])
    verified = Verification(("smoke",) if "smoke" in ctx.inputs else (), "", tuple(sorted(unchecked)))
    write_manifest_here(repository, ctx.config.name, [m.model for m in decided], verified)
    remote = publishing(ctx.config).remote
    problems = releasing(repository, base.pipeline, params.keep, placed, params.servers, remote)
    if remote:  # mirrored by the transaction when it placed versions; unchanged models too
        changed = mirror(repository, remote, ctx.config.name, [m.model for m in decided])
        ctx.record("published_to", {"remote": remote, "changed": changed})
    return problems


def _record(ctx: StageContext, model: ModelRelease, tree: Path, base: ReleaseRecord) -> ReleaseRecord:
    return replace(
        base,
        model=model.model,
        version=model.version or 0,
        files=releases.file_digests(tree / model.model / "1"),
        model_config_sha256=digest_file(tree / model.model / "config.pbtxt"),
        comparison=model.comparison,
        **verified(ctx, model.model),
    )


class Verified(TypedDict, total=False):
    """What the run's own checks said of a model: ReleaseRecord's fields of the same names."""

    server: str
    accuracy: dict[str, float]
    latency_ms: float
    throughput: float
    timing_flag: str
    target: str
    selected_for: list[str]


def unverified(ctx: StageContext, models: list[str]) -> dict[str, str]:
    """The models released that no server checked, and why: every one without smoke in the
    config, else those smoke skipped (a backend its server lacks)."""
    from deploy.serving.smoke_report import ModelStatus, SmokeReport

    if "smoke" not in ctx.inputs:
        return dict.fromkeys(
            models, "no stage of this config verifies it: add smoke to check it on a real server"
        )
    found = SmokeReport.read(ctx.input(SMOKE)).models
    return {
        m: f"smoke {r.status.value}: {r.reason or '; '.join(r.problems)}" if r else "smoke did not check it"
        for m in models
        if (r := found.get(m)) is None or r.status is not ModelStatus.PASSED
    }


def _grouped(unchecked: dict[str, str]) -> list[str]:
    """`UNVERIFIED (why): model, model`, one per reason."""
    by_why: dict[str, list[str]] = {}
    for model, why in unchecked.items():
        by_why.setdefault(why, []).append(model)
    return [f"UNVERIFIED ({why}): {', '.join(models)}" for why, models in by_why.items()]


def verified(ctx: StageContext, model: str) -> Verified:
    """What the run's own checks said of the model: the server smoke loaded it on and its
    outcome there, a reduced-precision model's worst cosine to FP32, bench's latency and
    throughput through the server, and the target and objectives select chose it for."""
    return Verified(**_smoke(ctx, model), **_bench(ctx, model), **_selection(ctx, model))


def _smoke(ctx: StageContext, model: str) -> Verified:
    from deploy.gates.accuracy_report import AccuracyReport
    from deploy.serving.smoke_report import SmokeReport

    found = Verified()
    if "smoke" not in ctx.inputs:
        return found
    smoke = SmokeReport.read(ctx.input(SMOKE))
    result = smoke.models.get(model)
    if smoke.server is not None and result is not None:
        server = smoke.server
        found["server"] = f"tritonserver {server.version or '?'} ({server.kind}): smoke {result.status.value}"
    precision = result.precision if result is not None else ""
    if f"accuracy_{precision}" in ctx.inputs:
        report = AccuracyReport.read(ctx.input(f"accuracy_{precision}"))
        worst = [o.min_sample_cosine for o in report.outputs.values() if o.min_sample_cosine is not None]
        if worst:
            found["accuracy"] = {f"{precision} worst cosine to FP32": round(min(worst), 6)}
    return found


def _bench(ctx: StageContext, model: str) -> Verified:
    """bench's rows of the model through the server: the median latency of one stream at
    batch 1, the most items/s any of its rows reached."""
    from deploy.runtimes.record import BenchResults

    if "results" not in ctx.inputs:
        return Verified()
    rows = [r for r in BenchResults.read(ctx.input(RESULTS)).rows if r.model == model]
    single = [r for r in rows if r.batch == 1 and r.single_stream]
    found = Verified(latency_ms=round(single[0].median_ms, 3)) if single else Verified()
    if rows:
        found["throughput"] = round(max(r.items_per_s for r in rows), 2)
    flags = sorted({flag for r in rows if (flag := r.flagged)})
    if flags:  # the numbers stand in the record, said to bear no verdict
        found["timing_flag"] = "; ".join(flags)
    return found


def _selection(ctx: StageContext, model: str) -> Verified:
    from deploy.runtimes.selection_record import Selection

    if "selection" not in ctx.inputs:
        return Verified()
    chosen = Selection.read(ctx.input(SELECTION))
    return Verified(target=chosen.target, selected_for=chosen.objectives_of(model))


def _refusal(refused: list[ModelRelease]) -> str:
    said = "; ".join(f"{m.model}: {', '.join(m.problems)}{_on(m)}" for m in refused)
    return (
        f"the release gate refused {len(refused)} model(s), nothing was published: {said}. "
        'If the change is intended: deploy run CONFIG --accept-regression "REASON"'
    )


def _on(model: ModelRelease) -> str:
    """Which inputs the numbers rest on (random golden inputs say so)."""
    return f" (on {model.comparison.inputs})" if model.comparison is not None else ""


def headline(decided: list[ModelRelease]) -> str:
    parts = []
    for action in (ReleaseAction.FIRST, ReleaseAction.RELEASED, ReleaseAction.UNCHANGED):
        models = [f"{m.model} v{m.version}{_restored(m)}" for m in decided if m.action is action]
        if models:
            parts.append(f"{action.value}: {', '.join(models)}")
    compared = [m.comparison for m in decided if m.comparison is not None]
    if compared:
        worst = min(a.cosine for c in compared for a in c.agreement)
        slowest = max(c.latency_ratio or 0 for c in compared)
        timed = "time to first token" if compared[0].decoder else "latency"
        parts.append(
            f"worst cosine to the deployed {worst:.6f}, {timed} {slowest:.2f}x (on {compared[0].inputs})"
            f"{_busy(compared)}"
        )
    return "; ".join(parts)


def _restored(model: ModelRelease) -> str:
    """An unchanged version whose files someone changed after its release was put back: said."""
    return f" ({model.note})" if model.action is ReleaseAction.UNCHANGED and model.note else ""


def _while(unsure: list[ModelRelease]) -> str:
    """The machine while each undecided ratio was timed: a busy one is the likely cause, a
    quiet one points at the model's own spread."""
    said = [f"{m.model} {_machine(m.comparison)}" for m in unsure if m.comparison and m.comparison.machine]
    return f" ({'; '.join(said)})" if said else ""


def _busy(compared: list[releases.Comparison]) -> str:
    """A ratio timed on a busy machine says so: its rounds alternate the two versions, so
    both bore the same load and the ratio stands (issue 48's ten self-comparisons under
    load: 0.974-1.024, or inconclusive); the absolute times do not."""
    busy = [c.machine for c in compared if c.machine.startswith("CONTENDED")]
    return f", timed {busy[0]} (versions interleaved: the ratio, not the times)" if busy else ""


def _row(m: ModelRelease) -> list[Cell]:
    c = m.comparison
    cosine = f"{min(a.cosine for a in c.agreement):.6f}" if c and c.agreement else ""
    top1 = [a.top1 for a in c.agreement if a.top1 is not None] if c else []
    return [
        m.model,
        m.action.value,
        m.version or "",
        m.against or "",
        cosine,
        f"{min(top1):.4f}" if top1 else "",
        _ratio(c.latency_ratio, c.latency_ci) if c and c.latency_ratio else "",
        _ratio(c.per_item_ratio, c.per_item_ci) if c and c.per_item_ratio else "",
        "; ".join(s for s in [*(m.problems or [m.note]), _machine(c)] if s),
    ]


def _machine(c: releases.Comparison | None) -> str:
    """The threads both sides had and the machine while they were timed."""
    if c is None or not c.machine:
        return ""
    return f"timed with {c.threads} thread{'' if c.threads == 1 else 's'} each, {c.machine}"


def _ratio(value: float, ci: list[float] | None) -> str:
    return f"{value:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def _note(params: ReleaseParams) -> str:
    gate = params.gate
    accepted = f"; accepted regression: {params.accept_regression}" if params.accept_regression else ""
    return (
        f"gate: cosine >= {gate.min_cosine}, top-1 >= {gate.min_top1}, size within 1 ± {gate.max_scale_change}, "
        f"at most {gate.max_slowdown}x slower; "
        f"ratios new / deployed [95 % interval], interleaved rounds (at least {params.rounds}) until the interval "
        f"is within ±{100 * params.precision:g} %; one straddling the limit is inconclusive{accepted}"
    )
