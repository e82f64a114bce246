"""bench: every format the pipeline produced, side by side, timed like trtexec
(runtimes/harness.py) per batch size: eager PyTorch (the baseline), TorchScript, ONNX
Runtime FP32 / INT8 / FP16, a TensorRT engine when one was built, and Triton end to end
(a perf_analyzer-style concurrency sweep and, where asked, an open-loop request-rate
sweep, serving/perf.py). On `device: cuda` the
PyTorch and TensorRT rows also split each call into H2D, GPU compute and D2H.

Writes JSON, a Markdown table and a PNG plot; an optional regression gate fails the stage
with the numbers. The key includes the host (CPU model, core count, GPU), so results never
leak across machines; `--force bench` remeasures.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from deploy.domain.artifacts import PLOT, REPOSITORY, RESULTS, TABLE
from deploy.domain.issues import Issue
from deploy.pipeline.errors import EnvError, StageFailed, first_line
from deploy.pipeline.graph.contract import SOURCE_ARTIFACT, Artifact, Phase, Section, StageContext, StageSpec
from deploy.runtimes.base import Device
from deploy.runtimes.catalog import CATALOG, SERVED, artifact_of, get
from deploy.runtimes.contention import Fit
from deploy.runtimes.devices import host_identity
from deploy.runtimes.harness import Settings, report_lines
from deploy.runtimes.pacing import Pace
from deploy.runtimes.record import BenchResults, BenchRow
from deploy.serving.repository import Model
from deploy.serving.server_spec import identity as server_identity
from deploy.serving.service import Role
from deploy.spec.config import DeployConfig
from deploy.stages.bench import generation, machine, output, plot
from deploy.stages.bench.params import BenchParams, TritonBench

# Above this share of late sends a request-rate row is flagged (log, table).
LATE_WARNING = 0.05
# How a runtime that failed while measured is listed among the skipped (beside "no engine: …").
FAILED = "failed: "


def identity(params: BenchParams) -> Mapping[str, object]:
    served = server_identity(params.triton.server) if SERVED in params.runtimes else {}
    return {**host_identity(), **served}


def batch_sizes(params: BenchParams, ctx: StageContext) -> list[int]:
    return _batches(params, ctx.config)


def _batches(params: BenchParams, config: DeployConfig) -> list[int]:
    if params.batches:
        return list(params.batches)
    batch = config.batch_range()
    return sorted(set(batch)) if batch else [1]


def check(params: BenchParams, config: DeployConfig) -> list[Issue]:
    """A gate key naming a runtime or batch this config never measures is a typo: found
    now, not as a gate failure after every cell has been timed."""
    gate, batches = params.gate, _batches(params, config)
    fields = {
        "max_latency_ms": gate.max_latency_ms,
        "min_items_per_s": gate.min_items_per_s,
        "min_speedup_vs_eager": gate.min_speedup_vs_eager,
    }
    return [
        Issue(f"stages.bench.gate.{name}", problem)
        for name, limits in fields.items()
        for key in limits
        if (problem := _gate_key_problem(key, params.runtimes, batches))
    ]


def host(params: BenchParams, config: DeployConfig) -> list[Issue]:
    """The runtimes this install cannot run on bench.device: bench skips them, saying why."""
    del config
    return [
        Issue("stages.bench.runtimes", f"{runtime}: {reason}; bench skips it")
        for runtime in params.runtimes
        if (reason := _unavailable(runtime, params))
    ]


def _unavailable(runtime: str, params: BenchParams) -> str | None:
    plugin = get(runtime)
    return plugin.reason_unavailable(plugin.on(Device(params.device)))


def _gate_key_problem(key: str, runtimes: tuple[str, ...], batches: list[int]) -> str | None:
    runtime, _, cell = key.partition("@")
    served, colon, _ = runtime.partition(":")
    if colon and served == SERVED:  # triton:MODEL@batch/cN: its models are known only once the repository is
        return (
            None
            if SERVED in runtimes
            else f"key '{key}': '{SERVED}' is not in stages.bench.runtimes {list(runtimes)}"
        )
    if runtime not in runtimes:
        return f"key '{key}': runtime '{runtime}' is not in stages.bench.runtimes {list(runtimes)}"
    if cell and not (cell.isdigit() and int(cell) in batches):
        return f"key '{key}': batch '{cell}' is not one of the measured batches {batches}"
    return None


def run(ctx: StageContext, params: BenchParams) -> None:
    from deploy.runtimes import plausibility

    machine.settle(ctx, params.wait_quiet_s)
    fit = machine.fit(ctx, params.threads)
    settings = params.settings()
    rows: list[BenchRow] = []
    skipped: dict[str, str] = {}
    batches = batch_sizes(params, ctx)
    for index, runtime in enumerate(params.runtimes):
        ctx.progress(index, len(params.runtimes), str(runtime))
        artifact = artifact_of(runtime)
        if artifact != SOURCE_ARTIFACT and artifact not in ctx.inputs:
            skipped[runtime] = f"no {artifact}: its stage was skipped or is not configured"
        elif reason := _unavailable(runtime, params):
            skipped[runtime] = reason
        else:
            rows += _measured(ctx, params, Cells(settings, fit, batches), runtime, skipped)
    generated = generation.measure(ctx, params)
    ctx.progress(len(params.runtimes), len(params.runtimes), "done")
    failed = _failures(rows, skipped, bool(generated))
    rows = output.speedups(plausibility.checked(rows))
    result = BenchResults(rows, skipped, host_identity(), params.model_dump(mode="json", exclude={"gate"}))
    ctx.output(RESULTS).write_text(json.dumps(result.to_json(), indent=1))
    ctx.output(TABLE).write_text(output.markdown(rows, params.percentiles))
    plot.plot(rows, ctx.output(PLOT))
    ctx.record("bench", [r.to_json() for r in rows])
    ctx.headline(
        plausibility.verdict_lead(rows) + output.headline(rows, skipped) + generation.headline(generated)
    )
    generation.report(ctx, generated, params.generation.new_tokens)
    output.report(ctx, rows, skipped, params.percentiles)
    output.gate(rows, params.gate)
    flagged = sum(1 for r in rows if r.flagged)
    shaky = (
        f"{flagged} rows contended or implausible: shown, no verdict on them (rerun quiet)" if flagged else ""
    )
    # A busy machine's timing, or a failure, may not recur: `--wait-quiet` runs it again.
    again = bool(failed) or any(r.contended for r in rows)
    if again:
        ctx.provisional("contended rows or a failed runtime")
    redo = "`deploy run --wait-quiet SECONDS` measures again" * again
    if partly := "; ".join(n for n in (failed, shaky, redo) if n):
        ctx.partial(partly)
    generation.refuse_wrong(generated)


def _failures(rows: list[BenchRow], skipped: dict[str, str], generated: bool) -> str:
    """Runtimes that failed make the stage partial beside measured rows, which are kept
    (select weighs them); with nothing measured at all, the stage fails with their reasons,
    and where every runtime was skipped (another device, no artifact), with those."""
    failed = {r: why.removeprefix(FAILED) for r, why in skipped.items() if why.startswith(FAILED)}
    if failed and not rows:
        raise StageFailed("; ".join(f"{runtime}: {why}" for runtime, why in failed.items()))
    if not rows and not generated:
        raise StageFailed("nothing was measured: " + "; ".join(f"{r}: {why}" for r, why in skipped.items()))
    return f"{', '.join(failed)} failed (the stage log has why); every other row is kept" if failed else ""


@dataclass(frozen=True)
class Cells:
    """How every cell is timed: the harness's settings, the threads policy, the batches."""

    settings: Settings
    fit: Fit
    batches: list[int]


def _measured(
    ctx: StageContext, params: BenchParams, timing: Cells, runtime: str, skipped: dict[str, str]
) -> list[BenchRow]:
    """The runtime's rows; when it fails to load or run, the error goes to `skipped` (the
    stage is then partial) and the rows it measured before, like every other runtime's,
    are kept."""
    rows: list[BenchRow] = []
    try:
        if not get(runtime).in_process:
            return _triton_rows(ctx, params, timing.settings)
        for batch in timing.batches:
            rows.append(_in_process(ctx, params, timing, runtime, batch))
        for batch in timing.batches if _hints(params, runtime) else ():
            rows.append(_hinted(ctx, params, timing, runtime, batch))
    except (StageFailed, EnvError) as exc:  # the runtime's own words: a missing provider, no server
        ctx.log.error("%s failed: %s", runtime, exc)
        skipped[runtime] = f"{FAILED}{first_line(exc)}"
    except Exception as exc:  # a library's error while loading or running: its traceback to the log
        ctx.log.exception("%s failed", runtime)
        skipped[runtime] = f"{FAILED}{type(exc).__name__}: {first_line(exc)}"
    return rows


def _in_process(ctx: StageContext, params: BenchParams, timing: Cells, runtime: str, batch: int) -> BenchRow:
    from deploy.runtimes import harness
    from deploy.runtimes.arrays import opt_inputs

    settings, feeds = timing.settings, opt_inputs(ctx.config, batch)
    plugin = get(runtime)
    assert plugin.bench is not None, f"{runtime} has no bench hook"
    device = plugin.on(Device(params.device))
    timed = plugin.bench(ctx, feeds, device, timing.fit.threads)
    measured = harness.measure(timed.call, settings, timing.fit)
    row = BenchRow.of(harness.summarize(measured, batch, settings), runtime, device.value)
    if timed.phases is not None:
        row = replace(row, gpu=harness.phase_summary(timed.phases[-len(measured.latencies_ms) :], settings))
    probe = partial(plugin.bench, ctx, feeds, device)  # the call with n threads
    row = replace(row, one_thread_ms=machine.one_thread(probe, batch == min(timing.batches), timing.fit))
    ctx.log.info("\n".join(report_lines(runtime, row, settings)))
    return row


def _hints(params: BenchParams, runtime: str) -> bool:
    return params.openvino_throughput and get(runtime).throughput is not None


def _hinted(ctx: StageContext, params: BenchParams, timing: Cells, runtime: str, batch: int) -> BenchRow:
    """OpenVINO under its THROUGHPUT hint (the plugin's throughput hook)."""
    from deploy.runtimes import harness, streams
    from deploy.runtimes.arrays import opt_inputs

    settings, hook = timing.settings, get(runtime).throughput
    assert hook is not None, f"{runtime} has no throughput hook"
    loads, chosen = hook(ctx, opt_inputs(ctx.config, batch), timing.fit.threads)
    ctx.record(f"{runtime}_throughput_settings", chosen)
    measured, _ = streams.measure(loads, settings, fit=timing.fit)
    device = get(runtime).on(Device(params.device)).value
    row = BenchRow.of(harness.summarize(measured, batch, settings), runtime, device, len(loads))
    row = replace(row, hint="throughput")
    ctx.log.info("\n".join(report_lines(f"{runtime}, throughput hint {chosen}", row, settings)))
    return row


def _triton_rows(ctx: StageContext, params: BenchParams, settings: Settings) -> list[BenchRow]:
    from deploy.serving.launch import serve_repository
    from deploy.serving.repository import threads_implied

    scratch = ctx.workdir / "server"
    scratch.mkdir()
    rows = []
    with serve_repository(
        params.triton.server, ctx.input(REPOSITORY), scratch, _chooser(params.triton), idle_at_end=True
    ) as served:
        for name, state in served.states.items():
            if not state.ready:
                raise StageFailed(
                    f"Triton could not load {name}: {state.reason}\n{served.server.log_tail(15)}"
                )
            if served.found[name].role in (Role.PRE, Role.POST):
                continue  # timed inside their ensembles
            feeds = _feeds(ctx, served.found, name, params.triton.batch)
            threads = threads_implied(served.found, name)
            found = _served_rows(
                served.server.grpc, name, feeds, params.triton, settings, _saturation(params)
            )
            _say_saturated(ctx, name, found, params.triton.concurrency)
            for row in found:
                row = replace(row, served_threads=threads)
                rows.append(row)
                ctx.log.info("\n".join(report_lines(f"triton:{name}, load {row.load}", row, settings)))
                _warn_late(ctx, row)
        ctx.log.info("server log:\n%s", served.server.log_tail(200))
    return rows


def _say_saturated(ctx: StageContext, name: str, rows: list[BenchRow], levels: tuple[int, ...]) -> None:
    swept = [r.concurrency for r in rows if r.request_rate is None]
    if len(swept) < len(levels):
        left = list(levels[len(swept) :])
        ctx.log.info("triton:%s saturated at c%d: concurrency %s not measured", name, swept[-1], left)
        ctx.record(f"saturated_{name}", {"at": swept[-1], "not_measured": left})


def _saturation(params: BenchParams) -> float:
    """The sweep's stop, unless the regression gate names a served cell (it must be measured)."""
    gate = params.gate
    keys = [*gate.max_latency_ms, *gate.min_items_per_s, *gate.min_speedup_vs_eager]
    return 0.0 if any(k.startswith(f"{SERVED}:") for k in keys) else params.triton.saturation


def _feeds(ctx: StageContext, found: dict[str, Model], name: str, batch: int) -> list[Any]:
    """Tensors at the opt shape for a model; for an ensemble, what its clients send (a
    photo as JPEG bytes, or a sentence), so its row includes pre- and post-processing."""
    from deploy.serving.requests import opt_feeds
    from deploy.serving.service_client import service_feed

    if found[name].role is Role.ENSEMBLE:
        return [service_feed(found, name, batch)]
    return opt_feeds(ctx.config, found[name], batch)


def _served_rows(
    url: str, name: str, feeds: Any, bench: TritonBench, settings: Settings, saturation: float
) -> list[BenchRow]:
    from deploy.serving import perf

    rows = perf.sweep(url, name, feeds, bench.concurrency, settings, saturation)
    if bench.request_rate:
        pace = Pace(bench.request_rate[0], bench.request_distribution, bench.max_outstanding)
        rows += perf.rate_sweep(url, name, feeds, pace, bench.request_rate, settings)
    return rows


def _warn_late(ctx: StageContext, row: BenchRow) -> None:
    """An offered rate the client could not keep is not a measurement of that rate."""
    if row.late_share is not None and row.late_share > LATE_WARNING:
        ctx.log.warning(
            "%s at %g requests/s: %.0f %% of sends left late (max_outstanding reached or the client "
            "fell behind): the server was offered less than that rate",
            row.subject,
            row.request_rate,
            100 * row.late_share,
        )


def _chooser(bench: TritonBench) -> Callable[[dict[str, Model], Callable[[], set[str] | None]], list[str]]:
    return lambda found, backends: list(_triton_models(bench, found, backends))


def _triton_models(
    bench: TritonBench, found: dict[str, Model], backends: Callable[[], set[str] | None]
) -> dict[str, Model]:
    from deploy.serving.repository import loadable

    if bench.models is None:
        have = backends()
        # The models and their services (an ensemble brings its pre / post models along).
        names = [n for n in loadable(found, have) if found[n].role in (Role.MODEL, Role.ENSEMBLE)]
        names += [s for n in names for s in found[n].steps if s not in names]
        if not names:
            raise StageFailed(
                f"the server can load none of {sorted(found)} (its backends: {sorted(have or [])})"
            )
        return {n: found[n] for n in names}
    unknown = [m for m in bench.models if m not in found]
    if unknown:
        raise StageFailed(f"bench.triton.models: {unknown} not in the repository (it has {sorted(found)})")
    return {n: found[n] for n in bench.models}


def inputs_for(params: BenchParams) -> tuple[str, ...]:
    return tuple(dict.fromkeys(artifact_of(r) for r in params.runtimes))


SPEC = StageSpec(
    phase=Phase.MEASURE,
    name="bench",
    version=16,  # 16: the gate judges no flagged row; a contended or failed bench is not kept (provisional); 15: a bench that measured nothing fails, naming each runtime's reason; 14: a decoder's generate models timed served and in process (generation.json); 13: a concurrency sweep stops where the server saturated (triton.saturation); 12: the machine measured with every row (contended), threads fitted to the free cores, implausible rows flagged, no verdict on either; 11: a runtime that fails is skipped with its error (the rest kept, the stage partial), runtimes this install cannot run on bench.device skipped up front, OpenVINO rows say cpu; 10: served rows name their model in a field (bench.json schema 2); 9: speed-up vs eager on in-process rows only; 8: OpenVINO INT8 and throughput-hint rows, ONNX Runtime settings; 7: OpenVINO runtimes; 6: ensembles (services) timed end to end beside the bare models
    params=BenchParams,
    inputs=tuple(dict.fromkeys(p.artifact for p in CATALOG.values())),
    outputs=(
        Artifact("results", filename="bench.json"),
        Artifact("table", filename="bench.md"),
        Artifact("plot", filename="bench.png"),
        Artifact("generation_speed", filename="generation.json"),
    ),
    run=run,
    uses=frozenset({Section.MODEL, Section.SHAPES}),
    env=(
        "torch",
        "safetensors",
        "onnxruntime",
        "openvino",
        "numpy",
        "tritonclient",
        "protobuf",
        "nvidia-pytriton",
        "matplotlib",
        "pillow",
        "scikit-learn",
    ),
    identity=identity,
    check=check,
    host=host,
    select_inputs=inputs_for,
    # Formats whose stage may be skipped here (no TensorRT, no GPU): reported, not failed.
    optional_inputs=frozenset({"engine", "inductor", "inductor_fp16", "inductor_bf16"}),
    if_configured=frozenset({"torchscript"}),  # the torch.export path has no trace stage
    description="trtexec-style latency / throughput of every runtime per batch, Triton concurrency sweep; JSON, Markdown, PNG",
)
