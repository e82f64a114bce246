"""The reduced-precision AOTInductor packages (stages inductor_fp16 and inductor_bf16):
the model cast to FP16 or bf16 behind the FP32 calling convention (modelio/aoti.Reduced),
compiled for the device the FP32 package was compiled for, and judged like every reduced
precision: against the FP32 ONNX on held-out inputs by the accuracy gate, the FP32
package timed beside it on that device. Shared by the two stages, which differ only in
the precision; neither imports the other.

Where the device has no such arithmetic (a CPU without avx512_bf16 / AMX, a GPU before
sm 8.0 for bf16) torch emulates it: correct, and slower than FP32. The stage is skipped
there, saying so up front, unless `emulated: true` asks for the accuracy check anyway
(before deploying to a machine that has it)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from deploy.domain.artifacts import GOLDEN, INDUCTOR
from deploy.domain.issues import Issue
from deploy.domain.vocabulary import Precision
from deploy.gates.accuracy_report import Evidence
from deploy.gates.tolerance import AccuracyGate
from deploy.pipeline.errors import StageSkipped
from deploy.pipeline.graph.registry import read_fact
from deploy.runtimes.base import Device, Session
from deploy.runtimes.inductorrt import INDUCTOR_DEVICE
from deploy.spec.config import DeployConfig

if TYPE_CHECKING:
    import numpy as np

    from deploy.pipeline.graph.contract import StageContext
    from deploy.runtimes.inductorrt import PackageRecord


def device(config: DeployConfig) -> Device:
    """The device the inductor stage compiles for (`stages.inductor.device`)."""
    return read_fact(config, INDUCTOR_DEVICE)


def host(precision: Precision, emulated: bool, config: DeployConfig) -> list[Issue]:
    """What this install cannot build of `precision`, said before the run; `emulated`: build
    it where the device only emulates it."""
    from deploy.runtimes.host import lacks_native, torch_cannot

    target = device(config)
    reason = torch_cannot(target)
    if reason is None and not emulated:
        if lacking := lacks_native(precision, target):
            reason = f"{lacking} (stages.inductor_{precision}.emulated: true builds and gates it anyway)"
    where = f"stages.inductor_{precision}"
    return [Issue(where, f"{reason}; the stage is skipped, and so is its bench row")] if reason else []


def run(
    ctx: StageContext,
    precision: Precision,
    holdout: list[dict[str, np.ndarray]],
    gate: AccuracyGate,
    evidence: Evidence,
    emulated: bool,
) -> None:
    """Compiles the package into `inductor_<precision>` and gates it on `holdout` (which is
    `evidence`), writing `accuracy_inductor_<precision>`; the stage fails where the gate fails."""
    from deploy.gates import accuracy
    from deploy.runtimes.host import lacks_native
    from deploy.runtimes.inductorrt import PackageRecord

    if cannot := host(precision, emulated, ctx.config):  # said by validate and plan before the run
        raise StageSkipped(cannot[0].message)
    fp32 = PackageRecord.read(ctx.input(INDUCTOR).parent)
    artifact = f"inductor_{precision}"
    record = _build(ctx, precision, fp32.device, ctx.output(artifact))
    ctx.record("compile_s", record.compile_s)
    ctx.record("device", record.device.value)
    lacking = lacks_native(precision, record.device)
    label = f"{precision} AOTInductor package ({record.device.value})"
    details = {"device": record.device.value, "compile_s": record.compile_s, "emulated": lacking is not None}
    load = partial(session, ctx.config.input_names(), record.device)
    accuracy.conclude(
        ctx, label, ctx.output(artifact), holdout, gate, details, f"accuracy_{artifact}", evidence,
        load, baseline=ctx.input(INDUCTOR), target=record.device,
    )  # fmt: skip
    if lacking:  # asked for with emulated: true; its speed here is not the precision's verdict
        ctx.headline(f"{ctx.metrics['headline']}; EMULATED: {lacking}")


def _build(ctx: StageContext, precision: Precision, target: Device, package: Path) -> PackageRecord:
    import torch

    from deploy.gates import references
    from deploy.modelio import aoti
    from deploy.modelio.loading import load_adapted
    from deploy.runtimes.inductorrt import PackageRecord

    golden = references.load(ctx.input(GOLDEN))["opt"].inputs
    model = aoti.Reduced(load_adapted(ctx.config, golden), aoti.DTYPES[precision]).to(target.value).eval()
    args = tuple(torch.from_numpy(golden[n]).to(target.value) for n in ctx.config.input_names())
    compile_s = aoti.build(model, args, ctx.config, package)
    batch, inputs = aoti.batch_range(ctx.config), tuple(ctx.config.input_names())
    record = PackageRecord(target, precision, compile_s, torch.__version__, batch, inputs)
    record.write(package.parent)
    return record


def session(inputs: list[str], target: Device, path: Path, outputs: list[str] | None) -> Session:
    """A package as the accuracy gate runs a candidate (accuracy.Load, its inputs bound)."""
    from deploy.runtimes import inductorrt

    return inductorrt.load(path, inputs, outputs or (), target)


def target_identity() -> dict[str, object]:
    """The host's CPU model and GPU: the package is machine code for one of them (its key's
    part; the FP32 package's record says which at run time)."""
    from deploy.runtimes.devices import host_identity

    host = host_identity()
    return {"host_cpu": host["host_cpu"], "host_gpu": host["host_gpu"]}
