"""The runtimes' one registry (runtimes/catalog.py, plugins under runtimes/plugins/) agrees
with the pipeline: every artifact a plugin loads is made by some stage, every Triton format
it names is a serving layout, names are unique, one runtime per file suffix. And a runtime
added as one plugin module (ONNX Runtime's CUDA execution provider) is picked up by
validate, bench, select's candidates, `deploy bench` and doctor without a word elsewhere:
on this CPU-only machine each skips it with the reason."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from deploy.pipeline.graph.contract import SOURCE_ARTIFACT
from deploy.pipeline.graph.registry import stage_specs
from deploy.runtimes import host
from deploy.runtimes.catalog import (
    CATALOG,
    IN_PROCESS,
    PARITY,
    PLUGINS,
    SERVED,
    artifact_of,
    for_suffix,
    get,
    serving,
)
from deploy.serving.layout import LAYOUTS
from tests.helpers import ROOT, output_path, run, run_cli

NO_GPU = pytest.mark.skipif(
    host.cuda_gpus() > 0, reason="this machine has an NVIDIA GPU: the runtime would run"
)


def test_every_runtime_loads_an_artifact_a_stage_makes() -> None:
    made = {a.name for spec in stage_specs().values() for a in spec.outputs} | {SOURCE_ARTIFACT}
    assert {artifact_of(r) for r in CATALOG} <= made
    assert len({p.name for p in PLUGINS}) == len(PLUGINS)


def test_served_formats_are_serving_layouts_and_triton_is_not_a_candidate() -> None:
    assert {f for p in PLUGINS for f in p.served_as} <= set(LAYOUTS)
    assert SERVED not in IN_PROCESS and len(IN_PROCESS) == len(PLUGINS) - 1
    # Two runtimes run the FP32 ONNX file: the served model maps back to the CPU one.
    plugin = serving("onnx", "fp32")
    assert plugin is not None and plugin.name == "onnxruntime"
    assert "onnxruntime_cuda" in PARITY and "onnxruntime_cuda" in IN_PROCESS


def test_one_runtime_per_file_suffix() -> None:
    suffixes = {s for p in PLUGINS for s in p.suffixes}
    picked = {s: for_suffix(s) for s in suffixes}
    assert {s: p.name for s, p in picked.items() if p} == {
        ".onnx": "onnxruntime",
        ".xml": "openvino",
        ".pt": "torchscript",
        ".ts": "torchscript",
        ".pt2": "inductor",
    }


@NO_GPU
def test_the_cuda_provider_is_skipped_everywhere_with_its_reason(write_config, tmp_path) -> None:
    """validate and bench skip it with the reason, select lists it as skipped, `deploy bench
    --runtime onnxruntime_cuda` exits 4 saying why, and doctor shows it: the plugin module
    and its line in the catalog are all that named it."""
    stages = {
        "trace": {},
        "export": {"opset": 17, "exporter": "torchscript"},
        "validate": {"runtimes": ["onnxruntime", "onnxruntime_cuda"]},
        "bench": {
            "runtimes": ["onnxruntime", "onnxruntime_cuda"],
            "batches": [1],
            "duration_s": 0.1,
            "iterations": 5,
            "warmup_ms": 5,
        },
        "select": {},
    }
    path = write_config(replace={"stages": stages})
    said = run_cli("validate", str(path))
    assert (
        said.returncode == 0 and "onnxruntime_cuda: device cuda: no NVIDIA GPU" in said.stdout + said.stderr
    )
    # validate's own runtimes too, not only bench's (it said nothing of them before a run)
    assert "stages.validate.runtimes: onnxruntime_cuda: device cuda: no NVIDIA GPU" in said.stdout, (
        said.stdout
    )
    results = run(path)
    parity = json.loads(output_path(path, results, "validate", "report").read_text())
    assert parity["onnxruntime_cuda"]["skipped"].startswith("device cuda: no NVIDIA GPU")
    assert parity["onnxruntime"]["passed"]
    bench = json.loads(output_path(path, results, "bench", "results").read_text())
    assert bench["skipped"]["onnxruntime_cuda"].startswith("device cuda: no NVIDIA GPU")
    assert {r["runtime"] for r in bench["results"]} == {"onnxruntime"}
    chosen = json.loads(output_path(path, results, "select", "selection").read_text())
    verdicts = {c["runtime"]: c["verdict"] for c in chosen["objectives"][0]["candidates"]}
    assert verdicts["onnxruntime_cuda"] == "skipped", verdicts
    model = output_path(path, results, "export", "onnx")
    file_run = run_cli("bench", str(model), "--runtime", "onnxruntime_cuda", "--shapes", "image:1x1x8x8")
    assert (
        file_run.returncode == 4
        and "--runtime onnxruntime_cuda: device cuda: no NVIDIA GPU" in file_run.stderr
    )
    doctor = {c["name"]: c for c in json.loads(run_cli("doctor", "--json").stdout)}
    assert not doctor["runtime onnxruntime_cuda"]["ok"] and doctor["runtime onnxruntime"]["ok"]


def test_a_new_runtime_is_its_plugin_module_and_one_catalog_line() -> None:
    """The files that name `onnxruntime_cuda` in deploy/: the plugin and the catalog."""
    found = subprocess.run(
        ["grep", "-rl", "--include=*.py", "onnxruntime_cuda", str(ROOT / "deploy")],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    named = sorted(str(p).removeprefix(str(ROOT) + "/") for p in found)
    assert named == ["deploy/runtimes/catalog.py", "deploy/runtimes/plugins/onnxruntime_cuda.py"], named
    # The catalog imports no runtime library: plugins import theirs inside their hooks.
    heavy = "import sys, deploy.runtimes.catalog; print(sorted(m for m in ('torch', 'onnxruntime', 'openvino') if m in sys.modules))"
    assert (
        subprocess.run([sys.executable, "-c", heavy], capture_output=True, text=True, cwd=ROOT).stdout.strip()
        == "[]"
    )


def test_openvino_bf16_is_said_available_from_the_cpu_flags_as_openvino_says_it() -> None:
    """The bf16 row's `unavailable` reads /proc/cpuinfo first (validate imported OpenVINO
    for it); where the flags say yes, OpenVINO's own capabilities must say so too, and its
    answer stands where they do not."""
    import openvino as ov

    from deploy.domain.vocabulary import Precision
    from deploy.runtimes.base import Device

    said = get("openvino_bf16").unavailable(Device.CPU)
    capable = "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    assert (said is None) == capable, said
    if host.lacks_native(Precision.BF16, Device.CPU) is None:
        assert capable  # the flags' yes is OpenVINO's yes


def test_a_plugin_that_breaks_its_contract_is_named_not_a_traceback(tmp_path) -> None:
    """A user's runtime whose hooks misbehave: an availability check that raises was a
    traceback (exit 70) in validate, plan and doctor; a parity hook answering None read
    "NoneType cannot run the model ... the export froze a shape"; lists for arrays an
    AttributeError; float16 for a float32 output passed parity. A real ONNX Runtime session
    on a real graph stands behind the plugin's wrong answers."""
    import dataclasses

    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    from deploy.gates.references import Case
    from deploy.pipeline.errors import StageFailed
    from deploy.runtimes.base import Device
    from deploy.runtimes.onnxrt import OnnxRuntime
    from deploy.stages.validate import _made, _PluginSession, _typed

    def raises(device: Device) -> str | None:
        raise RuntimeError("no driver table")

    broken = dataclasses.replace(get("onnxruntime"), name="mine", unavailable=raises)
    assert broken.reason_unavailable(Device.CPU) == (
        "runtime mine's availability check raised RuntimeError: no driver table"
    )
    with pytest.raises(StageFailed, match=r"runtime mine's parity hook returned NoneType, not a session"):
        _made("mine", lambda ctx: None, None)  # type: ignore[arg-type,return-value]
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 3])],
    )  # fmt: skip
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    real = OnnxRuntime(path, outputs=("y",))
    x = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    golden = {"min": Case({"x": x}, {"y": np.maximum(x, 0)})}

    class Listed:  # answers lists where arrays are due
        outputs = ("y",)

        def infer(self, feeds):
            return {k: v.tolist() for k, v in real.infer(feeds).items()}

    with pytest.raises(
        StageFailed, match=r"runtime mine answered a dict of list; a session answers a dict of numpy"
    ):
        _PluginSession("mine", Listed()).infer({"x": x})  # type: ignore[arg-type]
    halved = {
        "min": {k: v.astype(np.float16) for k, v in _PluginSession("mine", real).infer({"x": x}).items()}
    }
    with pytest.raises(
        StageFailed, match=r"runtime mine answers y float16 \(eager: float32\): not the type eager"
    ):
        _typed("mine", halved, golden)
    _typed("onnxruntime", {"min": real.infer({"x": x})}, golden)  # the real one passes
