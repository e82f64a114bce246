"""Dynamic batching only for models whose answers are computed per sample. Triton's
dynamic batcher merges concurrent clients' requests into one execution; for an output
that depends on the rest of its batch, each client would get an answer computed with
other clients' data. Measured for every served precision: FP32 is the eager model
(golden's batching.json); a reduced-precision file is measured here with ONNX Runtime on
golden's distinct samples, since a conversion can introduce the dependence (ONNX
Runtime's dynamic INT8 quantizes activations with one scale for the whole batch)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from deploy.domain.issues import Issue
from deploy.domain.vocabulary import Precision
from deploy.gates.batch_independence import BatchIndependence, measure, not_measured
from deploy.pipeline.errors import ConfigError

if TYPE_CHECKING:
    from deploy.gates.references import Golden

WHERE = "stages.triton_config.dynamic_batching"
# How each precision was measured, for the message.
HOW = {
    "fp32": "by golden, on the eager model",
    "int8": "with ONNX Runtime on the served INT8 file: the dynamic recipe quantizes activations with one scale "
    "for the whole batch",
    "fp16": "with ONNX Runtime on the served FP16 file",
}


def records(
    fp32: BatchIndependence, files: Mapping[str, Path], golden: Golden, outputs: list[str]
) -> dict[str, BatchIndependence]:
    """precision -> its measurement: fp32's from golden, the others' on their files."""
    found = {"fp32": fp32}
    for precision, path in files.items():
        found[precision] = _measured(path, golden, outputs)
    return found


def _measured(path: Path, golden: Golden, outputs: list[str]) -> BatchIndependence:
    from deploy.runtimes.onnxrt import OnnxRuntime

    case = golden["opt"] if len(next(iter(golden["opt"].inputs.values()))) >= 2 else golden["max"]
    runtime = OnnxRuntime(path, outputs=outputs)
    try:
        return measure(runtime.infer, case.inputs, runtime.infer(case.inputs))
    except Exception as exc:  # a file that cannot run is the stages' before this one to report
        return not_measured(f"ONNX Runtime could not run {path.name}: {type(exc).__name__}")


def refuse(found: Mapping[str, BatchIndependence]) -> None:
    """A config error naming each batch-dependent output of each served precision."""
    issues = [
        Issue(WHERE, _problem(precision, record, o.name, o.difference()))
        for precision, record in found.items()
        for o in record.dependent()
    ]
    if issues:
        raise ConfigError(WHERE, issues)


def _problem(precision: str, record: BatchIndependence, output: str, difference: str) -> str:
    served = "" if precision == Precision.FP32 else f" of the {precision} model"
    fixes = (
        "set stages.triton_config.max_batch_size: 0 (each request runs as sent), or drop "
        f"'{output}' from outputs"
    )
    if precision != Precision.FP32:
        fixes = (
            "set stages.triton_config.dynamic_batching: null (the server runs each request as sent), or leave "
            f"{precision} out of stages.triton_config.precisions"
            + (
                ", or use stages.quantize.recipe: static (scales fixed at calibration)"
                if precision == Precision.INT8
                else ""
            )
        )
    return (
        f"output '{output}'{served} depends on the rest of its batch: {difference} (measured on {record.batch} "
        f"distinct samples {HOW.get(precision, '')}). Triton's dynamic batcher merges concurrent "
        f"clients' requests, so each client would get an answer computed with other clients' data. Fix: {fixes}"
    )
