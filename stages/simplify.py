"""simplify: onnxsim, keeping the dynamic dims; checked in ONNX Runtime."""

from __future__ import annotations

import shutil
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.errors import StageFailed
from pipeline.stage import Artifact, Section, StageContext, StageSpec
from stages._tolerance import Tolerance


class SimplifyParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    enabled: bool = Field(True, description="false: hand the exported model on unchanged.")
    # passthrough: when onnxsim fails, hand the unsimplified model on (with a warning).
    on_failure: Literal["fail", "passthrough"] = Field(
        "fail",
        description="When onnxsim fails: fail the stage, or hand the unsimplified model on (with a warning).",
    )
    tolerance: Tolerance = Field(
        Tolerance(), description="Simplified model (ONNX Runtime) vs eager outputs on the golden inputs."
    )


def run(ctx: StageContext, params: SimplifyParams) -> None:
    if not params.enabled:
        shutil.copyfile(ctx.input("onnx"), ctx.output("onnx"))
        ctx.headline("disabled: model passed through")
        return
    import onnx

    from runtimes.onnxrt import OnnxRuntime
    from stages import _golden, _parity

    original = onnx.load(str(ctx.input("onnx")))
    simplified = _simplify(ctx, original, params)
    if simplified is None:
        return
    onnx.save(simplified, str(ctx.output("onnx")))
    golden = _golden.load(ctx.input("golden"))
    table = _parity.compare(
        _golden.run(OnnxRuntime(ctx.output("onnx"), outputs=ctx.config.output_names()), golden),
        golden,
        params.tolerance,
    )
    nodes = (len(original.graph.node), len(simplified.graph.node))
    ctx.record("nodes_before", nodes[0])
    ctx.record("nodes_after", nodes[1])
    ctx.record("parity", _parity.to_json(table))
    ctx.headline(f"nodes {nodes[0]} -> {nodes[1]}, ORT vs eager: {_parity.headline(table, params.tolerance)}")
    _parity.gate("simplified ONNX vs eager", table, params.tolerance)


def _simplify(ctx: StageContext, model: Any, params: SimplifyParams) -> Any:
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
        if params.on_failure == "fail":
            raise StageFailed(message) from exc
        ctx.log.warning("%s; passing the model through unsimplified", message)
        ctx.headline("onnxsim failed; passed through (on_failure: passthrough)")
        shutil.copyfile(ctx.input("onnx"), ctx.output("onnx"))
        return None


def _check_dynamic_dims(ctx: StageContext, model: Any) -> None:
    graph_inputs = {i.name: i.type.tensor_type.shape.dim for i in model.graph.input}
    for spec in ctx.config.inputs:
        dims = graph_inputs.get(spec.name)
        if dims is None:
            raise RuntimeError(f"input '{spec.name}' disappeared from the graph")
        fixed = [a for a in spec.dynamic_axes() if a < len(dims) and not dims[a].dim_param]
        if fixed:
            raise RuntimeError(f"input '{spec.name}': dynamic axes {fixed} became static")


SPEC = StageSpec(
    name="simplify",
    version=1,
    params=SimplifyParams,
    inputs=("onnx", "golden"),
    outputs=(Artifact("onnx", filename="model.onnx"),),
    run=run,
    uses=frozenset({Section.SHAPES}),
    env=("onnx", "onnxsim", "onnxruntime", "numpy"),
    description="onnxsim graph simplification, dynamic dims kept; ORT parity vs eager",
    timeout_s=1800,
)
