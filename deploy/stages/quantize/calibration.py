"""INT8 calibration for onnxruntime.quantization: activation ranges computed once,
checked for infinities (a transformer's -inf attention-mask fill), and handed to
quantize_static through its calibration cache, so every try of the automatic fallback
reuses them. Imports onnxruntime and onnx when called."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from deploy.pipeline.errors import StageFailed
from deploy.runtimes.base import Feeds

if TYPE_CHECKING:
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod
    from onnxruntime.quantization.calibrate import TensorData, TensorsData


class Method(StrEnum):
    """How activation ranges are chosen."""

    MINMAX = "minmax"
    ENTROPY = "entropy"
    PERCENTILE = "percentile"


# onnxruntime's CalibrationMethod member per method (looked up late: no import at discovery).
_METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}


def ort_method(method: Method) -> CalibrationMethod:
    from onnxruntime.quantization import CalibrationMethod

    return getattr(CalibrationMethod, _METHODS[method])


@dataclass(frozen=True)
class Scope:
    """What will be quantized: nodes of these op types (None: every type quantize_static
    supports) except the excluded ones. Only their tensors need finite ranges."""

    op_types: tuple[str, ...] | None
    exclude: tuple[str, ...]

    def types(self) -> list[str]:
        from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

        return sorted(self.op_types or set(QDQRegistry) | set(QLinearOpsRegistry))

    def tensors(self, model: Path) -> set[str]:
        import onnx

        types = set(self.types())
        nodes = onnx.load(str(model), load_external_data=False).graph.node
        chosen = [n for n in nodes if n.op_type in types and n.name not in self.exclude]
        return {t for n in chosen for t in [*n.input, *n.output]}


Step = Callable[[int, int | None, str], None]


def calibrate(
    model: Path,
    calibration: Sequence[Feeds],
    method: Method,
    work: Path,
    scope: Scope,
    step: Step | None = None,
) -> Path:
    """Calibrates the way quantize_static would, but checks the ranges first: a -inf / inf
    constant (a transformer's attention-mask fill) makes them infinite, which minmax turns
    into NaN zero-points and entropy / percentile into numpy errors. The ranges reach
    quantize_static through its calibration cache, so calibration runs once."""
    from onnxruntime.quantization.calibrate import save_tensors_data

    try:
        ranges = _ranges(model, calibration, method, work, scope, step)
    except ValueError:
        # numpy refuses a histogram over an infinite range: minmax finds and names those
        # tensors. Any other ValueError is ORT's own: minmax ranges must not stand in for it.
        _refuse_infinite(_ranges(model, calibration, Method.MINMAX, work, scope), model, scope)
        raise
    _refuse_infinite(ranges, model, scope)
    path = work / "calibration.json"
    save_tensors_data(ranges, path)
    return path


def _ranges(
    model: Path,
    calibration: Sequence[Feeds],
    method: Method,
    work: Path,
    scope: Scope,
    step: Step | None = None,
) -> TensorsData:
    from onnxruntime.quantization.calibrate import create_calibrator

    calibrator = create_calibrator(
        model,
        scope.types(),
        augmented_model_path=str(work / "augmented.onnx"),
        calibrate_method=ort_method(method),
    )
    calibrator.collect_data(_reader(calibration, step))
    return calibrator.compute_data()


def _refuse_infinite(ranges: TensorsData, model: Path, scope: Scope) -> None:
    import numpy as np

    bad = [name for name, r in ranges.data.items() if not np.all(np.isfinite(r.range_value))]
    if bad:  # only what will be quantized needs a finite range
        quantized = scope.tensors(model)
        bad = [name for name in bad if name in quantized]
    if not bad:
        return
    producers = _producers(model)
    shown = ", ".join(_describe(name, ranges.data[name], producers) for name in bad[:5])
    shown += f" and {len(bad) - 5} more" if len(bad) > 5 else ""
    # A large finite fill (torch.finfo.min, -1e4) is no way out: it gets past this check but
    # rounds the tensor's real values to one INT8 step, and the accuracy gate fails instead.
    raise StageFailed(
        f"INT8 calibration ranges are not finite for {len(bad)} tensor(s): {shown}. Static INT8 needs a "
        "finite range per activation, so a tensor holding -inf / inf (e.g. an attention-mask fill) cannot "
        "be quantized, and a large finite fill only trades this error for an accuracy-gate failure. Keep "
        "the nodes that produce and read these tensors in float (stages.quantize.exclude, or op_types: [MatMul, "
        "Gemm] to quantize only those), or use the dynamic recipe (stages.quantize.recipe: dynamic), which "
        "needs no calibrated ranges, or the fp16 stage instead of quantize."
    )


def _describe(name: str, data: TensorData, producers: dict[str, str]) -> str:
    import numpy as np

    low, high = float(np.min(data.range_value[0])), float(np.max(data.range_value[1]))
    return f"{name} [{low:g}, {high:g}] ({producers.get(name, 'a graph input')})"


def _producers(model: Path) -> dict[str, str]:
    """Tensor name -> the node writing it: node names are what an exclusion list takes."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    return {
        out: f"from {node.op_type} node {node.name or '(unnamed)'}"
        for node in graph.node
        for out in node.output
    }


def _reader(samples: Sequence[Feeds], step: Step | None = None) -> CalibrationDataReader:
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.feeds = iter(samples)
            self.read = 0

        def get_next(self) -> Feeds | None:
            if step is not None:
                step(self.read, len(samples), "calibration samples")
            self.read += 1
            return next(self.feeds, None)

    return Reader()
