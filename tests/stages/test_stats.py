"""The stats stage on the tiny CNN: its counts against independent ones (the ONNX
initializers, PyTorch forward hooks) and the roofline verdicts against targets chosen
to be memory- or compute-bound."""

from __future__ import annotations

import json

import pytest

from deploy.pipeline.errors import ConfigError
from deploy.pipeline.graph.project import load_project
from tests.helpers import output_path, run

STARVED = {"name": "starved", "peak_tflops": 100, "bandwidth_gbps": 0.001}  # ridge 1e8 FLOP/byte
FLOODED = {"name": "flooded", "peak_tflops": 0.001, "bandwidth_gbps": 1e6}  # ridge 1e-6 FLOP/byte


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    import yaml

    from tests.helpers import tiny_dict

    tmp = tmp_path_factory.mktemp("stats")
    data = tiny_dict(tmp)
    # The legacy exporter's graph: every weight an initializer (torch.export keeps some small
    # constants as Constant nodes, which onnx-tool counts as parameters too).
    export = {"exporter": "torchscript"}
    data["stages"] = {"trace": {}, "export": export, "stats": {"shape": "opt", "targets": [STARVED, FLOODED]}}
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    results = run(path)
    stats = json.loads(output_path(path, results, "stats", "stats").read_text())
    return stats, output_path(path, results, "export", "onnx"), results


def test_parameters_are_the_onnx_initializers(counted):
    import numpy as np
    import onnx
    from onnx import numpy_helper

    stats, onnx_path, _ = counted
    model = onnx.load(str(onnx_path))
    weights = sum(
        int(np.prod(numpy_helper.to_array(t).shape))
        for t in model.graph.initializer
        if t.data_type == onnx.TensorProto.FLOAT
    )
    assert stats["totals"]["params"] == weights > 1000


def test_conv_and_gemm_flops_match_pytorch_hooks(counted):
    """2 x MACs of every Conv2d / Linear, counted from the eager model at the opt shape
    (batch 4): out elements x (in channels / groups) x kernel area, or x in features,
    plus one per output element for the bias (onnx-tool counts the bias add as a MAC;
    the first conv has one after BatchNorm is folded into it)."""
    import torch

    from configs.models.tiny_cnn import tiny_cnn

    stats, _, _ = counted
    macs = []

    def hook(module, args, out):
        if isinstance(module, torch.nn.Conv2d):
            macs.append(
                out.numel()
                * module.in_channels
                // module.groups
                * module.kernel_size[0]
                * module.kernel_size[1]
            )
        else:
            macs.append(out.numel() * module.in_features)
        macs.append(out.numel())

    model = tiny_cnn(width=8).eval()
    for m in model.modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
            m.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.zeros(4, 1, 8, 8))
    counted_flops = {r["op_type"]: r["flops"] for r in stats["op_types"]}
    assert counted_flops["Conv"] + counted_flops["Gemm"] == 2 * sum(macs)
    assert stats["batch"] == 4


def test_roofline_verdicts_follow_the_ridge_point(counted):
    stats, _, results = counted
    by_op = {r["op_type"]: r for r in stats["op_types"]}
    assert by_op["Conv"]["targets"]["starved"]["bound"] == "memory"
    assert by_op["Conv"]["targets"]["flooded"]["bound"] == "compute"
    starved = stats["totals"]["targets"]["starved"]
    assert starved["memory_bound_time_share"] == pytest.approx(1.0)
    # Memory-bound everywhere: the roofline time is the bytes over the bandwidth.
    assert starved["roofline_s"] == pytest.approx(stats["totals"]["bytes"] / 1e6, rel=1e-6)
    titles = [t["title"] for t in results["stats"].metrics["report"]]
    assert titles[1] == "Per op type" and titles[0].startswith("Model statistics at the 'opt' shape")


def test_a_bad_target_names_its_field(write_config):
    path = write_config(
        replace={
            "stages": {
                "trace": {},
                "export": {},
                "stats": {"targets": [{"name": "x", "peak_tflops": -1, "bandwidth_gbps": 1}]},
            }
        }
    )
    with pytest.raises(
        ConfigError, match=r"stages\.stats\.targets\[0\]\.peak_tflops: Input should be greater than 0"
    ):
        load_project(path)
