"""manifest.json beside a TensorRT engine: what it was built from and with (TensorRT,
GPU, source ONNX digest, flags) and each optimization profile's shapes. The build stage
writes it; triton_config reads it to check max_batch_size against the profiles. Stdlib."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from deploy.pipeline.graph.records import read_record, record_json

# Bumped with the build stage's version (see pipeline/graph/records.py).
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
        return record_json(self, SCHEMA)

    @classmethod
    def read(cls, path: Path) -> EngineManifest:
        return read_record(path, cls, SCHEMA, "an engine manifest")
