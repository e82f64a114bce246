"""How far the eager model's float32 answers are from its own float64 answers: the size of
float rounding for this model at each golden case. A runtime whose difference from eager
is of that size is rounding differently; one far past it computes something else, and
loosening a tolerance would hide that (gates/diagnosis.py tells the two apart).

Imported only from inside stage run functions: it imports torch.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import numpy as np
import torch

from deploy.pipeline.errors import first_line

# A copy of the model in float64 costs twice its float32 bytes again: past this, not measured.
MAX_BYTES = 1 << 30
Rounding = tuple[float, float]  # (max |Δ|, max |Δ| / max |float64 answer|)


def measure(
    model: torch.nn.Module, golden: Mapping[str, tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray]]]
) -> tuple[dict[str, dict[str, Rounding]], str]:
    """Per case and output, eager float32 vs float64 (`golden`: case -> (inputs, float32
    outputs), the model called with the inputs in declared order); or why not measured."""
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    if size > MAX_BYTES:
        return {}, f"not measured: the model's {size / 2**30:.1f} GiB would be copied in float64"
    try:
        wide = copy.deepcopy(model).double()
        found = {case: _case(wide, ins, outs) for case, (ins, outs) in golden.items()}
    except Exception as exc:  # an op without a float64 kernel, a buffer that must stay float32
        return (
            {},
            f"not measured: the model does not run in float64 ({type(exc).__name__}: {first_line(exc)})",
        )
    return found, ""


def _case(
    wide: torch.nn.Module, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]
) -> dict[str, Rounding]:
    args = [_widened(a) for a in inputs.values()]
    with torch.no_grad():
        result = wide(*args)
    answers = result if isinstance(result, tuple | list) else (result,)
    return {name: _rounding(out, ref) for (name, out), ref in zip(outputs.items(), answers)}


def _widened(array: np.ndarray) -> torch.Tensor:
    tensor = torch.from_numpy(np.require(array, requirements="C"))
    return tensor.double() if tensor.is_floating_point() else tensor


def _rounding(float32: np.ndarray, wide: torch.Tensor) -> Rounding:
    ref = wide.detach().double().numpy()
    if ref.shape != float32.shape:
        return float("nan"), float("nan")
    with np.errstate(invalid="ignore"):  # inf - inf: the same infinity (a mask), no rounding
        diff = np.where(float32 == ref, 0.0, np.abs(float32.astype(np.float64) - ref))
    max_abs = float(np.nan_to_num(diff, nan=0.0).max(initial=0.0))
    scale = float(np.abs(ref[np.isfinite(ref)]).max(initial=0.0))  # -inf at padding is no scale
    return max_abs, max_abs / scale if scale > 0 else 0.0
