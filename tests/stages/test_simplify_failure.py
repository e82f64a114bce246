"""simplify when onnxsim itself fails, on a real (invalid) ONNX file and real onnxsim."""

from __future__ import annotations

import logging

import onnx
import pytest
from onnx import TensorProto, helper

from deploy.pipeline.errors import StageFailed
from deploy.pipeline.graph.contract import StageContext
from deploy.pipeline.graph.project import load_project
from deploy.stages import simplify


def broken_model(path):
    # A node reading a tensor nothing produces: onnxsim's checker rejects the graph.
    node = helper.make_node("Relu", ["dangling"], ["logits"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def context(tmp_path, config):
    src = tmp_path / "in.onnx"
    broken_model(src)
    work = tmp_path / "work"
    work.mkdir()
    outputs = {a.name: a for a in simplify.SPEC.outputs}
    return StageContext(
        config, {"onnx": src, "golden": tmp_path / "unused.npz"}, work, outputs, logging.getLogger("t")
    )


def test_onnxsim_failure_fails_the_stage_with_its_message(tmp_path, write_config):
    ctx = context(tmp_path, load_project(write_config()).config)
    with pytest.raises(StageFailed, match=r"onnxsim failed: .*dangling"):
        simplify.run(ctx, simplify.SimplifyParams())


def test_onnxsim_failure_passes_through_when_configured(tmp_path, write_config):
    ctx = context(tmp_path, load_project(write_config()).config)
    simplify.run(ctx, simplify.SimplifyParams(on_failure="passthrough"))
    assert ctx.output("onnx").read_bytes() == ctx.input("onnx").read_bytes()
    assert ctx.metrics["headline"].startswith("not simplified: onnxsim failed")
