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
    from deploy.runtimes.base import Session

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
    from deploy.gates import diagnosis, parity, references
    from deploy.gates.detection_parity import layout_of

    golden = references.load(ctx.input("golden"))
    tables: dict[str, parity.Table] = {}
    sessions: dict[str, Session] = {}
    skipped: dict[str, str] = {}
    for runtime in params.runtimes:
        if runtime == Runtime.TENSORRT and "engine" not in ctx.inputs:
            skipped[runtime] = "no engine: the build stage was skipped (no TensorRT or GPU)"
        elif runtime == Runtime.TORCHSCRIPT and "torchscript" not in ctx.inputs:
            skipped[runtime] = "no TorchScript: this config has no trace stage"
        elif runtime == Runtime.OPENVINO and "openvino" not in ctx.inputs:
            skipped[runtime] = "no OpenVINO IR: this config has no openvino stage"
        else:
            sessions[runtime] = _RUNNERS[runtime](ctx)
            answers = references.run(sessions[runtime], golden)
            tables[runtime] = parity.compare(answers, golden, params, layout_of(ctx.config))
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
        diagnosis.judge(f"{name} vs eager", table, params, golden, ctx.input("eager"), sessions[name].infer)


def _report(tables: dict[str, Table], skipped: dict[str, str], params: ValidateParams) -> ParityReport:
    from deploy.gates import parity

    thresholds = Tolerance(**params.model_dump(exclude={"runtimes"})).model_dump(mode="json")
    lines = {r: parity.RuntimeParity(t, not parity.failures(t, params)) for r, t in tables.items()}
    return parity.ParityReport(
        thresholds, lines | {r: parity.RuntimeParity(skipped=why) for r, why in skipped.items()}
    )


def _onnxruntime(ctx: StageContext) -> Session:
    from deploy.runtimes.onnxrt import OnnxRuntime

    return OnnxRuntime(ctx.input("onnx"), outputs=ctx.config.output_names())


def _torchscript(ctx: StageContext) -> Session:
    from deploy.runtimes.torchrt import TorchModule

    return TorchModule.torchscript(
        ctx.input("torchscript"), ctx.config.input_names(), ctx.config.output_names()
    )


def _openvino(ctx: StageContext) -> Session:
    from deploy.runtimes.openvinort import Compute, OpenVino

    return OpenVino(ctx.input("openvino"), outputs=ctx.config.output_names(), compute=Compute.F32)


def _tensorrt(ctx: StageContext) -> Session:
    from deploy.runtimes.tensorrt import TensorRTEngine

    return TensorRTEngine(ctx.input("engine"), ctx.config.input_names(), ctx.config.output_names())


def inputs_for(params: ValidateParams) -> tuple[str, ...]:
    runtimes = set(params.runtimes)
    return (
        ("onnx", "golden", "eager")
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
    version=5,  # 5: every golden case, failures diagnosed (eager.json); 4: openvino among the runtimes; 3: parity.json a versioned record (gates/parity.py ParityReport)
    params=ValidateParams,
    inputs=("onnx", "torchscript", "openvino", "golden", "eager", "engine"),
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
