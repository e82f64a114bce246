"""validate: the parity gate. Runs the final ONNX (ONNX Runtime) and the TorchScript
module on the golden inputs at every recorded shape and compares each output with
the eager reference; any threshold exceeded fails the run."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from pipeline.stage import Artifact, Section, StageContext, StageSpec
from stages._tolerance import Tolerance

Runtime = Literal["onnxruntime", "torchscript"]


class ValidateParams(Tolerance):
    runtimes: tuple[Runtime, ...] = Field(("onnxruntime", "torchscript"), min_length=1)


def run(ctx: StageContext, params: ValidateParams) -> None:
    from stages import _golden, _parity

    golden = _golden.load(ctx.input("golden"))
    report: dict[str, Any] = {"thresholds": Tolerance(**params.model_dump(exclude={"runtimes"})).model_dump()}
    for runtime in params.runtimes:
        table = _parity.compare(_RUNNERS[runtime](ctx, golden), golden, params)
        report[runtime] = {"passed": not _parity.failures(table, params), "shapes": table}
    ctx.record("parity", report)
    ctx.record("headline", "; ".join(f"{r}: {_parity.headline(report[r]['shapes'])}" for r in params.runtimes))
    for runtime in params.runtimes:
        _parity.gate(f"{runtime} vs eager", report[runtime]["shapes"], params)
    ctx.output("report").write_text(json.dumps(report, indent=1))


def _onnxruntime(ctx: StageContext, golden: Any) -> Any:
    from stages import _onnx

    return _onnx.run_golden(_onnx.session(ctx.input("onnx")), ctx.config, golden)


def _torchscript(ctx: StageContext, golden: Any) -> Any:
    import torch

    from stages._torch import run_module

    module = torch.jit.load(str(ctx.input("torchscript")), map_location="cpu").eval()
    return {label: run_module(module, ctx.config, case.inputs) for label, case in golden.items()}


_RUNNERS = {"onnxruntime": _onnxruntime, "torchscript": _torchscript}

SPEC = StageSpec(
    name="validate",
    version=1,
    params=ValidateParams,
    inputs=("onnx", "torchscript", "golden"),
    outputs=(Artifact("report", filename="parity.json"),),
    run=run,
    uses=frozenset({Section.SHAPES}),
    env=("onnxruntime", "torch", "numpy"),
    description="parity gate: ONNX Runtime and TorchScript vs the eager reference",
)
