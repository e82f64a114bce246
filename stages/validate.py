"""validate: the parity gate. Runs the final ONNX (ONNX Runtime) and the TorchScript
module on the golden inputs at every recorded shape and compares each output with
the eager reference; any threshold exceeded fails the run."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from pipeline.stage import Artifact, Phase, Section, StageContext, StageSpec
from stages._tolerance import Tolerance

Runtime = Literal["onnxruntime", "torchscript", "tensorrt"]


class ValidateParams(Tolerance):
    runtimes: tuple[Runtime, ...] = Field(
        ("onnxruntime", "torchscript"),
        min_length=1,
        description="Runtimes compared with the eager reference on the golden inputs (tensorrt: the built engine).",
    )


def run(ctx: StageContext, params: ValidateParams) -> None:
    from stages import _golden, _parity

    golden = _golden.load(ctx.input("golden"))
    report: dict[str, Any] = {"thresholds": Tolerance(**params.model_dump(exclude={"runtimes"})).model_dump()}
    for runtime in params.runtimes:
        if runtime == "tensorrt" and "engine" not in ctx.inputs:
            report[runtime] = {"skipped": "no engine: the build stage was skipped (no TensorRT or GPU)"}
            continue
        table = _parity.compare(_RUNNERS[runtime](ctx, golden), golden, params)
        report[runtime] = {"passed": not _parity.failures(table, params), "shapes": table}
    ctx.record("parity", report)
    checked = [r for r in params.runtimes if "shapes" in report[r]]
    ctx.headline(
        "; ".join(
            [f"{r}: {_parity.headline(report[r]['shapes'], params)}" for r in checked]
            + [f"{r}: skipped" for r in params.runtimes if r not in checked]
        )
    )
    rows = [row for r in checked for row in _parity.report_rows(r, report[r]["shapes"])]
    skipped = "; ".join(f"{r}: {report[r]['skipped']}" for r in params.runtimes if r not in checked)
    ctx.report_table("Parity vs the eager reference", _parity.REPORT_COLUMNS, rows, note=skipped)
    for runtime in checked:
        _parity.gate(f"{runtime} vs eager", report[runtime]["shapes"], params)
    ctx.output("report").write_text(json.dumps(report, indent=1))


def _onnxruntime(ctx: StageContext, golden: Any) -> Any:
    from runtimes.onnxrt import OnnxRuntime
    from stages._golden import run

    return run(OnnxRuntime(ctx.input("onnx"), outputs=ctx.config.output_names()), golden)


def _torchscript(ctx: StageContext, golden: Any) -> Any:
    from runtimes.torchrt import TorchModule
    from stages._golden import run

    return run(
        TorchModule.torchscript(
            ctx.input("torchscript"), ctx.config.input_names(), ctx.config.output_names()
        ),
        golden,
    )


def _tensorrt(ctx: StageContext, golden: Any) -> Any:
    from runtimes.tensorrt import TensorRTEngine
    from stages._golden import run

    return run(
        TensorRTEngine(ctx.input("engine"), ctx.config.input_names(), ctx.config.output_names()), golden
    )


def inputs_for(params: ValidateParams) -> tuple[str, ...]:
    return ("onnx", "torchscript", "golden") + (("engine",) if "tensorrt" in params.runtimes else ())


_RUNNERS = {"onnxruntime": _onnxruntime, "torchscript": _torchscript, "tensorrt": _tensorrt}

SPEC = StageSpec(
    phase=Phase.VERIFY,
    name="validate",
    version=2,
    params=ValidateParams,
    inputs=("onnx", "torchscript", "golden", "engine"),
    outputs=(Artifact("report", filename="parity.json"),),
    run=run,
    uses=frozenset({Section.SHAPES}),
    env=("onnxruntime", "torch", "numpy"),
    select_inputs=inputs_for,
    optional_inputs=frozenset({"engine"}),
    description="parity gate: ONNX Runtime and TorchScript vs the eager reference",
)
