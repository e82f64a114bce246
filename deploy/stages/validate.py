"""validate: the parity gate. Runs the final ONNX (ONNX Runtime) and the TorchScript
module on the golden inputs at every recorded shape and compares each output with
the eager reference; any threshold exceeded fails the run."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from deploy.domain.vocabulary import Runtime
from deploy.gates.tolerance import Tolerance
from deploy.pipeline.contract import Artifact, Phase, Section, StageContext, StageSpec

if TYPE_CHECKING:
    from deploy.gates.parity import ParityReport, Table
    from deploy.gates.references import (
        Answers,
        Golden,
    )  # numpy: imported when the stage runs, not at discovery

# The runtimes parity is checked on (the others time what these checked).
Checked = Literal[
    "onnxruntime", "torchscript", "openvino", "tensorrt"
]  # Runtime members, as YAML spells them


class ValidateParams(Tolerance):
    runtimes: tuple[Checked, ...] = Field(
        ("onnxruntime", "torchscript"),
        min_length=1,
        description="Runtimes compared with the eager reference on the golden inputs (openvino: the openvino "
        "stage's FP32 IR, computed in f32; tensorrt: the built engine).",
    )


def run(ctx: StageContext, params: ValidateParams) -> None:
    from deploy.gates import parity, references
    from deploy.gates.detection_parity import layout_of

    golden = references.load(ctx.input("golden"))
    tables: dict[str, parity.Table] = {}
    skipped: dict[str, str] = {}
    for runtime in params.runtimes:
        if runtime == Runtime.TENSORRT and "engine" not in ctx.inputs:
            skipped[runtime] = "no engine: the build stage was skipped (no TensorRT or GPU)"
        elif runtime == Runtime.TORCHSCRIPT and "torchscript" not in ctx.inputs:
            skipped[runtime] = "no TorchScript: this config has no trace stage"
        elif runtime == Runtime.OPENVINO and "openvino" not in ctx.inputs:
            skipped[runtime] = "no OpenVINO IR: this config has no openvino stage"
        else:
            tables[runtime] = parity.compare(
                _RUNNERS[runtime](ctx, golden), golden, params, layout_of(ctx.config)
            )
    report = _report(tables, skipped, params).to_json()
    ctx.record("parity", report)
    ctx.headline(
        "; ".join(
            [f"{r}: {parity.headline(t, params)}" for r, t in tables.items()]
            + [f"{r}: skipped" for r in skipped]
        )
    )
    rows = [row for r, t in tables.items() for row in parity.report_rows(r, t)]
    note = "; ".join(f"{r}: {why}" for r, why in skipped.items())
    ctx.report_table("Parity vs the eager reference", parity.REPORT_COLUMNS, rows, note=note)
    ctx.output("report").write_text(json.dumps(report, indent=1))
    for name, table in tables.items():
        parity.gate(f"{name} vs eager", table, params)


def _report(tables: dict[str, Table], skipped: dict[str, str], params: ValidateParams) -> ParityReport:
    from deploy.gates import parity

    thresholds = Tolerance(**params.model_dump(exclude={"runtimes"})).model_dump(mode="json")
    lines = {r: parity.RuntimeParity(t, not parity.failures(t, params)) for r, t in tables.items()}
    return parity.ParityReport(
        thresholds, lines | {r: parity.RuntimeParity(skipped=why) for r, why in skipped.items()}
    )


def _onnxruntime(ctx: StageContext, golden: Golden) -> Answers:
    from deploy.gates.references import run
    from deploy.runtimes.onnxrt import OnnxRuntime

    return run(OnnxRuntime(ctx.input("onnx"), outputs=ctx.config.output_names()), golden)


def _torchscript(ctx: StageContext, golden: Golden) -> Answers:
    from deploy.gates.references import run
    from deploy.runtimes.torchrt import TorchModule

    return run(
        TorchModule.torchscript(
            ctx.input("torchscript"), ctx.config.input_names(), ctx.config.output_names()
        ),
        golden,
    )


def _openvino(ctx: StageContext, golden: Golden) -> Answers:
    from deploy.gates.references import run
    from deploy.runtimes.openvinort import Compute, OpenVino

    return run(
        OpenVino(ctx.input("openvino"), outputs=ctx.config.output_names(), compute=Compute.F32), golden
    )


def _tensorrt(ctx: StageContext, golden: Golden) -> Answers:
    from deploy.gates.references import run
    from deploy.runtimes.tensorrt import TensorRTEngine

    return run(
        TensorRTEngine(ctx.input("engine"), ctx.config.input_names(), ctx.config.output_names()), golden
    )


def inputs_for(params: ValidateParams) -> tuple[str, ...]:
    runtimes = set(params.runtimes)
    return (
        ("onnx", "golden")
        + (("torchscript",) if "torchscript" in runtimes else ())
        + (("openvino",) if "openvino" in runtimes else ())
        + (("engine",) if "tensorrt" in runtimes else ())
    )


_RUNNERS = {
    "onnxruntime": _onnxruntime,
    "torchscript": _torchscript,
    "openvino": _openvino,
    "tensorrt": _tensorrt,
}

SPEC = StageSpec(
    phase=Phase.VERIFY,
    name="validate",
    version=4,  # 4: openvino among the runtimes; 3: parity.json a versioned record (gates/parity.py ParityReport)
    params=ValidateParams,
    inputs=("onnx", "torchscript", "openvino", "golden", "engine"),
    outputs=(Artifact("report", filename="parity.json"),),
    run=run,
    uses=frozenset({Section.SHAPES}),
    env=("onnxruntime", "openvino", "torch", "numpy"),
    select_inputs=inputs_for,
    optional_inputs=frozenset({"engine"}),
    # the torch.export path has no trace stage; a config may have no openvino stage
    if_configured=frozenset({"torchscript", "openvino"}),
    description="parity gate: ONNX Runtime, TorchScript and OpenVINO vs the eager reference",
    timeout_s=1800,
)
