"""manifest.json beside a TensorRT engine: what it was built from and with (TensorRT,
GPU, source ONNX digest, flags) and each optimization profile's shapes. The build stage
writes it; triton_config reads it to check max_batch_size against the profiles. Stdlib."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from deploy.pipeline.records import SchemaMismatch, expect_schema

# Bumped with the build stage's version (see pipeline/records.py).
SCHEMA = 1


@dataclass(frozen=True)
class ShapeRange:
    min: list[int]
    opt: list[int]
    max: list[int]


@dataclass(frozen=True)
class EngineManifest:
    tensorrt: str
    gpu: str | None
    source: str  # which ONNX the engine was built from: fp32, int8 (Q/DQ) or fp16
    source_onnx_sha256: str
    strongly_typed: bool
    fp16_flag: bool
    version_compatible: bool
    hardware_compatibility: str
    profiles: dict[str, dict[str, ShapeRange]]  # profile -> input -> its shapes

    def max_batch(self, profiles: list[int] | None = None) -> int:
        """The largest batch every input of every chosen profile (by index) takes."""
        ranges = list(self.profiles.values())
        used = [ranges[i] for i in profiles] if profiles else ranges
        return min(min(shape.max[0] for shape in p.values()) for p in used)

    def to_json(self) -> dict[str, object]:
        return {"schema": SCHEMA, **asdict(self)}

    @classmethod
    def read(cls, path: Path) -> EngineManifest:
        data = dict(expect_schema(json.loads(path.read_text()), str(path), SCHEMA))
        data.pop("schema")
        try:
            data["profiles"] = {p: _shapes(s) for p, s in data["profiles"].items()}  # type: ignore[attr-defined]
            return cls(**data)  # type: ignore[arg-type]
        except (KeyError, TypeError, AttributeError) as exc:
            raise SchemaMismatch(f"{path}: not an engine manifest ({type(exc).__name__}: {exc})") from exc


def _shapes(data: dict[str, Any]) -> dict[str, ShapeRange]:
    return {name: ShapeRange(**shape) for name, shape in data.items()}
