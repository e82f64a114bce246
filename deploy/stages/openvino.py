"""openvino: the simplified ONNX converted to OpenVINO IR (model.xml + model.bin), once in
FP32 and once with its weights compressed to FP16 (computed in FP32 on the CPU: half the
file, the same arithmetic), dynamic axes kept. Each IR answers the golden inputs (min,
opt, max) in OpenVINO and is checked against eager PyTorch's answers; where the CPU has
bf16, so is the FP32 IR computed in bf16 (the CPU plugin's default there: ~2× on resnet50
here, and another precision, gated with its own tolerance). The FP32 IR's answers (computed
in f32) are kept for validate (gates/kept_answers.py), which judges the same file.

From the ONNX rather than from the PyTorch module: the ONNX is the artifact every other
format was verified from (its dynamic axes, names and parity are settled), converting it
needs no torch in the stage, and on resnet50 the two IRs time alike (benchmarks/openvino.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from deploy.domain.artifacts import EAGER, GOLDEN, ONNX, OPENVINO, OPENVINO_ANSWERS, OPENVINO_FP16
from deploy.gates.tolerance import Tolerance
from deploy.modelio.onnx_files import MODEL_FILE
from deploy.pipeline.errors import StageFailed
from deploy.pipeline.graph.contract import Artifact, ArtifactKind, Phase, Section, StageContext, StageSpec
from deploy.pipeline.graph.facts import Provides
from deploy.runtimes.bf16_gate import BF16_GATED

if TYPE_CHECKING:
    import openvino as ov

    from deploy.runtimes.openvinort import Compute

IR_FILE = "model.xml"  # with model.bin beside it


class OpenVinoParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    tolerance: Tolerance = Field(
        Tolerance(), description="FP32 IR (OpenVINO, CPU) vs eager outputs on the golden inputs."
    )
    fp16_tolerance: Tolerance = Field(
        Tolerance(atol=None, min_cosine=0.9999),
        description="The IR with FP16-compressed weights vs eager outputs on the golden inputs.",
    )
    bf16: bool = Field(
        True,
        description="Where the CPU has bf16: check the FP32 IR computed in bf16 against eager (bench's "
        "openvino_bf16 runtime); false: not checked.",
    )
    bf16_tolerance: Tolerance = Field(
        Tolerance(atol=None, min_cosine=0.999),
        description="The FP32 IR computed in bf16 vs eager outputs on the golden inputs.",
    )


def run(ctx: StageContext, params: OpenVinoParams) -> None:
    import openvino as ov

    model = ov.convert_model(str(_onnx_file(ctx.input(ONNX))))
    _check_dynamic_axes(ctx, model)
    checked = []
    for artifact, fp16, tolerance in (
        ("openvino", False, params.tolerance),
        ("openvino_fp16", True, params.fp16_tolerance),
    ):
        xml = ctx.output(artifact)  # the tree's entry: model.bin is written beside it
        xml.parent.mkdir(parents=True, exist_ok=True)
        ov.save_model(model, str(xml), compress_to_fp16=fp16)
        checked.append(_parity(ctx, artifact, xml, tolerance))
    _against_fp32(ctx, "openvino_fp16", ctx.output(OPENVINO_FP16), "fp16 weights", params.fp16_tolerance)
    checked += _bf16(ctx, params)
    sizes = [_size(ctx.output(a).parent) for a in ("openvino", "openvino_fp16")]
    ctx.headline(f"IR {sizes[0] / 1e6:.1f} MB, FP16 weights {sizes[1] / 1e6:.1f} MB; " + "; ".join(checked))


def _onnx_file(tree: Path) -> Path:
    return tree / MODEL_FILE if tree.is_dir() else tree


def _bf16(ctx: StageContext, params: OpenVinoParams) -> list[str]:
    from deploy.runtimes.openvinort import Compute, lacks

    reason = "stages.openvino.bf16: false" if not params.bf16 else lacks(Compute.BF16)
    if reason:
        ctx.record("openvino_bf16_skipped", reason)
        _not_measured(ctx, "accuracy_openvino_bf16", reason)
        return []
    try:
        said = _parity(ctx, "openvino_bf16", ctx.output(OPENVINO), params.bf16_tolerance, Compute.BF16)
        _against_fp32(ctx, "openvino_bf16", ctx.output(OPENVINO), "bf16", params.bf16_tolerance)
        return [said]
    except StageFailed as exc:
        raise StageFailed(
            f"{exc}; bf16 is this CPU's OpenVINO default: set stages.openvino.bf16_tolerance if the "
            "difference is acceptable, or stages.openvino.bf16: false to keep to FP32"
        ) from exc


WHAT = {"openvino": "FP32 IR", "openvino_fp16": "FP16-weight IR", "openvino_bf16": "FP32 IR computed in bf16"}
# The params field each artifact's parity tolerance is set at (named where rounding fails it).
TOLERANCE_FIELD = {
    "openvino": "tolerance",
    "openvino_fp16": "fp16_tolerance",
    "openvino_bf16": "bf16_tolerance",
}


def _parity(
    ctx: StageContext, artifact: str, xml: Path, tolerance: Tolerance, compute: Compute | None = None
) -> str:
    """The IR against eager on the golden inputs: recorded, reported, gated."""
    from deploy.gates import diagnosis, kept_answers, parity, references
    from deploy.gates.detection_parity import layout_of
    from deploy.runtimes.openvinort import Compute, OpenVino

    golden = references.load(ctx.input(GOLDEN))
    runtime = OpenVino(xml, outputs=ctx.config.output_names(), compute=compute or Compute.F32)
    answers = references.run(runtime, golden)
    table = parity.compare(answers, golden, tolerance, layout_of(ctx.config))
    ctx.record(f"{artifact}_parity", parity.to_json(table))
    what = WHAT[artifact]
    ctx.report_table(
        f"{what} (OpenVINO, CPU) vs eager", parity.REPORT_COLUMNS, parity.report_rows(what, table)
    )
    key = TOLERANCE_FIELD[artifact]
    diagnosis.judge(
        f"{what} (OpenVINO) vs eager",
        table,
        tolerance,
        golden,
        ctx.input(EAGER),
        runtime.infer,
        f"stages.openvino.{key}",
    )
    if artifact == OPENVINO:  # what validate's openvino runs: this IR, computed in f32
        kept_answers.keep(ctx.output(OPENVINO_ANSWERS), OPENVINO, xml, ctx.input(GOLDEN), answers)
    return f"{what} vs eager: {parity.headline(table, tolerance)}"


def _against_fp32(ctx: StageContext, runtime: str, xml: Path, precision: str, tolerance: Tolerance) -> None:
    """The reduced precision against FP32 (the FP32 ONNX in ONNX Runtime, as every reduced
    precision is judged) on the golden inputs at opt: the accuracy report select reads, so
    a precision checked here is never "no accuracy measured" there."""
    from functools import partial

    from deploy.gates import accuracy, references
    from deploy.gates.accuracy_report import AccuracyReport, Evidence
    from deploy.gates.tolerance import AccuracyGate
    from deploy.runtimes.files import runtime_for

    golden = references.load(ctx.input(GOLDEN))
    feeds = [golden["opt"].inputs]
    gate = AccuracyGate(min_cosine=tolerance.min_cosine)
    load = partial(runtime_for, precision=precision)
    onnx = _onnx_file(ctx.input(ONNX))
    metrics, _ = accuracy.gate_against_fp32(onnx, xml, feeds, ctx.config.outputs, gate, load)
    # Timed at min (one sample where the batch starts at 1), as every first look at speed is.
    timed = golden["min"].inputs
    speed = accuracy.measure_speed(ctx.output(OPENVINO), xml, timed, load, baseline_load=runtime_for)
    given = ctx.config.model.golden_inputs is not None
    source = "the golden inputs at opt" + ("" if given else " (random)")
    evidence = Evidence(not given, source, "model.golden_inputs")
    report = AccuracyReport(
        metrics, len(feeds), gate.model_dump(mode="json"), speed, {"runtime": runtime}, evidence
    )
    ctx.output(f"accuracy_{runtime}").write_text(json.dumps(report.to_json(), indent=1))


def _not_measured(ctx: StageContext, artifact: str, reason: str) -> None:
    """An accuracy report with no outputs: select reads "no accuracy measured", and why."""
    from deploy.gates.accuracy_report import AccuracyReport, Evidence, Speed

    report = AccuracyReport({}, 0, {}, Speed(0.0, 0.0, 0), {"skipped": reason}, Evidence(True, "nothing", ""))
    ctx.output(artifact).write_text(json.dumps(report.to_json(), indent=1))


def _check_dynamic_axes(ctx: StageContext, model: ov.Model) -> None:
    """Every axis the config declares dynamic is dynamic in the IR."""
    shapes = {i.get_any_name(): i.get_partial_shape() for i in model.inputs}
    for spec in ctx.config.inputs:
        shape = shapes.get(spec.name)
        if shape is None:
            raise StageFailed(
                f"openvino: input '{spec.name}' is not in the converted model ({sorted(shapes)})"
            )
        fixed = [a for a in spec.dynamic_axes() if a < shape.rank.get_length() and shape[a].is_static]
        if fixed:
            raise StageFailed(f"openvino: input '{spec.name}': dynamic axes {fixed} became static ({shape})")


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir())


SPEC = StageSpec(
    phase=Phase.CONVERT,
    name="openvino",
    version=5,  # 5: the FP32 IR's answers kept for validate; 4: speed vs FP32 timed in ABBA rounds (interval, stable, contended: accuracy.json schema 3), at min; 3: every golden case, failures diagnosed; 2: accuracy reports against FP32 for the FP16-weight IR and bf16 compute
    params=OpenVinoParams,
    inputs=("onnx", "golden", "eager"),
    outputs=(
        Artifact("openvino", ArtifactKind.TREE, entry=IR_FILE),
        Artifact("openvino_fp16", ArtifactKind.TREE, entry=IR_FILE),
        Artifact("accuracy_openvino_fp16", filename="accuracy_openvino_fp16.json"),
        Artifact("accuracy_openvino_bf16", filename="accuracy_openvino_bf16.json"),
        Artifact("openvino_answers", filename="openvino_answers.npz"),
    ),
    run=run,
    uses=frozenset({Section.SHAPES}),
    env=("openvino", "numpy"),
    provides=(Provides(BF16_GATED, lambda p: p.bf16),),
    description="OpenVINO IR from the ONNX (FP32, and FP16-compressed weights), dynamic axes kept; "
    "parity vs eager at min / opt / max",
    timeout_s=1800,
)
