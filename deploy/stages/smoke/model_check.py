"""The smoke stage's check of one served model: its metadata against the shape spec, the
golden inputs over every protocol against the reference, the production settings the
server must honour (warm-up, response cache), and concurrent clients with their own
requests (traffic.py). Imported when the stage runs: tritonclient and numpy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from deploy.domain.artifacts import EAGER, GOLDEN, REPORT
from deploy.domain.vocabulary import ModelSuffix, Precision, Protocol
from deploy.pipeline.graph.contract import StageContext
from deploy.serving.repository import Model
from deploy.serving.smoke_report import ModelResult, ModelStatus
from deploy.stages.smoke.params import GoldenCases, SmokeParams

if TYPE_CHECKING:
    from deploy.gates.detection_parity import Arrays, DetectionLayout
    from deploy.gates.parity_table import Table
    from deploy.gates.references import Answers, Case, Golden
    from deploy.serving.requests import Client
    from deploy.serving.smoke_report import Traffic
    from deploy.serving.tritonserver import Server
    from deploy.stages.smoke.checks import ModelEndpoint, Tensor


def check_model(
    server: Server, name: str, model: Model, ctx: StageContext, params: SmokeParams, golden: Golden
) -> ModelResult:
    """`params`: the smoke stage's; `golden`: the golden cases by label (those sent)."""
    return _check_model(server, name, model, ctx, params, _reference(model, golden, ctx))


# The shape spec's cases (golden's labels): the batch edges, and opt.
MIN, OPT, MAX = "min", "opt", "max"


def cases_sent(golden: Golden, cases: GoldenCases, validated: bool, index: int) -> Golden:
    """The golden cases the `index`-th protocol sends (GoldenCases)."""
    if cases is GoldenCases.ALL or (cases is GoldenCases.AUTO and not validated):
        return golden
    wanted = (MIN, MAX) if index == 0 else (MIN, OPT)
    return {label: case for label, case in golden.items() if label in wanted}


def _reference(model: Model, golden: Golden, ctx: StageContext) -> Golden:
    """FP32 models answer for the whole chain: compared with the eager reference. A
    reduced-precision model is compared with ONNX Runtime (or OpenVINO) running the very
    file served (serving parity); its accuracy against FP32 is its converting stage's gate."""
    found = _reference_cases(model, list(golden.values()), ctx)
    return dict(zip(golden, found))


def _reference_cases(model: Model, cases: list[Case], ctx: StageContext) -> list[Case]:
    """`cases` with the outputs the served model must give: eager's (FP32), or the local
    runtime's on the very file served (reduced precision)."""
    from deploy.runtimes.files import newest_model_file, runtime_for

    served = newest_model_file(model.directory)
    if model.precision == Precision.FP32 or served is None:
        return cases
    from deploy.gates.references import Case, infer_case

    local = runtime_for(served, ctx.config.output_names(), model.precision)
    return [Case(case.inputs, infer_case(local, f"case {i}", case)) for i, case in enumerate(cases)]


def reference_name(model: Model) -> str:
    """What a served model's answers are compared with, in words."""
    from deploy.runtimes.files import SUFFIXES, newest_model_file

    served = newest_model_file(model.directory)
    if model.precision == Precision.FP32 or served is None:
        return "eager PyTorch"
    return f"local {SUFFIXES[ModelSuffix(served.suffix)]} on the served {model.precision} file"


def _check_model(
    server: Server, name: str, model: Model, ctx: StageContext, params: SmokeParams, golden: Golden
) -> ModelResult:
    from deploy.gates import parity
    from deploy.gates.detection_parity import layout_of
    from deploy.stages.smoke import checks

    inputs, outputs = checks.expected(ctx.config, model.fmt, golden, model.batched)
    served = reference_name(model)
    result = ModelResult.of(model, ModelStatus.PASSED, reference=served)
    batch = ctx.config.batch_range()
    validated = REPORT in ctx.inputs
    for index, protocol in enumerate(params.protocols):
        conn = checks.client(server, protocol, params.request_timeout_s)
        meta, config = _describe(conn, protocol, name)
        problems = checks.metadata_problems(meta, inputs, outputs)
        problems += [p for p in [checks.batch_problem(config, batch[2] if batch else None)] if p]
        if problems:
            result.problems += [f"{protocol}: {p}" for p in problems]
            break
        max_batch = int(config.get("max_batch_size", 0))
        target = checks.ModelEndpoint(conn, protocol, name, max_batch)
        sent = cases_sent(golden, params.golden_cases, validated, index)
        table = _golden_parity(target, sent, inputs, outputs, params, layout_of(ctx.config))
        result.protocols[protocol] = table
        result.problems += [f"{protocol} {p}" for p in parity.failures(table, params.tolerance)[:12]]
        result.problems += _cause(table, params, ctx)
    result.problems += checks.warmup_problems(server, name, config)
    cached = bool(config.get("response_cache", {}).get("enable"))
    # The golden inputs went over every protocol: the repeats must have been cache hits.
    if cached and not result.problems and not checks.cache_hits(checks.client(server, "grpc", 30), name):
        result.problems.append(
            "response_cache is enabled but the repeated golden requests were no cache hits"
        )
    if not result.problems and params.batching_requests:
        result.traffic = _traffic(server, name, model, ctx, params, (inputs, outputs), config)
        result.problems += result.traffic.problems()
    result.status = ModelStatus.FAILED if result.problems else ModelStatus.PASSED
    return result


def _cause(table: Table, params: SmokeParams, ctx: StageContext) -> list[str]:
    """The measured cause of a failed golden parity (gates/diagnosis.py), as one problem."""
    from deploy.gates import diagnosis
    from deploy.gates.eager_record import EagerRecord

    if not diagnosis.failing(table):
        return []
    record = EagerRecord.read(ctx.input(EAGER)) if "eager" in ctx.inputs else None
    return [f"cause: {diagnosis.explain(table, params.tolerance, record).text()}"]


def _traffic(
    server: Server,
    name: str,
    model: Model,
    ctx: StageContext,
    params: SmokeParams,
    io: tuple[list[Tensor], list[Tensor]],
    config: Mapping[str, Any],
) -> Traffic:
    """Concurrent clients with their own requests (stages/smoke/traffic.py)."""
    from deploy.gates.detection_parity import layout_of
    from deploy.gates.references import load_clients
    from deploy.stages.smoke import checks, traffic

    cases = _reference_cases(model, load_clients(ctx.input(GOLDEN)), ctx)
    max_batch = int(config.get("max_batch_size", 0))

    def ask(conn: Client, protocol: str, request: int) -> Arrays:
        return checks.infer(checks.ModelEndpoint(conn, protocol, name, max_batch), cases[request], *io)

    load = traffic.plan(
        traffic.batch_sizes(cases), params.clients, params.batching_requests, params.protocols
    )
    judge = traffic.tensor_judge(cases, params.tolerance, layout_of(ctx.config))
    with traffic.reach(server, name, params.request_timeout_s) as clients:
        return traffic.run(clients, ask, judge, load, "dynamic_batching" in config)


def _describe(conn: Client, protocol: str, name: str) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """Triton's model metadata and config, as JSON (tritonclient's own shapes)."""
    if protocol == Protocol.GRPC:
        return conn.get_model_metadata(name, as_json=True), conn.get_model_config(name, as_json=True)[
            "config"
        ]
    return conn.get_model_metadata(name), conn.get_model_config(name)


def _golden_parity(
    target: ModelEndpoint,
    golden: Golden,
    inputs: list[Tensor],
    outputs: list[Tensor],
    params: SmokeParams,
    layout: DetectionLayout | None,
) -> Table:
    from tritonclient.utils import InferenceServerException

    from deploy.gates import parity
    from deploy.stages.smoke import checks

    results: Answers = {}
    for label, case in golden.items():
        try:
            results[label] = checks.infer(target, case, inputs, outputs)
        except InferenceServerException as exc:
            names = [o.spec_name for o in outputs]
            return parity.unanswered(golden, names, f"inference failed: {exc.message()}")
    return parity.compare(results, golden, params.tolerance, layout)
