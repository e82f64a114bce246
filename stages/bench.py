"""bench: every format the pipeline produced, side by side, timed like trtexec
(stages/_bench.py) per batch size: eager PyTorch (the baseline), TorchScript, ONNX
Runtime FP32 and INT8. Writes JSON, a Markdown table and a PNG plot; an optional
regression gate fails the stage with the numbers. The key includes the host (CPU model,
core count, GPU), so results never leak across machines; `--force bench` remeasures.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.errors import StageFailed
from pipeline.stage import SOURCE_ARTIFACT, Artifact, Section, StageContext, StageSpec

Runtime = Literal["eager", "torchscript", "onnxruntime", "onnxruntime_int8"]
ARTIFACT = {"eager": SOURCE_ARTIFACT, "torchscript": "torchscript", "onnxruntime": "onnx", "onnxruntime_int8": "onnx_int8"}


class RegressionGate(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    # Keys: "runtime@batch" or "runtime". Latency is the highest configured percentile.
    max_latency_ms: dict[str, float] = Field(default_factory=dict)
    min_items_per_s: dict[str, float] = Field(default_factory=dict)
    min_speedup_vs_eager: dict[str, float] = Field(default_factory=dict)  # runtime -> x, at every batch


class BenchParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    runtimes: tuple[Runtime, ...] = Field(("eager", "torchscript", "onnxruntime"), min_length=1)
    batches: tuple[int, ...] | None = None  # default: the shape spec's min / opt / max batch
    warmup_ms: float = Field(200, ge=0)
    duration_s: float = Field(3.0, ge=0)
    iterations: int = Field(10, ge=1)
    percentiles: tuple[float, ...] = (90.0, 95.0, 99.0)
    threads: int | None = Field(None, ge=1)
    gate: RegressionGate = RegressionGate()


def host_identity() -> dict[str, Any]:
    from stages.build import gpu_identity

    return {"host_cpu": _cpu_model(), "host_cores": os.cpu_count(), "host_gpu": gpu_identity()}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            return next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def batch_sizes(params: BenchParams, ctx: StageContext) -> list[int]:
    if params.batches:
        return list(params.batches)
    batch = ctx.config.batch_range()
    return sorted(set(batch)) if batch else [1]


def run(ctx: StageContext, params: BenchParams) -> None:
    from stages import _bench

    settings = _bench.Settings(params.warmup_ms, params.duration_s, params.iterations, params.percentiles)
    rows = []
    for runtime in params.runtimes:
        for batch in batch_sizes(params, ctx):
            call = _callable(runtime, ctx, batch, params.threads)
            summary = _bench.summarize(_bench.measure(call, settings), batch, settings)
            rows.append({"runtime": runtime, **summary})
            ctx.log.info("\n".join(_bench.report_lines(runtime, summary)))
    _speedups(rows)
    result = {"host": host_identity(), "settings": params.model_dump(exclude={"gate"}), "results": rows}
    ctx.output("results").write_text(json.dumps(result, indent=1))
    ctx.output("table").write_text(markdown(rows, params.percentiles))
    plot(rows, ctx.output("plot"))
    ctx.record("bench", rows)
    ctx.record("headline", _headline(rows))
    _gate(rows, params.gate)


def _callable(runtime: str, ctx: StageContext, batch: int, threads: int | None) -> Callable[[], Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    feeds = {s.name: _input(rng, s, batch) for s in ctx.config.inputs}
    if runtime.startswith("onnxruntime"):
        return _ort(ctx.input(ARTIFACT[runtime]), feeds, threads)
    return _torch(runtime, ctx, feeds, threads)


def _input(rng: Any, spec: Any, batch: int) -> Any:
    from stages._golden import random_input

    shape = (batch, *spec.opt[1:]) if spec.dims and isinstance(spec.dims[0], str) else spec.opt
    return random_input(spec, tuple(shape), rng)


def _ort(path: Any, feeds: dict[str, Any], threads: int | None) -> Callable[[], Any]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return lambda: sess.run(names, feeds)


def _torch(runtime: str, ctx: StageContext, feeds: dict[str, Any], threads: int | None) -> Callable[[], Any]:
    import torch

    from stages._torch import load_model

    if threads:
        torch.set_num_threads(threads)
    module = load_model(ctx.config.model) if runtime == "eager" else torch.jit.load(str(ctx.input("torchscript")))
    args = [torch.from_numpy(feeds[s.name]) for s in ctx.config.inputs]

    def call() -> Any:
        with torch.inference_mode():
            return module(*args)

    return call


def _speedups(rows: list[dict[str, Any]]) -> None:
    eager = {r["batch"]: r["median_ms"] for r in rows if r["runtime"] == "eager"}
    for row in rows:
        if row["batch"] in eager:
            row["speedup_vs_eager"] = eager[row["batch"]] / row["median_ms"]


def markdown(rows: list[dict[str, Any]], percentiles: tuple[float, ...]) -> str:
    pcols = [f"p{p:g}" for p in percentiles]
    head = ["runtime", "batch", "median ms", *[f"{c} ms" for c in pcols], "items/s", "× eager", "stable"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["runtime"], str(r["batch"]), f"{r['median_ms']:.3f}", *[f"{r['percentiles_ms'][c]:.3f}" for c in pcols],
                 f"{r['items_per_s']:.1f}", f"{r.get('speedup_vs_eager', float('nan')):.2f}", "yes" if r["stable"] else "no"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, thr) = plt.subplots(1, 2, figsize=(10, 4))
    for runtime in dict.fromkeys(r["runtime"] for r in rows):
        mine = [r for r in rows if r["runtime"] == runtime]
        batches = [r["batch"] for r in mine]
        (line,) = lat.plot(batches, [r["median_ms"] for r in mine], marker="o", label=f"{runtime} median")
        tail = list(mine[0]["percentiles_ms"])[-1]
        color = line.get_color()
        lat.plot(batches, [r["percentiles_ms"][tail] for r in mine], linestyle="--", color=color, alpha=0.6, label=f"{runtime} {tail}")
        thr.plot(batches, [r["items_per_s"] for r in mine], marker="o", color=color, label=runtime)
    lat.set(xlabel="batch", ylabel="latency (ms)", title="latency")
    thr.set(xlabel="batch", ylabel="items / s", title="throughput")
    lat.legend(fontsize=7)
    thr.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)


def _gate(rows: list[dict[str, Any]], gate: RegressionGate) -> None:
    bad = []
    for r in rows:
        key = f"{r['runtime']}@{r['batch']}"
        name = list(r["percentiles_ms"])[-1]
        limit = gate.max_latency_ms.get(key, gate.max_latency_ms.get(r["runtime"]))
        if limit is not None and r["percentiles_ms"][name] > limit:
            bad.append(f"{key}: {name} {r['percentiles_ms'][name]:.3f} ms > {limit} ms")
        floor = gate.min_items_per_s.get(key, gate.min_items_per_s.get(r["runtime"]))
        if floor is not None and r["items_per_s"] < floor:
            bad.append(f"{key}: {r['items_per_s']:.1f} items/s < {floor}")
        need = gate.min_speedup_vs_eager.get(r["runtime"])
        if need is not None and r.get("speedup_vs_eager", 0.0) < need:
            bad.append(f"{key}: {r.get('speedup_vs_eager', 0.0):.2f}x eager < {need}x")
    if bad:
        raise StageFailed("benchmark regression gate failed: " + "; ".join(bad))


def _headline(rows: list[dict[str, Any]]) -> str:
    best: dict[str, dict[str, Any]] = {}
    for r in rows:
        best.setdefault(r["runtime"], r)
    return ", ".join(f"{k} b{v['batch']} {v['median_ms']:.2f} ms" for k, v in best.items())


SPEC = StageSpec(
    name="bench",
    version=1,
    params=BenchParams,
    inputs=(SOURCE_ARTIFACT, "torchscript", "onnx"),
    outputs=(Artifact("results", filename="bench.json"), Artifact("table", filename="bench.md"), Artifact("plot", filename="bench.png")),
    run=run,
    uses=frozenset({Section.MODEL, Section.SHAPES}),
    env=("torch", "onnxruntime", "numpy"),
    identity=lambda params: host_identity(),
    select_inputs=lambda p: tuple(dict.fromkeys(ARTIFACT[r] for r in p.runtimes)),
    description="trtexec-style latency / throughput of every runtime per batch; JSON, Markdown, PNG",
)
