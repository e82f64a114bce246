"""select: decides, per objective, what to deploy, from what the pipeline measured and
verified. With a smoke stage the decision is for the server smoke ran: its candidates
are the models that server loaded and smoke verified, compared on bench's end-to-end rows
through that server where bench timed them; a model it never loaded (a backend it lacks)
or a runtime no served model stands for is shown unverified, with the reason, and is not
chosen for it. Without smoke, bench's in-process rows decide, for in-process use. Every
candidate gets its verdict: selected, slower (by how much), rejected (which constraint),
unverified or skipped (why). Writes selection.json and, in the run report and the console,
the decision first (the model directory to deploy, for which target), then a Model
Navigator-style status table."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from deploy.domain.artifacts import CHART, DEPLOYMENT, GENERATION_SPEED, REPOSITORY, RESULTS, SELECTION, SMOKE
from deploy.domain.issues import Issue
from deploy.domain.naming import model_name
from deploy.domain.vocabulary import GenerationMetric
from deploy.gates.accuracy_report import AccuracyReport
from deploy.pipeline.errors import Contended, StageFailed
from deploy.pipeline.graph.contract import Artifact, ArtifactKind, Phase, Publish, StageContext, StageSpec
from deploy.runtimes.catalog import ACCURACY_REPORTS, CATALOG
from deploy.runtimes.record import BenchResults
from deploy.runtimes.selection_record import Verdict
from deploy.serving.generation_perf import GenerationBench
from deploy.serving.publishing import when_selected
from deploy.serving.service import Role
from deploy.serving.service_record import service_name
from deploy.serving.smoke_report import SmokeReport
from deploy.spec.config import DeployConfig
from deploy.stages.select import candidates, output, selection
from deploy.stages.select.chart import chart
from deploy.stages.select.conclusion import conclusion
from deploy.stages.select.params import Objective, SelectParams
from deploy.stages.select.selection import Candidate


def run(ctx: StageContext, params: SelectParams) -> None:
    bench = BenchResults.read(ctx.input(RESULTS))
    reports = {a: AccuracyReport.read(ctx.input(a)) for a in ACCURACY_REPORTS if a in ctx.inputs}
    cosines = {p: r.worst_cosine() for p, r in reports.items()}
    evidence = {p: r.evidence.short() for p, r in reports.items()}
    smoke = SmokeReport.read(ctx.input(SMOKE)) if "smoke" in ctx.inputs else None
    target = candidates.target_of(bench, smoke)
    found = candidates.gather(bench, cosines, smoke, evidence)
    speed = GenerationBench.read(ctx.input(GENERATION_SPEED)) if GENERATION_SPEED in ctx.inputs else None
    generating = candidates.generating(speed, cosines, smoke, evidence)
    _enough(params, found, generating)
    decisions = [
        selection.decide(generating if _generation(o) else found, o, params.min_gain, target.server)
        for o in params.objectives
    ]
    found = found + generating
    chosen = selection.record(decisions, found, target.text)
    ctx.record("selection", {d.objective.name: d.winner_label() for d in decisions})
    ctx.record("target", target.text)
    ctx.record("timings", {d.objective.name: d.withheld or "decided" for d in decisions})
    if withheld := output.withheld_warning(decisions):
        ctx.partial(withheld.rstrip(": "))
    ctx.headline(output.headline(decisions, target, ctx.config.repository))
    output.report(ctx, decisions, found, target)
    ctx.conclusion(conclusion(decisions, target, ctx.config.repository))
    chart(decisions, ctx.output(CHART))
    unmet = [d.objective.name for d in decisions if d.winner is None]
    ctx.output(DEPLOYMENT).mkdir()  # empty without a repository: nothing to serve
    if not unmet and "repository" in ctx.inputs:
        chosen = replace(chosen, served=_deployment(ctx, decisions))
    ctx.output(SELECTION).write_text(json.dumps(chosen.to_json(), indent=1))
    if unmet:
        _refuse(unmet, decisions, target)


def _generation(objective: Objective) -> bool:
    return isinstance(objective.metric, GenerationMetric)


def _enough(params: SelectParams, found: list[Candidate], generating: list[Candidate]) -> None:
    """Something measured for every kind of objective asked for."""
    if any(not _generation(o) for o in params.objectives) and not any(c.rows or c.served for c in found):
        raise StageFailed("select: the bench stage measured no in-process runtime to choose from")
    if any(_generation(o) for o in params.objectives) and not generating:
        raise StageFailed(
            "select: a ttft / tokens_per_s objective needs bench's generation rows: a decoder (model.decoder) "
            "and triton in bench.runtimes"
        )


def check(params: SelectParams, config: DeployConfig) -> list[Issue]:
    """A generation objective needs generate models: a decoder config."""
    if config.model.decoder is not None:
        return []
    return [
        Issue(
            f"stages.select.objectives[{i}].metric",
            f"{o.metric} is a decoder's metric: this config has no model.decoder",
        )
        for i, o in enumerate(params.objectives)
        if _generation(o)
    ]


def _refuse(unmet: list[str], decisions: list[selection.Decision], target: Any) -> None:
    """No pick: a verdict (exit 1) where the rows could judge, none (Contended, exit 8)
    where a candidate was set aside for its timing."""
    aside = [e for d in decisions if d.objective.name in unmet for e in d.set_aside]
    if aside:
        raise Contended(
            f"select: no candidate is known to meet the constraints of {output.quoted(unmet)}; "
            f"these could not be judged: {'; '.join(f'{e.candidate.label} ({e.reason})' for e in aside)}; "
            "rerun on a quiet machine (`deploy run --wait-quiet SECONDS`)"
        )
    raise StageFailed(_unmet_message(unmet, decisions, target))


def _unmet_message(unmet: list[str], decisions: list[selection.Decision], target: Any) -> str:
    unverified = {e.candidate.label for d in decisions for e in d.entries if e.verdict is Verdict.UNVERIFIED}
    why = f" ({len(unverified)} candidate(s) unverified on {target.text})" if unverified else ""
    return (
        f"select: no candidate meets the constraints of {output.quoted(unmet)}{why}; every verdict is in the "
        "run report's selection tables"
    )


def _deployment(ctx: StageContext, decisions: list[selection.Decision]) -> dict[str, list[str]]:
    """Writes `deployment`: the repository's models serving each objective's pick, as
    they are (same files, so smoke's and bench's verdicts on them hold)."""
    source = ctx.input(REPOSITORY)
    present = {p.name for p in source.iterdir() if p.is_dir()}
    serves = partial(_served, ctx.config.name, present)
    picks = {d.objective.name: _serving_pick(d, serves, sorted(present)) for d in decisions}
    target = ctx.output(DEPLOYMENT)
    for model in dict.fromkeys(m for pick in picks.values() for m in serves(pick.candidate)):
        shutil.copytree(source / model, target / model, copy_function=_link)
    rows = [
        [name, p.candidate.label, ", ".join(serves(p.candidate)), _why(d, p)]
        for d, (name, p) in zip(decisions, picks.items())
    ]
    ctx.report_table(
        "Models serving the selection (what triton_config.publish: selected publishes)",
        ["objective", "candidate", "models", "note"],
        rows,
    )
    return {name: serves(p.candidate) for name, p in picks.items()}


def _served(name: str, present: set[str], c: selection.Candidate) -> list[str]:
    """The models serving candidate `c` (the one smoke verified, where the target is a
    server), with their ensembles and the pre / post models those run
    (triton_config.preprocess), so the published service is the chosen one."""
    if c.model:
        models = [c.model] if c.model in present else []
    else:
        formats = CATALOG[c.runtime].served_as
        models = [m for m in (model_name(name, fmt, c.precision) for fmt in formats) if m in present]
    services = [e for m in models if (e := service_name(m, Role.ENSEMBLE)) in present]
    parts = [p for r in (Role.PRE, Role.POST) if services and (p := service_name(name, r)) in present]
    return models + services + parts


def _serving_pick(
    d: selection.Decision, serves: Callable[[selection.Candidate], list[str]], present: list[str]
) -> selection.Standing:
    pick = selection.served_pick(d, serves)
    if pick is None:
        raise StageFailed(
            f"select: the repository serves no contender of '{d.objective.name}' (it holds {present}); "
            "add the format to triton_config.formats / precisions, or publish: all"
        )
    return pick


def _why(d: selection.Decision, pick: selection.Standing) -> str:
    if pick is d.winner and pick.candidate.model:
        return "the model the target server loaded and smoke verified"
    if pick is d.winner:
        return "every model of the repository that serves this runtime's file (no server verified them)"
    if d.withheld:
        return (
            f"{d.winner_label()} has no Triton model here; with no speed verdict, the first FP32 one served"
        )
    return f"{d.winner_label()} has no Triton model here; the best one served"


def _link(src: str, dst: str) -> None:
    """Hard links where the cache's file system allows (the files are read-only objects)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


SPEC = StageSpec(
    phase=Phase.MEASURE,
    name="select",
    version=10,  # 10: a timing constraint met on a flagged row is not judged either; beside a kept reference the others keep their flag; 9: a decoder's generate models chosen by ttft / tokens_per_s (selection.json schema 4); 8: contended and implausible rows set aside like unstable ones; all flagged: no speed verdict, the FP32 reference kept (selection.json schema 3); 7: no verdict on noise (unstable rows), like-with-like ratios; 6: OpenVINO INT8 judged by its own accuracy report; 5: the verdict the report opens with; 4: decides for the server smoke verified (selection.json schema 2)
    params=SelectParams,
    inputs=("results", *ACCURACY_REPORTS, "repository", "smoke", "generation_speed"),
    outputs=(
        Artifact("selection", filename="selection.json"),
        Artifact("chart", filename="select.png"),
        Artifact("deployment", ArtifactKind.TREE, publish=Publish.REPOSITORY),
    ),
    run=run,
    env=("matplotlib",),
    if_configured=frozenset({*ACCURACY_REPORTS, "repository", "smoke", "generation_speed"}),
    publishes=when_selected,
    check=check,
    description="picks the best (format, precision) per objective from bench rows and accuracy gates; status table",
    timeout_s=600,
)
