"""What select weighs, and the target its decision holds for.

With a smoke stage in the config the target is the server smoke ran: every model of the
repository is a candidate under its own name, verified when smoke passed it on that server
(a model the server could not load is unverified, with smoke's reason), and timed end to
end where bench measured it through Triton. A runtime no served model stands for (eager
PyTorch, a format triton_config did not write) is unverified on that target too. Without a
smoke stage the target is the runtimes in a process on this host, and the candidates are
bench's in-process rows, as measured. Stdlib and the shared records only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from deploy.domain.vocabulary import Precision
from deploy.runtimes.catalog import CATALOG, IN_PROCESS, serving
from deploy.runtimes.plugin import RuntimePlugin
from deploy.runtimes.record import BenchResults, BenchRow
from deploy.serving.generation_perf import GenerationBench
from deploy.serving.smoke_report import ModelResult, ModelStatus, SmokeReport
from deploy.stages.select.selection import Candidate

MODEL_ROLE = "model"  # serving.service.Role.MODEL: a served model, not a pre/post step or ensemble


@dataclass(frozen=True)
class Target:
    """Where the decision holds: a server smoke verified, or in-process runtimes."""

    text: str
    server: bool


def target_of(bench: BenchResults, smoke: SmokeReport | None) -> Target:
    host = f"{bench.host.get('host_cpu') or 'this host'}, {bench.host.get('host_cores') or '?'} cores"
    if smoke is None or smoke.server is None:
        return Target(
            f"in-process runtimes on {host} (no server: add the smoke stage to decide for Triton)", False
        )
    info = smoke.server
    backends = f"backends {', '.join(info.backends)}" if info.backends is not None else "backends unknown"
    return Target(f"tritonserver {info.version or '?'} ({info.kind} server, {backends}) on {host}", True)


def gather(
    bench: BenchResults,
    cosines: Mapping[str, float | None],
    smoke: SmokeReport | None,
    evidence: Mapping[str, str] | None = None,
) -> list[Candidate]:
    """Served models first (with a smoke report), then every in-process runtime measured.
    `cosines` / `evidence`: per accuracy report (the catalog's `accuracy` artifact), the
    worst cosine to FP32 and, where the data was not real, what it was."""
    said = evidence or {}
    plain = [replace(c, evidence=said.get(_report(c.runtime), "")) for c in _in_process(bench, cosines)]
    if smoke is None:
        return plain
    served = [
        replace(c, evidence=said.get(_report(c.runtime), ""))
        for name, r in smoke.models.items()
        if r.role == MODEL_ROLE
        for c in [_served(name, bench, cosines, smoke)]
    ]
    standing = {c.runtime for c in served}
    return served + [_unserved(c) for c in plain if c.runtime not in standing]


def generating(
    speed: GenerationBench | None,
    cosines: Mapping[str, float | None],
    smoke: SmokeReport | None,
    evidence: Mapping[str, str],
) -> list[Candidate]:
    """A decoder's served generate models, each with its generation rows; verified where
    smoke passed it (a step's reduced precision carries its decoder gate's accuracy)."""
    if speed is None:
        return []
    names = sorted({r.subject for r in speed.rows if r.where == "served"})
    return [_generating(n, speed, cosines, smoke, evidence) for n in names]


def _generating(
    name: str,
    speed: GenerationBench,
    cosines: Mapping[str, float | None],
    smoke: SmokeReport | None,
    evidence: Mapping[str, str],
) -> Candidate:
    rows = tuple(r for r in speed.rows if r.subject == name)
    deploys = serving(rows[0].format, rows[0].precision)
    if deploys is None:
        raise ValueError(f"{name}: no runtime runs what a {rows[0].format} {rows[0].precision} model serves")
    result = smoke.models.get(name) if smoke is not None else None
    unverified = (
        "" if smoke is None else ("smoke did not check it" if result is None else _verdict_of(result))
    )
    report = _report(deploys.name)
    return Candidate(
        deploys.name, deploys.family, _precision(deploys), cosines.get(report), model=name,
        unverified=unverified, evidence=evidence.get(report, ""), generation=rows,
    )  # fmt: skip


def _verdict_of(result: ModelResult) -> str:
    return "" if result.status is ModelStatus.PASSED else _why_unverified(result)


def _in_process(bench: BenchResults, cosines: Mapping[str, float | None]) -> list[Candidate]:
    found = []
    for runtime in IN_PROCESS:
        deploys = CATALOG[runtime]
        rows = _rows_of(bench.rows, runtime)
        if rows or runtime in bench.skipped:
            cosine = cosines.get(_report(runtime))
            reason = bench.skipped.get(runtime, "")
            found.append(Candidate(runtime, deploys.family, _precision(deploys), cosine, rows, reason))
    return found


def _precision(deploys: RuntimePlugin) -> Precision:
    if deploys.precision is None:  # only Triton's rows: they take the served model's
        raise ValueError(f"{deploys.artifact}: an in-process runtime has its own precision")
    return deploys.precision


def _report(runtime: str) -> str:
    return CATALOG[runtime].accuracy or ""


def _rows_of(rows: list[BenchRow], runtime: str) -> dict[int, BenchRow]:
    return {r.batch: r for r in rows if r.runtime == runtime and r.single_stream}


def _served(
    name: str, bench: BenchResults, cosines: Mapping[str, float | None], smoke: SmokeReport
) -> Candidate:
    result = smoke.models[name]
    deploys = serving(result.format, result.precision)
    if deploys is None:
        raise ValueError(f"{name}: no runtime runs what a {result.format} {result.precision} model serves")
    runtime = deploys.name
    server_rows = tuple(r for r in bench.rows if r.model == name and r.request_rate is None)
    verdict = "" if result.status is ModelStatus.PASSED else _why_unverified(result)
    return Candidate(
        runtime,
        deploys.family,
        _precision(deploys),
        cosines.get(_report(runtime)),
        _rows_of(bench.rows, runtime),
        bench.skipped.get(runtime, ""),
        model=name,
        served=server_rows,
        unverified=verdict,
    )


def _why_unverified(result: ModelResult) -> str:
    if result.status is ModelStatus.SKIPPED:
        return f"the server did not load it: {result.reason}"
    return f"smoke failed on it: {'; '.join(result.problems) or result.reason}"


def _unserved(c: Candidate) -> Candidate:
    if CATALOG[c.runtime].baseline:
        why = "eager PyTorch is not a Triton model format"
    elif not CATALOG[c.runtime].served_as:
        why = (
            f"no Triton model format of deploy serves {c.format} {c.precision} yet: measured in process only"
        )
    else:
        why = f"no model of the repository serves it (stages.triton_config.formats / precisions: {c.format} {c.precision})"
    return replace(c, unverified=why)
