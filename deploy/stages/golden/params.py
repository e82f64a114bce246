"""The golden stage's parameters (its YAML section)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class GoldenParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    sampled_shapes: int = Field(
        2,
        ge=0,
        le=16,
        description="Shapes drawn (seeded by model.seed) inside [min, max] for every dynamic dim, beside min / opt / "
        "max: every parity check (export, simplify, validate, smoke) runs at them too, so a shape the export froze "
        "fails between the three points as well. 0: the three points only.",
    )
    edges: bool = Field(
        True,
        description="Also check at the opt shape with every input moved to the edges of its values (all negative, "
        "then all positive; the low and high end of a value_range; a mask with one token, then none padded), so a "
        "branch the export froze fails on the inputs that take the other one. An edge case whose eager answers "
        "compare nothing (constant, NaN) is left out, saying so.",
    )
