"""smoke's service references (stages/smoke/service_reference.py) are computed once per run
and cached: the cache must never answer one served file with another's answers. Real PNG
bytes, the tiny model's real ONNX file in ONNX Runtime and the eager model (random weights:
mechanics only)."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from PIL import Image

from deploy.pipeline.graph.contract import StageContext
from deploy.pipeline.graph.project import load_project
from deploy.runtimes.onnxrt import OnnxRuntime
from deploy.serving.service_client import Sample
from deploy.serving.service_record import ImageRecord
from deploy.stages.smoke.service_reference import References
from tests.helpers import output_path, run

PRE = ImageRecord(
    feed="image", color="grayscale", resize=8, crop=8, scale=1 / 255, mean=(0.5,), std=(0.25,),
    layout="NCHW", max_bytes=2**20, max_pixels=2**20,
)  # fmt: skip


def _png(seed: int) -> Sample:
    pixels = np.random.default_rng(seed).integers(0, 256, (8, 8), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels, mode="L").save(buffer, format="PNG")
    return Sample(f"digit{seed}.png", buffer.getvalue())


def _doubled(source: Path, dest: Path) -> Path:
    """The same graph with its first weight doubled: another file, other answers."""
    model = onnx.load(str(source))
    first = model.graph.initializer[0]
    first.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(first) * 2, first.name))
    onnx.save(model, str(dest))
    return dest


@pytest.fixture
def files(write_config, tmp_path: Path) -> tuple[StageContext, Path, Path]:
    path = write_config()
    results = run(path, stop="simplify")
    onnx_file = output_path(path, results, "simplify", "onnx")
    ctx = StageContext(load_project(path).config, {}, tmp_path, {}, logging.getLogger("test"))
    return ctx, onnx_file, _doubled(onnx_file, tmp_path / "doubled.onnx")


def test_each_served_file_is_answered_by_its_own_runtime(files, tmp_path):
    """Asked for the same request on the eager model, the ONNX file and a changed copy of it
    (cached in between), each answer is that source's own: ONNX Runtime's on that file."""
    ctx, onnx_file, doubled = files
    refs, items = References(ctx), [_png(1), _png(2)]
    eager = refs.outputs(PRE, tmp_path, items, None, "fp32")["logits"]
    first = refs.outputs(PRE, tmp_path, items, onnx_file, "fp32")["logits"]
    second = refs.outputs(PRE, tmp_path, items, doubled, "fp32")["logits"]
    again = refs.outputs(PRE, tmp_path, items, onnx_file, "fp32")["logits"]
    feeds = {"image": _feeds(items)}
    for file, got in ((onnx_file, first), (doubled, second)):
        np.testing.assert_allclose(
            got, OnnxRuntime(file, outputs=["logits"]).infer(feeds)["logits"], atol=1e-5
        )
    np.testing.assert_allclose(first, eager, atol=1e-4)  # the FP32 file answers as eager does
    assert not np.allclose(second, first, atol=1e-3)  # so the copy's are its own, not cached ones
    assert np.array_equal(again, first)


def _feeds(items: list[Sample]) -> np.ndarray:
    """The pre step's arithmetic, written out: grayscale pixels / 255, minus 0.5, over 0.25."""
    pixels = [np.asarray(Image.open(io.BytesIO(s.data)), dtype=np.float32) for s in items]
    return ((np.stack(pixels)[:, None] / 255 - 0.5) / 0.25).astype(np.float32)
