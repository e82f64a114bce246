"""simplify: onnxsim, keeping the dynamic dims; checked in ONNX Runtime, whose answers on
the simplified file are kept for validate (gates/kept_answers.py)."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from deploy.domain.artifacts import EAGER, GOLDEN, ONNX, ONNX_ANSWERS
from deploy.gates.tolerance import Tolerance
from deploy.modelio.onnx_files import MODEL_FILE
from deploy.pipeline.errors import StageFailed
from deploy.pipeline.graph.contract import Artifact, ArtifactKind, Section, StageContext, StageSpec

if TYPE_CHECKING:
    import onnx


class OnFailure(StrEnum):
    FAIL = "fail"
    PASSTHROUGH = "passthrough"  # hand the unsimplified model on (with a warning)


class SimplifyParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    enabled: bool = Field(True, description="false: hand the exported model on unchanged.")
    # passthrough: when onnxsim fails, hand the unsimplified model on (with a warning).
    on_failure: OnFailure = Field(
        OnFailure.FAIL,
        description="When onnxsim fails: fail the stage, or hand the unsimplified model on (with a warning).",
    )
    tolerance: Tolerance = Field(
        Tolerance(), description="Simplified model (ONNX Runtime) vs eager outputs on the golden inputs."
    )


def run(ctx: StageContext, params: SimplifyParams) -> None:
    from deploy.gates import kept_answers
    from deploy.modelio import onnx_files

    # Replaced by the answers below wherever this stage checks the file it writes.
    kept_answers.not_kept(ctx.output(ONNX_ANSWERS), ONNX, "simplify passed the model through unchecked")

    if not params.enabled:
        onnx_files.copy(ctx.input(ONNX), ctx.output(ONNX))
        ctx.headline("disabled: model passed through")
        return
    import onnx

    header = onnx.load(str(ctx.input(ONNX)), load_external_data=False)  # sizes, not weights
    if onnx_files.too_big(header):
        _pass_through(ctx, "the model is over 2 GB: onnxsim works on one in-memory protobuf, capped at 2 GB")
        return
    external = onnx_files.has_external(header)
    original = onnx.load(str(ctx.input(ONNX)))
    simplified = _simplify(ctx, original, params)
    if simplified is None:
        return
    onnx_files.save(simplified, ctx.output(ONNX), external)
    _check(ctx, params, (len(original.graph.node), len(simplified.graph.node)))


def _check(ctx: StageContext, params: SimplifyParams, nodes: tuple[int, int]) -> None:
    """The simplified file in ONNX Runtime against eager; its answers kept for validate."""
    from deploy.gates import diagnosis, kept_answers, parity, references
    from deploy.gates.detection_parity import layout_of
    from deploy.runtimes.onnxrt import OnnxRuntime

    golden = references.load(ctx.input(GOLDEN))
    runtime = OnnxRuntime(ctx.output(ONNX), outputs=ctx.config.output_names())
    answers = references.run(runtime, golden)
    table = parity.compare(answers, golden, params.tolerance, layout_of(ctx.config))
    ctx.record("nodes_before", nodes[0])
    ctx.record("nodes_after", nodes[1])
    ctx.record("parity", parity.to_json(table))
    ctx.headline(f"nodes {nodes[0]} -> {nodes[1]}, ORT vs eager: {parity.headline(table, params.tolerance)}")
    diagnosis.judge(
        "simplified ONNX vs eager",
        table,
        params.tolerance,
        golden,
        ctx.input(EAGER),
        runtime.infer,
        "stages.simplify.tolerance",
    )
    kept_answers.keep(ctx.output(ONNX_ANSWERS), ONNX, ctx.output(ONNX), ctx.input(GOLDEN), answers)


def _simplify(ctx: StageContext, model: onnx.ModelProto, params: SimplifyParams) -> onnx.ModelProto | None:
    """The simplified model; None after a passthrough. onnxsim's own random check is
    off (check_n=0): our golden parity check replaces it, with the config's tolerances."""
    import onnxsim

    try:
        simplified, ok = onnxsim.simplify(model, check_n=0)
        if not ok:
            raise RuntimeError("onnxsim reported that the simplified model is not equivalent")
        _check_dynamic_dims(ctx, simplified)
        return simplified
    except Exception as exc:
        message = f"onnxsim failed: {type(exc).__name__}: {exc}"
        if params.on_failure == OnFailure.FAIL:
            raise StageFailed(message) from exc
        _pass_through(ctx, f"{message} (on_failure: passthrough)")
        return None


def _pass_through(ctx: StageContext, reason: str) -> None:
    """Hands the exported model on unsimplified, saying why (ONNX Runtime already
    checked it in export, so no parity run here)."""
    from deploy.modelio import onnx_files

    ctx.log.warning("%s; passing the model through unsimplified", reason)
    ctx.record("skipped_because", reason)
    ctx.headline(f"not simplified: {reason}")
    onnx_files.copy(ctx.input(ONNX), ctx.output(ONNX))


def _check_dynamic_dims(ctx: StageContext, model: onnx.ModelProto) -> None:
    from deploy.modelio.onnx_files import fixed_dims

    fixed = fixed_dims(model, ctx.config.inputs)
    if fixed:
        raise RuntimeError(f"dynamic dims became static: {'; '.join(fixed)}")


SPEC = StageSpec(
    name="simplify",
    version=4,  # 4: ONNX Runtime's answers kept for validate; 3: parity at every golden case, failures diagnosed (eager.json)
    params=SimplifyParams,
    inputs=("onnx", "golden", "eager"),
    outputs=(
        Artifact("onnx", ArtifactKind.TREE, entry=MODEL_FILE),
        Artifact("onnx_answers", filename="onnx_answers.npz"),
    ),
    run=run,
    uses=frozenset({Section.SHAPES}),
    env=("onnx", "onnxsim", "onnxruntime", "numpy"),
    description="onnxsim graph simplification, dynamic dims kept; ORT parity vs eager",
    timeout_s=1800,
)
