"""The compiled PyTorch path on this CPU: the inductor stage's AOTInductor package of the
tiny CNN trained on sklearn's digits answers real held-out digits like eager at every batch
size of its range, is served through Triton's python backend under concurrent clients,
is timed in process and served, and is weighed by select."""

from __future__ import annotations

import copy
import json
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import yaml

from deploy.domain.vocabulary import Precision
from deploy.gates import accuracy, inductor_precision
from deploy.gates.accuracy_report import AccuracyReport
from deploy.gates.tolerance import AccuracyGate
from deploy.pipeline.errors import StageFailed
from deploy.pipeline.graph.project import load_project
from deploy.pipeline.report.results import StageResult, Status
from deploy.runtimes import host, inductorrt
from deploy.runtimes.base import Device
from tests.helpers import Cli, digits_eager, output_path, run, shared_digits, tiny_dict

FAST = {"warmup_ms": 10, "duration_s": 0.05, "iterations": 5, "batches": [1]}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path, accuracy = shared_digits(tmp_path_factory, 8)
    assert accuracy > 0.88
    return path


def _config(tmp_path: Path, checkpoint: Path) -> Path:
    data = tiny_dict(tmp_path, smoke=True)
    data["model"]["checkpoint"] = str(checkpoint)
    stages = data["stages"]
    held_out = {"kind": "arrays", "path": str(checkpoint.parent / "test.npy"), "count": 128}
    gate = {"min_cosine": 0.999, "min_top1_agreement": 0.97}
    runtimes = ["onnxruntime", "inductor", "inductor_bf16", "triton"]
    data["stages"] = {
        "export": stages["export"],
        "inductor": {},
        # This CPU may lack bf16: emulated, the package is still built and judged.
        "inductor_bf16": {"holdout": held_out, "gate": gate, "emulated": True},
        "triton_config": {
            **stages["triton_config"],
            "formats": ["python_inductor"],
            "precisions": ["fp32", "bf16"],
        },
        "smoke": {**stages["smoke"], "clients": 3, "batching_requests": 6},
        "bench": {**FAST, "runtimes": runtimes, "triton": {"concurrency": [1]}},
        "select": {"objectives": [{"name": "t", "metric": "throughput"}]},
    }
    path = tmp_path / "digits.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.matrix  # end to end (deployed, served, timed): `pytest -m matrix`, as .ci/run runs it after the README's command
@pytest.mark.triton
def test_the_package_answers_real_digits_like_eager_is_served_benched_and_weighed(
    tmp_path: Path, checkpoint: Path
) -> None:
    path = _config(tmp_path, checkpoint)
    results = run(path)
    package = output_path(path, results, "inductor", "inductor")
    record = inductorrt.PackageRecord.read(package.parent)
    assert record.device is Device.CPU and record.compile_s > 0 and record.batch == (1, 16)
    assert results["inductor"].metrics["compile_s"] == record.compile_s

    held_out = np.load(checkpoint.parent / "test.npy").astype(np.float32)  # digits / 16, never trained on
    model = inductorrt.load(package, ["image"], ["logits"], Device.CPU)
    for size in (1, 5, 16):  # the batch range it was compiled for, not only the traced batch
        x = held_out[:size]
        got, want = model.infer({"image": x})["logits"], digits_eager(checkpoint, x)
        assert np.abs(got - want).max() < 1e-4 and (got.argmax(1) == want.argmax(1)).all()

    smoke = results["smoke"].metrics["smoke"]["models"]["tiny_python_inductor"]
    assert smoke["status"] == "passed" and smoke["traffic"]["mismatch_count"] == 0

    bench = json.loads(output_path(path, results, "bench", "results").read_text())
    rows = {(r["runtime"], r.get("model")) for r in bench["results"]}
    assert ("inductor", None) in rows and ("triton", "tiny_python_inductor") in rows, rows
    chosen = json.loads(output_path(path, results, "select", "selection").read_text())
    verdicts = {c["runtime"]: c["verdict"] for c in chosen["objectives"][0]["candidates"]}
    for weighed in ("inductor", "inductor_bf16"):  # weighed, not skipped
        assert verdicts[weighed] in ("selected", "slower", "unstable", "contended", "implausible"), verdicts
    _bf16_is_reduced_gated_and_served(path, results, checkpoint)


def _bf16_is_reduced_gated_and_served(path: Path, results: dict[str, StageResult], checkpoint: Path) -> None:
    """The bf16 package computes in bf16 (it differs from FP32), keeps the real digits' classes
    by the accuracy gate, answers through Triton as it does here, and a stricter gate fails it."""
    package = output_path(path, results, "inductor_bf16", "inductor_bf16")
    record = inductorrt.PackageRecord.read(package.parent)
    assert record.precision == "bf16" and record.device is Device.CPU and record.inputs == ("image",)
    held_out = np.load(checkpoint.parent / "test.npy").astype(np.float32)[:64]
    got = inductorrt.load_file(package, ["logits"]).infer({"image": held_out})["logits"]
    want = digits_eager(checkpoint, held_out)
    assert got.dtype == np.float32 and 1e-3 < np.abs(got - want).max() < 0.5  # bf16's rounding, not FP32's
    assert (got.argmax(1) == want.argmax(1)).mean() >= 0.97
    report = AccuracyReport.read(output_path(path, results, "inductor_bf16", "accuracy_inductor_bf16"))
    logits = report.outputs["logits"]
    assert report.holdout_samples == 128 and not report.evidence.synthetic
    lacking = host.lacks_native(Precision.BF16, Device.CPU)  # this CPU's arithmetic: said, not hidden
    assert report.details["emulated"] is (lacking is not None)
    assert ("EMULATED: this CPU has no bf16" in str(results["inductor_bf16"].metrics["headline"])) is bool(
        lacking
    )
    assert logits.cosine is not None and logits.cosine >= 0.999 and logits.top1_agreement >= 0.97
    smoke = results["smoke"].metrics["smoke"]["models"]["tiny_python_inductor_bf16"]
    assert smoke["status"] == "passed" and smoke["traffic"]["mismatch_count"] == 0
    # The same gate with a bound bf16 cannot meet fails, naming the output and the bound (the
    # stage raises on these failures: accuracy.conclude, shared with quantize and fp16).
    onnx = output_path(path, results, "export", "onnx")
    load = partial(inductor_precision.session, ["image"], Device.CPU)
    strict = AccuracyGate(min_cosine=0.999, max_abs=1e-5)
    outputs = load_project(path).config.outputs
    _, failed = accuracy.gate_against_fp32(onnx, package, [{"image": held_out}], outputs, strict, load)
    assert (
        len(failed) == 1
        and failed[0].startswith("logits: max_abs ")
        and failed[0].endswith("> max_abs 1e-05")
    )


def test_a_package_for_another_device_is_refused_naming_the_setting(tmp_path: Path) -> None:
    inductorrt.PackageRecord(Device.CUDA, "fp32", 1.0, "2.14.1", (1, 16), ("input",)).write(tmp_path)
    (tmp_path / inductorrt.PACKAGE_FILE).write_bytes(b"never read")
    with pytest.raises(StageFailed, match=r"compiled for cuda, not cpu \(stages.inductor.device: cpu"):
        inductorrt.load(tmp_path, ["input"], ["logits"], Device.CPU)


def test_a_damaged_package_fails_to_load_with_its_path(tmp_path: Path) -> None:
    inductorrt.PackageRecord(Device.CPU, "fp32", 1.0, "2.14.1", (1, 16), ("input",)).write(tmp_path)
    (tmp_path / inductorrt.PACKAGE_FILE).write_bytes(b"not a zip archive")
    with pytest.raises(StageFailed, match=r"AOTInductor cannot load .*model\.pt2"):
        inductorrt.load(tmp_path, ["input"], ["logits"], Device.CPU)


@pytest.mark.skipif(host.cuda_gpus() > 0, reason="this machine has an NVIDIA GPU")
def test_a_cuda_package_without_a_gpu_is_said_up_front_and_skipped(tmp_path: Path, cli: Cli) -> None:
    data = tiny_dict(tmp_path)
    stages = data["stages"]
    data["stages"] = {
        "export": stages["export"],
        "inductor": {"device": "cuda"},
        "inductor_bf16": {},
        "triton_config": stages["triton_config"],
    }
    data["stages"]["triton_config"]["formats"] = ["python", "python_inductor"]
    path = tmp_path / "cuda.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    said = cli("validate", str(path))
    assert said.returncode == 0, said.stdout + said.stderr
    assert "note: stages.inductor.device: device cuda: no NVIDIA GPU on this machine" in said.stdout
    assert "note: stages.inductor_bf16: device cuda: no NVIDIA GPU on this machine" in said.stdout
    results = run(path)
    assert results["inductor"].status is Status.SKIPPED and "no NVIDIA GPU" in results["inductor"].message
    bf16 = results["inductor_bf16"]  # its reason said by validate; at run time, its FP32 package is missing
    assert bf16.status is Status.SKIPPED and bf16.message == "inputs unavailable: inductor.inductor"
    assert results["triton_config"].status is Status.RAN  # the rest is written, without that format
    assert results["triton_config"].metrics["models"] == ["tiny_python"]


@pytest.mark.skipif(
    host.lacks_native(Precision.BF16, Device.CPU) is None, reason="this CPU computes bf16 natively"
)
def test_bf16_on_a_cpu_without_it_is_said_up_front_with_the_setting_that_builds_it(
    tmp_path: Path, cli: Cli
) -> None:
    data = tiny_dict(tmp_path)
    data["stages"] = {"export": data["stages"]["export"], "inductor": {}, "inductor_bf16": {}}
    path = tmp_path / "bf16.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    said = cli("validate", str(path))
    assert said.returncode == 0, said.stdout + said.stderr
    assert (
        "note: stages.inductor_bf16: this CPU has no bf16 arithmetic (none of avx512_bf16, amx_bf16"
        in said.stdout
    )
    assert "(stages.inductor_bf16.emulated: true builds and gates it anyway)" in said.stdout
    data["stages"]["inductor_bf16"] = {"emulated": True}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert "inductor_bf16" not in cli("validate", str(path)).stdout.split("\n", 1)[1]  # asked for: no note


@pytest.mark.parametrize("precision", [Precision.FP16, Precision.BF16])
def test_the_reduced_model_computes_in_its_precision_behind_fp32_io(precision: Precision) -> None:
    """What the inductor_fp16 / bf16 stages compile: FP32 in and out, the arithmetic between
    in the reduced type (its outputs differ from FP32 by that type's rounding, not more)."""
    import torch

    from deploy.modelio import aoti

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3), torch.nn.ReLU(), torch.nn.Flatten()).eval()
    x = torch.randn(2, 1, 8, 8)
    with torch.no_grad():
        want = model(x)
        got = aoti.Reduced(copy.deepcopy(model), aoti.DTYPES[precision])(x)
    assert got.dtype == torch.float32 and next(iter(model.parameters())).dtype == torch.float32
    error = float((got - want).abs().max() / want.abs().max())
    assert 1e-5 < error < (1e-2 if precision is Precision.BF16 else 2e-3), error
