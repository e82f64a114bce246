"""smoke: the generated repository on a real tritonserver.

Starts (or reaches) a server, loads every model whose backend the server has, checks
each model's metadata against the shape spec, sends the golden inputs over HTTP and
gRPC at the min / opt / max batches and compares the answers with the eager reference,
and with dynamic batching confirms from Triton's statistics that requests were batched.
Models whose backend the server lacks are reported skipped, with that reason.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from deploy.domain.artifacts import GOLDEN, REPORT, REPOSITORY, SERVER_LOG, SMOKE
from deploy.domain.issues import Issue
from deploy.gates.tolerance import Tolerance
from deploy.pipeline.errors import StageFailed
from deploy.pipeline.graph.contract import SOURCE_ARTIFACT, Artifact, Phase, Section, StageContext, StageSpec
from deploy.serving import smoke_report
from deploy.serving.model_state import LoadState
from deploy.serving.publishing import PublishPolicy, candidate_url, published_url, publishing, triton_url
from deploy.serving.repository import Model
from deploy.serving.server_spec import ServerKind, ServerSpec, identity
from deploy.serving.service import Role
from deploy.serving.smoke_report import ModelResult, ModelStatus
from deploy.spec.config import DeployConfig
from deploy.stages.smoke.params import SmokeParams, Source

if TYPE_CHECKING:
    from deploy.gates.references import Golden
    from deploy.serving.launch import Chooser, Served
    from deploy.serving.tritonserver import Server


def check(params: SmokeParams, config: DeployConfig) -> list[Issue]:
    """The published copy holds every model only when it exists and the whole repository is published."""
    if params.source != Source.PUBLISHED:
        return []
    where = "stages.smoke.source"
    if published_url(config) is None:
        return [Issue(where, "'published' needs triton_config.publish_to (an s3://, gs:// or az:// URL)")]
    if publishing(config).policy is not PublishPolicy.ALL:
        return [Issue(where, "'published' needs triton_config.publish: all (selected publishes after smoke)")]
    if params.server.kind not in (ServerKind.AUTO, ServerKind.BINARY):
        return [Issue(where, "'published' needs a server this process starts (kind auto or binary)")]
    return []


def run(ctx: StageContext, params: SmokeParams) -> None:
    from deploy.gates import references
    from deploy.serving.launch import serve_repository

    golden = references.load(ctx.input(GOLDEN))
    scratch = ctx.workdir / "server"  # backends dir, server log: not outputs
    scratch.mkdir()
    report = smoke_report.SmokeReport()
    server = None
    candidate = _candidate(ctx) if params.source == Source.PUBLISHED else None
    try:
        _refuse_incomplete(candidate, ctx.config.name)
        with serve_repository(
            _server_spec(params.server, ctx.input(REPOSITORY)),
            ctx.input(REPOSITORY),
            scratch,
            _choose(report),
            remote=triton_url(candidate) if candidate else None,
            idle_at_end=True,
        ) as served:
            server = served.server
            report.server = _server_info(server, params)
            report.models.update(_check_all(served, ctx, params, golden))
    finally:
        _finish(ctx, report, server, params.tolerance)
        if candidate:
            _remove(candidate)
    _verdict(report, server, params.require)


def _candidate(ctx: StageContext) -> str:
    """The candidate copied beside publish_to on its object storage, for the server to read
    as production will (serving/publishing.candidate_url); publish_to is left alone."""
    from deploy.pipeline.errors import EnvError
    from deploy.pipeline.publish.candidate import copy_tree

    remote = candidate_url(str(publishing(ctx.config).remote))
    try:
        copy_tree(ctx.input(REPOSITORY), remote, ctx.config.name)
    except Exception as exc:  # every storage backend has its own errors; all mean the same here
        raise EnvError(f"copying the candidate to {remote} failed: {type(exc).__name__}: {exc}") from exc
    ctx.log.info("the candidate copied to %s for the server to read", remote)
    return remote


def _remove(remote: str) -> None:
    from deploy.pipeline.publish.tree import destination

    where = destination(remote)
    if where.fs.exists(where.root):
        where.fs.rm(where.root, recursive=True)


def _refuse_incomplete(remote: str | None, name: str) -> None:
    """The published copy (`publish_to` as written, not Triton's form of it) is what the
    server reads: it must hold the pipeline whole, every file by its digest (the cache's own
    tree is verified by its digests)."""
    if remote is None:
        return
    from deploy.pipeline.publish.published_check import altered
    from deploy.pipeline.publish.readback import complete

    missing = complete(remote, name) or [a.text() for a in altered(remote, name, None)]
    if missing:
        raise StageFailed(f"{remote} does not hold '{name}' as published: {'; '.join(missing[:8])}")


def _server_spec(spec: ServerSpec, repository: Path) -> ServerSpec:
    """At --log-verbose 1 Triton logs each warm-up sample it runs: raised when a model of
    the repository has warm-ups, so the check can see them."""
    warms = any("model_warmup" in p.read_text() for p in repository.glob("*/config.pbtxt"))
    return spec.model_copy(update={"log_verbose": max(spec.log_verbose, 1)}) if warms else spec


def _choose(report: smoke_report.SmokeReport) -> Chooser:
    """Loads what the server can; records the rest in the report as skipped."""
    from deploy.serving.launch import loadable_models

    def choose(found: dict[str, Model], backends: Callable[[], set[str] | None]) -> list[str]:
        from deploy.serving.repository import missing_backend

        names = loadable_models(found, backends)
        have = backends() if len(names) < len(found) else None
        for model in (m for m in found if m not in names):
            backend, reason = missing_backend(model, found, have)
            report.models[model] = replace(ModelResult.skipped(found[model], reason), backend=backend)
        return names

    return choose


def _server_info(server: Server, params: SmokeParams) -> smoke_report.ServerInfo:
    import tritonclient.http as httpclient

    meta = httpclient.InferenceServerClient(server.http).get_server_metadata()
    backends = sorted(server.backends) if server.backends is not None else None
    kind = params.server.kind.value
    return smoke_report.ServerInfo(
        kind, meta.get("version"), server.http, server.grpc, backends, list(server.notes)
    )


def _check_all(
    served: Served, ctx: StageContext, params: SmokeParams, golden: Golden
) -> dict[str, ModelResult]:
    # The checks import numpy, tritonclient (and torch, PIL for services) when they run,
    # not at discovery, which every `deploy` command pays.
    from deploy.stages.smoke import ensemble_check, generate_check, model_check
    from deploy.stages.smoke.service_reference import References

    results = {}
    refs = References(ctx)  # the services' references, each computed once
    for index, (name, state) in enumerate(served.states.items()):
        ctx.progress(index, len(served.states), name)
        model = served.found[name]
        if not state.ready:
            results[name] = _unavailable(state, model, params)
        elif model.role is Role.ENSEMBLE:
            results[name] = ensemble_check.check_ensemble(served, name, refs, params)
        elif model.role is Role.GENERATE:
            results[name] = generate_check.check_generate(served.server, name, model, ctx, params)
        elif model.role is Role.MODEL:
            results[name] = model_check.check_model(
                served.server, name, model, ctx, params, _sent(ctx, params, golden)
            )
    return results | ensemble_check.parts(served, results)


def _sent(ctx: StageContext, params: SmokeParams, golden: Golden) -> Golden:
    """The cases any protocol sends: the only ones a reduced-precision model's local
    reference is computed for."""
    from deploy.stages.smoke.model_check import cases_sent

    validated = REPORT in ctx.inputs
    sent = [cases_sent(golden, params.golden_cases, validated, i) for i in range(len(params.protocols))]
    return {label: case for label, case in golden.items() if any(label in s for s in sent)}


def _unavailable(state: LoadState, model: Model, params: SmokeParams) -> ModelResult:
    reason = state.reason
    # A server we did not configure (URL, image) reports a missing backend only on load.
    if not params.server.kind.backends_known and "backend" in reason and "not found" in reason.lower():
        return ModelResult.skipped(model, reason)
    return ModelResult.failed(model, f"{state.state.value}: {reason}")


def _finish(
    ctx: StageContext, report: smoke_report.SmokeReport, server: Server | None, tol: Tolerance
) -> None:
    models = report.models
    data = report.to_json()
    ctx.record("smoke", data)
    ctx.headline(_headline(models, tol))
    note = smoke_report.partial(models)
    if note:
        ctx.partial(note)
        skipped = smoke_report.of(models, smoke_report.ModelStatus.SKIPPED)
        ctx.unchecked({m: r.reason for m, r in skipped.items()})
    from deploy.stages.smoke import ensemble_check

    _report_table(ctx, models, report.server, tol)
    ensemble_check.answers_table(ctx, models)
    if server is not None and server.log_path.exists():
        ctx.log.info("server log:\n%s", server.log_path.read_text(errors="replace"))
        shutil.copyfile(server.log_path, ctx.output(SERVER_LOG))
    ctx.output(SMOKE).write_text(json.dumps(data, indent=1))


def _verdict(report: smoke_report.SmokeReport, server: Server | None, require: tuple[str, ...]) -> None:
    models = report.models
    lines = [f"{m}: {'; '.join(r.problems)}" for m, r in smoke_report.of(models, ModelStatus.FAILED).items()]
    lines += smoke_report.required_problems(models, require)
    if not lines and not smoke_report.of(models, ModelStatus.PASSED):
        lines = [smoke_report.nothing_tested(models)]
    if lines:
        tail = server.log_tail(25) if server is not None else ""
        raise StageFailed(
            "Triton smoke test failed:\n  " + "\n  ".join(lines) + f"\nserver log tail:\n{tail}"
        )


def _headline(models: dict[str, ModelResult], tol: Tolerance) -> str:
    return "; ".join(
        f"{name}: skipped"
        if r.status is ModelStatus.SKIPPED
        else f"{name}: {r.status.value} ({_model_numbers(r, tol)})"
        for name, r in models.items()
    )


def _report_table(
    ctx: StageContext, models: dict[str, ModelResult], server: smoke_report.ServerInfo | None, tol: Tolerance
) -> None:
    rows = [
        [
            name,
            r.status.value,
            r.format,
            r.precision,
            r.reason or "; ".join(r.problems) or _model_numbers(r, tol),
        ]
        for name, r in models.items()
    ]
    version, kind = (server.version or "?", server.kind) if server is not None else ("?", "?")
    title = f"Triton smoke test (tritonserver {version}, {kind})"
    ctx.report_table(
        title, ["model", "status", "format", "precision", "parity (golden inputs) / reason"], rows
    )


def _model_numbers(result: ModelResult, tol: Tolerance) -> str:
    from deploy.gates.parity import headline
    from deploy.stages.smoke import ensemble_check

    if result.service is not None:
        traffic = f", {result.traffic.text()}" if result.traffic else ""
        return ensemble_check.numbers(result.service) + traffic
    if not result.protocols and result.reference:
        return result.reference  # a pre / post model: "checked through <ensemble>"
    numbers = [f"{p} {headline(t, tol)}" for p, t in result.protocols.items()] or ["no inference"]
    if result.traffic:
        numbers.append(result.traffic.text())
    return ", ".join(numbers)


SPEC = StageSpec(
    phase=Phase.SERVE,
    name="smoke",
    version=10,  # 10: a reduced-precision generate model held to its own file's loop in process; 9: a decoder's generate models, token-exact with eager; 8: golden_cases (auto: the shape spec's cases where validate is configured); 7: every golden case (sampled shapes, value edges), per-sample scalars, causes; 6: concurrent clients with their own requests (smoke.json schema 3)
    params=SmokeParams,
    # validate's report: read only where validate is configured (golden_cases: auto)
    inputs=("repository", "golden", "eager", "generations", SOURCE_ARTIFACT, REPORT),
    if_configured=frozenset({REPORT}),
    outputs=(Artifact("smoke", filename="smoke.json"), Artifact("server_log", filename="server.log")),
    run=run,
    uses=frozenset({Section.MODEL, Section.SHAPES}),
    env=(
        "tritonclient",
        "protobuf",
        "nvidia-pytriton",
        "onnxruntime",
        "numpy",
        "torch",
        "torchvision",
        "tokenizers",
        "pillow",
        "safetensors",
        "scikit-learn",
    ),
    identity=lambda params: identity(params.server),
    check=check,
    verifies=frozenset({"repository"}),  # published only after smoke passed on it
    description="real tritonserver: metadata, HTTP + gRPC parity at every golden case, concurrent clients' own answers",
    timeout_s=1800,
)
