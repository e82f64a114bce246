"""triton_config measures every served precision for batch independence before it turns
on dynamic batching: ONNX Runtime's dynamic INT8 quantizes activations with one scale for
the whole batch, so its answers move with the other requests a server merges."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from deploy.gates.batch_independence import not_measured
from deploy.gates.references import Case
from deploy.pipeline.errors import ConfigError
from deploy.stages.triton_config import batching
from tests.helpers import export_two_heads, two_heads_net


def golden(batch: int = 4) -> dict[str, Case]:
    rng = np.random.default_rng(0)
    scale = 1 + 9 * np.arange(batch)[:, None]  # rows of other magnitudes: no one scale fits them all
    feeds = {n: (rng.standard_normal((batch, 4)) * scale).astype(np.float32) for n in "ab"}
    return {"opt": Case(feeds, {}), "max": Case(feeds, {})}


def test_dynamic_int8_is_batch_dependent_and_refused_with_the_fixes(tmp_path: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32 = export_two_heads(two_heads_net(), tmp_path / "fp32.onnx")
    int8 = tmp_path / "int8.onnx"
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    found = batching.records(not_measured("(not asked)"), {"int8": int8}, golden(), ["mix", "gate"])
    assert found["int8"].measured and found["int8"].dependent(), found["int8"]
    with pytest.raises(ConfigError) as info:
        batching.refuse(found)
    text = str(info.value)
    assert "output 'mix' of the int8 model depends on the rest of its batch" in text
    assert "dynamic_batching: null" in text and "recipe: static" in text


def test_an_fp32_onnx_file_is_per_sample(tmp_path: Path) -> None:
    fp32 = export_two_heads(two_heads_net(), tmp_path / "fp32.onnx")
    found = batching.records(not_measured("(not asked)"), {"fp16": fp32}, golden(), ["mix", "gate"])
    assert found["fp16"].measured and not found["fp16"].dependent()
    batching.refuse(found)  # nothing to refuse
