"""NNCF's post-training quantization of the FP32 IR, and its accuracy control as the
automatic fallback. Imports openvino and nncf.

The fallback's metric is the gate's: the cosine of the candidate's outputs to the FP32
ONNX's in ONNX Runtime on the held-out inputs (the least over the outputs), so NNCF's
`max_drop` is 1 - min_cosine, and what NNCF calls reverted is what the gate needed kept
in float. An integer or boolean output (labels, masks) is judged as the gate judges it, by
its share of samples equal to FP32's, rescaled onto the same number line (`_score`). The top-1 / top-k agreement gates are judged on the result, not steered to."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
from pydantic import JsonValue

from deploy.domain.artifacts import ONNX, OPENVINO
from deploy.gates import accuracy
from deploy.gates.metrics import EXACT_KINDS, cosine, samples_equal, shared_infinities_zeroed
from deploy.pipeline.errors import StageFailed
from deploy.pipeline.graph.contract import StageContext
from deploy.runtimes.files import runtime_for
from deploy.stages.openvino_int8.nncf_params import STAGE, NncfParams, ir_path

if TYPE_CHECKING:
    import openvino as ov

    from deploy.gates.tolerance import AccuracyGate

Feed = dict[str, np.ndarray]
Settings = dict[str, object]  # nncf.quantize's keyword arguments


FAKE_QUANTIZE = "FakeQuantize"  # the op NNCF inserts where it quantizes


def quantize(
    ctx: StageContext, params: NncfParams, calibration: list[Feed], holdout: list[Feed], dest: Path
) -> dict[str, JsonValue]:
    """Writes the INT8 IR to `dest`; what was done, for the accuracy report."""
    import nncf
    import openvino as ov

    nncf.set_log_level(logging.WARNING)  # its per-step INFO lines and progress bars: the log keeps ours
    source = ir_path(ctx.input(OPENVINO))
    settings = _settings(params, len(calibration))
    plain = _run(lambda nncf: nncf.quantize(_read(source), nncf.Dataset(calibration), **settings))
    details: dict[str, JsonValue] = {
        "quantizer": "nncf",
        "preset": params.preset,
        "model_type": params.model_type,
        "fast_bias_correction": params.fast_bias_correction,
        "exclude": list(params.exclude),
        "calibration_samples": len(calibration),
        "fp32_ir_ops_quantized": len(_quantized_ops(plain)),
    }
    ov.save_model(plain, str(dest), compress_to_fp16=False)
    if not params.auto or not _fails(ctx, params, dest, holdout):
        return details
    ctx.log.info("the INT8 IR fails the gate: NNCF's accuracy control keeps the most sensitive ops in float")
    restored = _restore(ctx, params, source, calibration, holdout, settings)
    kept = sorted(_quantized_ops(plain) - _quantized_ops(restored))
    ov.save_model(restored, str(dest), compress_to_fp16=False)
    ctx.report_table(
        "OpenVINO INT8 (NNCF) accuracy control: operations kept in float",
        ["operation"],
        [[name] for name in kept],
        note=f"max_drop {1 - params.gate.min_cosine:.4g} in cosine to FP32; at most {params.max_float_nodes} reverts",
    )
    fallback: dict[str, JsonValue] = {"kept_float": list(kept), "max_float_nodes": params.max_float_nodes}
    return details | {"fallback": fallback}


def compress_weights(ctx: StageContext, dest: Path) -> dict[str, JsonValue]:
    """NNCF's INT8 weight compression (asymmetric, per channel) of the FP32 IR to `dest`."""
    import nncf
    import openvino as ov

    nncf.set_log_level(logging.WARNING)
    model = _read(ir_path(ctx.input(OPENVINO)))
    compressed = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)
    ov.save_model(compressed, str(dest), compress_to_fp16=False)
    return {"quantizer": "nncf", "recipe": "weights only (compress_weights, INT8_ASYM)"}


def _settings(params: NncfParams, samples: int) -> Settings:
    import nncf

    return {
        "preset": {
            "performance": nncf.QuantizationPreset.PERFORMANCE,
            "mixed": nncf.QuantizationPreset.MIXED,
        }[params.preset],
        "model_type": nncf.ModelType.TRANSFORMER if params.model_type == "transformer" else None,
        "ignored_scope": nncf.IgnoredScope(names=list(params.exclude)) if params.exclude else None,
        "subset_size": samples,
        "fast_bias_correction": params.fast_bias_correction,
    }


def _run(step: Callable[[ModuleType], ov.Model]) -> ov.Model:
    """NNCF's errors in the config's words: an unknown name in `exclude` is the usual one."""
    import nncf

    try:
        return step(nncf)
    except nncf.ValidationError as exc:
        raise StageFailed(f"stages.{STAGE}.exclude: {str(exc).strip().splitlines()[0]}") from exc


def _fails(ctx: StageContext, params: NncfParams, candidate: Path, holdout: list[Feed]) -> bool:
    _metrics, bad = accuracy.gate_against_fp32(
        ctx.input(ONNX), candidate, holdout, ctx.config.outputs, params.gate, runtime_for
    )
    return bool(bad)


def _restore(
    ctx: StageContext,
    params: NncfParams,
    source: Path,
    calibration: list[Feed],
    holdout: list[Feed],
    settings: Settings,
) -> ov.Model:
    from nncf.quantization.advanced_parameters import AdvancedAccuracyRestorerParameters

    judge = _Scores(ctx, holdout, params.gate)
    limit = AdvancedAccuracyRestorerParameters(max_num_iterations=params.max_float_nodes)
    return _run(
        lambda nncf: nncf.quantize_with_accuracy_control(
            _read(source),
            nncf.Dataset(calibration),
            nncf.Dataset(list(range(len(holdout)))),  # items are indices: the references are by index
            judge,
            max_drop=max(1.0 - params.gate.min_cosine, 0.0),
            drop_type=nncf.DropType.ABSOLUTE,
            advanced_accuracy_restorer_parameters=limit,
            **settings,
        )
    )


class _Scores:
    """NNCF's validation function: (the gate's score over the items, each item's)."""

    def __init__(self, ctx: StageContext, holdout: list[Feed], gate: AccuracyGate) -> None:
        self.holdout, self.names, self.gate = holdout, ctx.config.output_names(), gate
        fp32 = accuracy.onnx_runtime(ctx.input(ONNX), self.names)
        self.references = [fp32.infer(feed) for feed in holdout]

    def __call__(self, compiled: ov.CompiledModel, items: Iterable[int]) -> tuple[float, list[float]]:
        indices = list(items)
        got = [self._infer(compiled, self.holdout[i]) for i in indices]
        refs = [self.references[i] for i in indices]
        per_item = [min(_score([r[n]], [g[n]], self.gate) for n in self.names) for r, g in zip(refs, got)]
        overall = min(_score([r[n] for r in refs], [g[n] for g in got], self.gate) for n in self.names)
        return overall, per_item

    def _infer(self, compiled: ov.CompiledModel, feed: Feed) -> dict[str, np.ndarray]:
        result = compiled(feed)
        return {name: np.asarray(result[compiled.output(name)]) for name in self.names}


def _score(ref: list[np.ndarray], got: list[np.ndarray], gate: AccuracyGate) -> float:
    """One number NNCF compares to 1 - max_drop: a float output's cosine; an integer or
    boolean one's share of samples equal to FP32's, mapped linearly so that the gate's
    min_exact_agreement lands on min_cosine and 1.0 stays 1.0: an output passes the search
    exactly where it passes the gate (a cosine of labels passed a label moved by two classes)."""
    if np.asarray(ref[0]).dtype.kind not in EXACT_KINDS:
        return _cosine(ref, got)
    equal = [samples_equal(r, g) for r, g in zip(ref, got, strict=True)]
    if any(delta is None for _, delta in equal):
        return -1.0  # another shape: nothing agrees
    samples = np.concatenate([e for e, _ in equal]) if equal else np.ones(0, dtype=bool)
    share = float(samples.mean()) if samples.size else 1.0
    slack, room = 1.0 - gate.min_exact_agreement, 1.0 - gate.min_cosine
    if slack <= 0 or room <= 0:  # no miss allowed on one side: pass or fail, nothing between
        return 1.0 if share >= gate.min_exact_agreement else -1.0
    return 1.0 - (1.0 - share) * room / slack


def _cosine(ref: list[np.ndarray], got: list[np.ndarray]) -> float:
    """gates.metrics' cosine over the concatenated samples; NaN (a non-finite output) ranks
    worst as -1.0, since NNCF's search orders numbers and NaN has no order."""
    found = cosine(
        *shared_infinities_zeroed(
            np.concatenate([r.ravel() for r in ref]), np.concatenate([g.ravel() for g in got])
        )
    )
    return -1.0 if np.isnan(found) else found


def _quantized_ops(model: ov.Model) -> set[str]:
    """Operations fed by a FakeQuantize: those NNCF quantized (their activations)."""
    return {
        op.get_friendly_name()
        for op in model.get_ordered_ops()
        if op.get_type_name() != FAKE_QUANTIZE
        and any(i.get_source_output().get_node().get_type_name() == FAKE_QUANTIZE for i in op.inputs())
    }


def _read(ir: Path) -> ov.Model:
    import openvino as ov

    return ov.Core().read_model(str(ir))
