"""The openvino_int8 stage's parameters (pydantic only: read at discovery)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from deploy.datasources.calibrated import Calibrated

IR_FILE = "model.xml"  # with model.bin beside it
STAGE = "openvino_int8"


class NncfParams(Calibrated):
    preset: Literal["performance", "mixed"] = Field(
        "performance",
        description="NNCF's preset: performance (symmetric weights and activations), mixed (asymmetric "
        "activations: better for activations that are not centred, such as after GELU).",
    )
    model_type: Literal["transformer"] | None = Field(
        None,
        description="transformer: NNCF's recipe for transformers (attention softmax / normalisations kept "
        "in float); null: the default recipe (CNNs).",
    )
    fast_bias_correction: bool = Field(
        True,
        description="NNCF's fast bias correction (its default); false: the full one. Neither wins everywhere: "
        "cosine to FP32 on MiniLM (transformer recipe) 0.996 fast, 0.960 full; on a CNN trained on digits "
        "0.990 fast, 0.996 full.",
    )
    exclude: tuple[str, ...] = Field(
        (), description="Operation names (in the IR) kept in float: NNCF's ignored scope."
    )


def ir_path(tree: Path) -> Path:
    """The IR file of a tree artifact (model.xml, model.bin beside it)."""
    return tree / IR_FILE if tree.is_dir() else tree
