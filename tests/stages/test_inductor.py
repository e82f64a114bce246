"""The compiled PyTorch path on this CPU: the inductor stage's AOTInductor package of the
tiny CNN trained on sklearn's digits answers real held-out digits like eager at every batch
size of its range, is served through Triton's python backend under concurrent clients,
is timed in process and served, and is weighed by select."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from deploy.domain.vocabulary import Runtime
from deploy.pipeline.errors import StageFailed
from deploy.pipeline.results import Status
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
    data["stages"] = {
        "export": stages["export"],
        "inductor": {},
        "triton_config": {**stages["triton_config"], "formats": ["python_inductor"]},
        "smoke": {**stages["smoke"], "clients": 3, "batching_requests": 6},
        "bench": {**FAST, "runtimes": ["onnxruntime", "inductor", "triton"], "triton": {"concurrency": [1]}},
        "select": {"objectives": [{"name": "t", "metric": "throughput"}]},
    }
    path = tmp_path / "digits.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


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
    assert (Runtime.INDUCTOR, None) in rows and (Runtime.TRITON, "tiny_python_inductor") in rows, rows
    chosen = json.loads(output_path(path, results, "select", "selection").read_text())
    verdicts = {c["runtime"]: c["verdict"] for c in chosen["objectives"][0]["candidates"]}
    assert verdicts[Runtime.INDUCTOR] in ("selected", "slower", "unstable"), verdicts  # weighed, not skipped


def test_a_package_for_another_device_is_refused_naming_the_setting(tmp_path: Path) -> None:
    inductorrt.PackageRecord(Device.CUDA, "fp32", 1.0, "2.14.1", (1, 16)).write(tmp_path)
    (tmp_path / inductorrt.PACKAGE_FILE).write_bytes(b"never read")
    with pytest.raises(StageFailed, match=r"compiled for cuda, not cpu \(stages.inductor.device: cpu"):
        inductorrt.load(tmp_path, ["input"], ["logits"], Device.CPU)


def test_a_damaged_package_fails_to_load_with_its_path(tmp_path: Path) -> None:
    inductorrt.PackageRecord(Device.CPU, "fp32", 1.0, "2.14.1", (1, 16)).write(tmp_path)
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
        "triton_config": stages["triton_config"],
    }
    data["stages"]["triton_config"]["formats"] = ["python", "python_inductor"]
    path = tmp_path / "cuda.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    said = cli("validate", str(path))
    assert said.returncode == 0, said.stdout + said.stderr
    assert "note: stages.inductor.device: device cuda: no NVIDIA GPU on this machine" in said.stdout
    results = run(path)
    assert results["inductor"].status is Status.SKIPPED and "no NVIDIA GPU" in results["inductor"].message
    assert results["triton_config"].status is Status.RAN  # the rest is written, without that format
    assert results["triton_config"].metrics["models"] == ["tiny_python"]
