"""manifest.json beside an engine: written and read back field for field, the largest
batch every chosen profile takes, and a file of another layout refused with its path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy.pipeline.graph.records import SchemaMismatch
from deploy.runtimes.engine_manifest import SCHEMA, EngineManifest, ShapeRange


def manifest() -> EngineManifest:
    return EngineManifest(
        tensorrt="10.9.0",
        gpu="NVIDIA H100 (sm 9.0)",
        source="fp32",
        source_onnx_sha256="ab" * 32,
        strongly_typed=False,
        fp16_flag=True,
        version_compatible=False,
        hardware_compatibility="none",
        profiles={
            "0": {
                "image": ShapeRange([1, 3, 8, 8], [4, 3, 8, 8], [16, 3, 8, 8]),
                "mask": ShapeRange([1, 8], [4, 8], [12, 8]),
            },
            "1": {
                "image": ShapeRange([1, 3, 8, 8], [2, 3, 8, 8], [4, 3, 8, 8]),
                "mask": ShapeRange([1, 8], [2, 8], [4, 8]),
            },
        },
    )


def test_a_manifest_round_trips_through_json(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest().to_json()))
    back = EngineManifest.read(path)
    assert back == manifest() and json.loads(path.read_text())["schema"] == SCHEMA
    assert isinstance(back.profiles["1"]["mask"], ShapeRange)


def test_max_batch_is_the_smallest_max_of_every_input_of_the_chosen_profiles() -> None:
    found = manifest()
    assert found.max_batch() == 4  # profile 1 caps all
    assert found.max_batch([0]) == 12  # the mask's max, below the image's 16
    assert found.max_batch([1]) == 4 and found.max_batch([0, 1]) == 4


def test_another_schema_or_layout_is_refused_with_the_path(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    data = manifest().to_json()
    path.write_text(json.dumps({**data, "schema": SCHEMA + 1}))
    with pytest.raises(SchemaMismatch, match=f"{path}: schema {SCHEMA + 1}"):
        EngineManifest.read(path)
    path.write_text(json.dumps({k: v for k, v in data.items() if k != "gpu"}))
    with pytest.raises(SchemaMismatch, match=f"{path}: not an engine manifest"):
        EngineManifest.read(path)
    broken = {**data, "profiles": {"0": {"image": {"min": [1], "opt": [1]}}}}
    path.write_text(json.dumps(broken))
    with pytest.raises(SchemaMismatch, match="not an engine manifest"):
        EngineManifest.read(path)
