"""The openvino stage on the tiny CNN trained on sklearn's digits: its IRs answer real
held-out digits like eager PyTorch (FP32 to the last digits, FP16-compressed weights with
the same predictions), keep the batch axis dynamic, and bench times them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from deploy.pipeline.errors import ExitCode
from tests.helpers import CASES, Cli, digits_eager, shared_digits, tiny_dict


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path, accuracy = shared_digits(tmp_path_factory, 8)
    assert accuracy > 0.88
    return path


def _config(tmp_path: Path, checkpoint: Path, **openvino: Any) -> Path:
    data = tiny_dict(tmp_path)
    data["model"]["checkpoint"] = str(checkpoint)
    fast = {"warmup_ms": 10, "duration_s": 0.05, "iterations": 5, "batches": [1, 16]}
    data["stages"] = {
        "export": data["stages"]["export"],
        "simplify": {},
        "openvino": openvino,
        "validate": {"runtimes": ["onnxruntime", "openvino"]},
        "bench": {**fast, "runtimes": ["onnxruntime", "openvino", "openvino_fp16", "openvino_bf16"]},
        "select": {"objectives": [{"name": "t", "metric": "throughput", "min_cosine": 0.99}]},
    }
    path = tmp_path / "digits.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _openvino(folder: Path, x: np.ndarray, compute: str = "f32") -> np.ndarray:
    import openvino as ov

    compiled = ov.Core().compile_model(
        str(folder / "model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": compute}
    )
    return np.asarray(compiled(x)[0])


def _has_bf16() -> bool:
    import openvino as ov

    return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def test_the_irs_answer_real_digits_like_eager_and_bench_times_them(
    tmp_path: Path, checkpoint: Path, cli: Cli
) -> None:
    config = _config(tmp_path, checkpoint)
    summary_path = tmp_path / "summary.json"
    done = cli("run", str(config), "--json", str(summary_path))
    assert done.returncode == 0, done.stdout + done.stderr
    stages = {s["stage"]: s for s in json.loads(summary_path.read_text())["stages"]}
    fp32 = Path(stages["openvino"]["outputs"]["openvino"]["path"])  # the tree: model.xml, model.bin
    fp16 = Path(stages["openvino"]["outputs"]["openvino_fp16"]["path"])

    import openvino as ov

    model = ov.Core().read_model(str(fp32 / "model.xml"))
    assert model.inputs[0].get_partial_shape()[0].is_dynamic  # the batch axis stays dynamic
    x = np.load(checkpoint.parent / "test.npy")  # 397 real held-out digits, in batches of 16 and 1
    reference = digits_eager(checkpoint, x)
    for batch in (x[:16], x[16:17], x[100:116]):
        want = digits_eager(checkpoint, batch)
        assert np.allclose(_openvino(fp32, batch), want, atol=1e-5, rtol=1e-4)
    compressed = np.concatenate([_openvino(fp16, x[i : i + 16]) for i in range(0, len(x), 16)])
    assert not np.array_equal(compressed, reference)  # FP16 weights: other digits...
    assert (compressed.argmax(1) == reference.argmax(1)).all()  # ...the same predictions
    assert 0.4 < (fp16 / "model.bin").stat().st_size / (fp32 / "model.bin").stat().st_size < 0.6

    # validate's gate holds the IR to the same tolerance as ONNX Runtime, at min / opt / max.
    parity = stages["validate"]["metrics"]["parity"]
    assert parity["openvino"]["passed"] and parity["onnxruntime"]["passed"]
    metrics = stages["openvino"]["metrics"]
    assert set(metrics["openvino_parity"]) == set(metrics["openvino_fp16_parity"]) == set(CASES)
    if _has_bf16():  # the FP32 IR computed in bf16: other digits, the same predictions
        assert set(metrics["openvino_bf16_parity"]) == set(CASES)
        bf16 = np.concatenate([_openvino(fp32, x[i : i + 16], "bf16") for i in range(0, len(x), 16)])
        assert not np.allclose(bf16, reference, atol=1e-4)
        assert (bf16.argmax(1) == reference.argmax(1)).mean() > 0.99
    else:
        assert "no bf16" in metrics["openvino_bf16_skipped"]
    bench = json.loads(Path(stages["bench"]["outputs"]["results"]["path"]).read_text())["results"]
    timed_here = ("onnxruntime", "openvino", "openvino_fp16") + (("openvino_bf16",) if _has_bf16() else ())
    single = {(r["runtime"], r["batch"]) for r in bench if "hint" not in r}
    assert single == {(rt, b) for rt in timed_here for b in (1, 16)}
    hinted_rows = {(r["runtime"], r["batch"]) for r in bench if r.get("hint") == "throughput"}
    assert hinted_rows == {(rt, b) for rt in timed_here if rt != "onnxruntime" for b in (1, 16)}
    chosen = stages["bench"]["metrics"]["openvino_settings"]
    assert chosen["hint"] == "LATENCY" and chosen["streams"] >= 1 and chosen["threads"] >= 1
    assert chosen["compute"] == "f32"
    if _has_bf16():
        assert stages["bench"]["metrics"]["openvino_bf16_settings"]["compute"] == "bf16"

    # select reads each OpenVINO precision's accuracy from the openvino stage's own report:
    # FP32 ONNX (ONNX Runtime) against the IR on the golden inputs at opt, recomputed here.
    from deploy.gates import metrics as agreement
    from deploy.gates import references
    from deploy.runtimes.onnxrt import OnnxRuntime

    chosen_json = json.loads(Path(stages["select"]["outputs"]["selection"]["path"]).read_text())
    opt = references.load(Path(stages["golden"]["outputs"]["golden"]["path"]))["opt"].inputs
    onnx = Path(stages["simplify"]["outputs"]["onnx"]["path"])
    want = OnnxRuntime(onnx / "model.onnx" if onnx.is_dir() else onnx).infer(opt)["logits"]
    assert chosen_json["accuracy"]["openvino_fp16"] == pytest.approx(
        agreement.cosine(want, _openvino(fp16, opt["image"])), abs=1e-7
    )
    if _has_bf16():
        assert chosen_json["accuracy"]["openvino_bf16"] == pytest.approx(
            agreement.cosine(want, _openvino(fp32, opt["image"], "bf16")), abs=1e-6
        )
    verdicts = {c["runtime"]: c for c in chosen_json["objectives"][0]["candidates"]}
    assert "no accuracy measured" not in verdicts["openvino_fp16"]["reason"]

    # `deploy bench` times the IR file itself, from two streams (a request each).
    timed = cli(
        "bench", str(fp32 / "model.xml"), "--shapes", "image:4x1x8x8", "--duration", "0.2", "--streams", "2"
    )
    assert timed.returncode == 0, timed.stdout + timed.stderr
    assert "=== Performance summary (openvino, batch 4) ===" in timed.stdout
    assert "[I] Settings: hint LATENCY, compute f32, streams 1" in timed.stdout
    # The throughput hint: as many streams as the requests the plugin asks for, said.
    hinted = cli(
        "bench",
        str(fp32 / "model.xml"),
        "--shapes",
        "image:4x1x8x8",
        "--duration",
        "0.2",
        "--hint",
        "throughput",
    )
    assert hinted.returncode == 0, hinted.stdout + hinted.stderr
    settings = next(line for line in hinted.stdout.splitlines() if line.startswith("[I] Settings:"))
    requests = int(settings.rsplit("requests ", 1)[1])
    assert "hint THROUGHPUT" in settings and f"streams: {requests}" in hinted.stdout
    onnx = Path(stages["simplify"]["outputs"]["onnx"]["path"]) / "model.onnx"
    refused = cli("bench", str(onnx), "--hint", "throughput")
    assert refused.returncode == 2 and "a performance hint is OpenVINO's" in " ".join(refused.stderr.split())
    lone = tmp_path / "lone"  # an IR without its model.bin: one line with OpenVINO's reason
    lone.mkdir()
    (lone / "model.xml").write_bytes((fp32 / "model.xml").read_bytes())
    broken = cli("bench", str(lone / "model.xml"), "--shapes", "image:1x1x8x8")
    said = broken.stdout + broken.stderr
    assert broken.returncode == ExitCode.CONFIG and "Traceback" not in said  # unreadable: a bad input file
    assert "OpenVINO cannot load" in said and "bin file cannot be found" in said


def test_an_ir_outside_its_tolerance_fails_the_stage_with_the_numbers(
    tmp_path: Path, checkpoint: Path, cli: Cli
) -> None:
    """No tolerance at all: OpenVINO's kernels differ from PyTorch's in the last bits."""
    config = _config(tmp_path, checkpoint, tolerance={"atol": 0.0, "rtol": 0.0, "min_cosine": 1.0})
    done = cli("run", str(config))
    assert done.returncode == ExitCode.STAGE, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "FP32 IR (OpenVINO) vs eager parity failed" in said and "logits" in said
