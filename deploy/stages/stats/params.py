"""The stats stage's parameters (its YAML section), apart from its run so that its helpers can
import them."""

from __future__ import annotations

from pydantic import Field

from deploy.spec.tensors import Frozen, Label


class Hardware(Frozen):
    name: str = Field(min_length=1, description="Label of the target in the report.")
    peak_tflops: float = Field(
        gt=0, description="Peak TFLOP/s at the precision the model runs in (data sheet)."
    )
    bandwidth_gbps: float = Field(gt=0, description="Memory bandwidth, GB/s (data sheet).")


# NVIDIA's H100 SXM data sheet: 989 dense FP16 tensor TFLOP/s, 3.35 TB/s HBM3.
H100_FP16 = Hardware(name="H100 SXM FP16", peak_tflops=989, bandwidth_gbps=3350)


class StatsParams(Frozen):
    shape: Label = Field("opt", description="Which shape of the shape spec to count FLOPs and bytes at.")
    targets: tuple[Hardware, ...] = Field(
        (H100_FP16,), min_length=1, description="Hardware for the roofline: declared figures, not measured."
    )
