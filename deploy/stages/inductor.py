"""inductor: the model compiled ahead of time by TorchInductor into an AOTInductor package
(`model.pt2`, with `package.json` beside it), the compiled PyTorch path for a host
without TensorRT. One package serves the whole batch range: it is compiled from
torch.export with the dynamic shapes the ONNX export traces (modelio/export_shapes), so
it answers at min, opt and max, where it is checked against eager like every format.
The compile time goes into the record and the summary.

Why an AOTInductor package and not `torch.compile`: a package is a file, so it is cached
by content, served by Triton's python backend and benched like any other format, and a
server loads it without compiling. `torch.compile` compiles in the serving process, per
process and per shape (CUDA graphs), so nothing of it can be cached or checked ahead.
Measured on torch 2.14.1 (this 2-core CPU, docs/how-to/inductor.md): a dynamic-batch
package compiles, loads and answers at batch 1, 3 and 64. On torch 2.11 + CUDA 13 loading
one segfaulted (issue 39): the stage loads the package in its own process and checks it,
so such a crash fails this stage alone.

FP32: the FP16 and bf16 packages are the stages inductor_fp16 and inductor_bf16 (built
for this stage's device, accuracy-gated against FP32 like every reduced precision)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from deploy.domain.artifacts import EAGER, GOLDEN, INDUCTOR
from deploy.domain.issues import Issue
from deploy.domain.vocabulary import Precision
from deploy.gates.tolerance import Tolerance
from deploy.pipeline.errors import StageSkipped
from deploy.pipeline.graph.contract import (
    SOURCE_ARTIFACT,
    Artifact,
    ArtifactKind,
    Phase,
    Section,
    StageContext,
    StageSpec,
)
from deploy.pipeline.graph.facts import Provides
from deploy.runtimes.base import Device
from deploy.runtimes.inductorrt import INDUCTOR_DEVICE, PACKAGE_FILE
from deploy.spec.config import DeployConfig


class InductorParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    device: Device = Field(
        Device.CPU,
        description="What the package is compiled for and runs on: cpu (a C++ compiler builds it), or cuda. "
        "bench times it on bench.device only where the two agree.",
    )
    tolerance: Tolerance = Field(
        Tolerance(), description="The compiled package vs eager outputs on the golden inputs."
    )


def run(ctx: StageContext, params: InductorParams) -> None:
    import torch

    from deploy.gates import references
    from deploy.modelio import aoti
    from deploy.modelio.loading import load_adapted
    from deploy.runtimes.inductorrt import PackageRecord

    if cannot := host(params, ctx.config):  # said by validate and plan before the run
        raise StageSkipped(cannot[0].message)
    golden = references.load(ctx.input(GOLDEN))
    model = load_adapted(ctx.config, golden["opt"].inputs).to(params.device.value).eval()
    device = torch.device(params.device.value)
    args = tuple(torch.from_numpy(golden["opt"].inputs[n]).to(device) for n in ctx.config.input_names())
    package = ctx.output(INDUCTOR)
    compile_s = aoti.build(model, args, ctx.config, package)
    record = PackageRecord(
        params.device,
        Precision.FP32,
        compile_s,
        torch.__version__,
        aoti.batch_range(ctx.config),
        tuple(ctx.config.input_names()),
    )
    record.write(package.parent)
    ctx.record("compile_s", record.compile_s)
    ctx.record("device", params.device.value)
    _check(ctx, params, record)


def _check(ctx: StageContext, params: InductorParams, record: Any) -> None:
    """The package, loaded as bench and the server load it, against eager at every golden shape."""
    from deploy.gates import diagnosis, parity, references
    from deploy.gates.detection_parity import layout_of
    from deploy.runtimes import inductorrt

    golden = references.load(ctx.input(GOLDEN))
    names = (ctx.config.input_names(), ctx.config.output_names())
    runtime = inductorrt.load(ctx.output(INDUCTOR), *names, params.device)
    table = parity.compare(references.run(runtime, golden), golden, params.tolerance, layout_of(ctx.config))
    ctx.record("parity", parity.to_json(table))
    what = f"AOTInductor package ({params.device.value})"
    ctx.report_table(f"{what} vs eager", parity.REPORT_COLUMNS, parity.report_rows(what, table))
    diagnosis.judge(
        f"{what} vs eager",
        table,
        params.tolerance,
        golden,
        ctx.input(EAGER),
        runtime.infer,
        "stages.inductor.tolerance",
    )
    size = ctx.output(INDUCTOR).stat().st_size
    ctx.headline(
        f"package {size / 1e6:.1f} MB for {params.device.value}, compiled in {record.compile_s:.1f} s; "
        f"vs eager: {parity.headline(table, params.tolerance)}"
    )


def host(params: InductorParams, config: DeployConfig) -> list[Issue]:
    """What this install cannot build, said before the run."""
    import shutil

    from deploy.runtimes.host import torch_cannot

    reason = torch_cannot(params.device)
    if reason is None and params.device is Device.CPU and not (shutil.which("c++") or shutil.which("g++")):
        reason = "no C++ compiler on PATH: AOTInductor builds a CPU package with one (install g++)"
    return (
        [Issue("stages.inductor.device", f"{reason}; the stage is skipped, and so is every inductor row")]
        if reason
        else []
    )


SPEC = StageSpec(
    phase=Phase.CONVERT,
    name="inductor",
    version=3,  # 3: every golden case, failures diagnosed; 2: package.json schema 2 (input names); the FP16 / bf16 packages are their own stages
    params=InductorParams,
    inputs=(SOURCE_ARTIFACT, "golden", "eager"),
    outputs=(Artifact("inductor", ArtifactKind.TREE, entry=PACKAGE_FILE),),
    run=run,
    uses=frozenset({Section.MODEL, Section.SHAPES}),
    env=("torch", "safetensors", "numpy"),
    # The package is machine code for this host: its CPU's instruction set, or its GPU.
    identity=lambda p: _target(p.device),
    host=host,
    provides=(Provides(INDUCTOR_DEVICE, lambda p: p.device),),
    description="AOTInductor package (torch.export + TorchInductor, dynamic batch) for cpu or cuda; "
    "parity vs eager at min / opt / max, compile time recorded",
    timeout_s=1800,
)


def _target(device: Device) -> dict[str, object]:
    from deploy.runtimes.devices import gpu_identity, host_identity

    if device is Device.CUDA:
        return {"gpu": gpu_identity()}
    return {"host_cpu": host_identity()["host_cpu"]}
