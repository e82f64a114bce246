"""configs/resnet50.yaml as the Jenkins matrix runs it (tests/matrix/runs.py): every stage,
the services smoke-checked on a real tritonserver, bench, select and the report."""

from __future__ import annotations

import pytest

from tests.helpers import real_tensorrt
from tests.matrix.runs import MatrixRun, check_the_run_passed, matrix_fixture

pytestmark = [pytest.mark.matrix, pytest.mark.slow, pytest.mark.triton]


run = matrix_fixture("resnet50")


def _has_bf16() -> bool:
    import openvino as ov

    return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def test_the_run_passed(run: MatrixRun) -> None:
    check_the_run_passed(run)


def test_every_stage_answers_for_resnet50(run: MatrixRun) -> None:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    cases = run.junit_cases()
    assert list(cases) == [
        "golden",
        "export",
        "simplify",
        "build",
        "openvino",
        "openvino_int8",
        "quantize",
        "trace",
        "stats",
        "validate",
        "triton_config",
        "smoke",
        "bench",
        "select",
    ]
    build_skip = cases.pop("build").find("skipped")
    assert (build_skip is None) == real_tensorrt() and all(
        c.find("skipped") is None and c.find("failure") is None for c in cases.values()
    )
    summary = run.summary()
    states = {s["stage"]: s["status"] for s in summary["stages"]}
    expected_build = {"ran", "cached"} if real_tensorrt() else {"skipped"}
    # ran here; cached where the matrix cell's persistent cache already held a stage
    assert states.pop("build") in expected_build and set(states.values()) <= {"ran", "cached"}
    assert len(states) == 13
    validate = next(s for s in summary["stages"] if s["stage"] == "validate")
    assert validate["metrics"]["parity"]["onnxruntime"]["passed"]
    smoke = next(s for s in summary["stages"] if s["stage"] == "smoke")["metrics"]["smoke"]["models"]
    assert smoke["resnet50_python"]["status"] == "passed"
    # validate compared the files with eager at every golden case: smoke sends the shape
    # spec's cases (min and max over http, min and opt over grpc), each passing
    sent = {p: sorted(t) for p, t in smoke["resnet50_python"]["protocols"].items()}
    assert sent == {"http": ["max", "min"], "grpc": ["min", "opt"]}
    for protocol, labels in sent.items():
        assert all(smoke["resnet50_python"]["protocols"][protocol][c]["logits"]["passed"] for c in labels)
    assert smoke["resnet50_onnx"]["status"] == "skipped"  # the wheel's server has no onnxruntime backend
    assert smoke["resnet50_python_int8"]["status"] == "passed"
    bf16 = _has_bf16()  # else bf16 models are not written, and bench skips openvino_bf16, saying why
    for name in ("resnet50_python_openvino", "resnet50_python_openvino_int8"):
        assert smoke[name]["status"] == "passed" and smoke[name]["format"] == "python_openvino"
    assert smoke["resnet50_openvino"]["status"] == "skipped"  # nor an openvino backend
    smoke_row = next(s for s in summary["stages"] if s["stage"] == "smoke")
    # python x (fp32, int8), python_openvino x (fp32, int8, bf16), the pre / post models and
    # an ensemble over each; the onnx / torchscript / openvino models and their ensembles
    # need backends the wheel's server lacks.
    passed, skipped = (12, 12) if bf16 else (10, 10)
    backends = "onnxruntime, openvino, pytorch"
    assert smoke_row["partial"] == f"passed {passed}, skipped {skipped} (no {backends} backend)"
    assert cases["smoke"].find("system-out").text.startswith(f"PARTIAL: passed {passed}, skipped {skipped}")
    assert (
        "its step resnet50_onnx needs the 'onnxruntime' backend" in smoke["resnet50_onnx_ensemble"]["reason"]
    )
    for name in ("resnet50_python_ensemble", "resnet50_python_int8_ensemble"):
        service = smoke[name]["service"]  # JPEG + PNG through pre -> model -> post, both protocols
        assert smoke[name]["status"] == "passed" and service["samples"] == ["china.jpg", "flower.png"]
        assert service["top1_agreement"] == 1.0 and service["min_cosine"] >= 0.999
        assert set(service["answers"]) == {"http", "grpc"}
        # Top-1 per sample: lower ranks of random weights tie at the printed precision (0.004 vs 0.004).
        top1 = {k: [line.split(",")[0] for line in v] for k, v in service["answers"].items()}
        assert top1["http"] == top1["grpc"] == [line.split(",")[0] for line in service["reference"]]
    quantize = next(s for s in summary["stages"] if s["stage"] == "quantize")["metrics"]["accuracy"]
    assert quantize["outputs"]["logits"]["cosine"] >= 0.99
    bench = next(s for s in summary["stages"] if s["stage"] == "bench")["metrics"]["bench"]
    in_process = {(r["runtime"], r["batch"]) for r in bench if "hint" not in r and r["device"] == "cpu"}
    timed = (
        "eager",
        "torchscript",
        "onnxruntime",
        "onnxruntime_int8",
        "openvino",
        "openvino_int8",
        "openvino_bf16",
    )
    assert in_process == {(rt, b) for rt in timed if bf16 or rt != "openvino_bf16" for b in (1, 8)}
    openvino = next(s for s in summary["stages"] if s["stage"] == "openvino")["metrics"]
    for parity in ("openvino_parity", *(["openvino_bf16_parity"] if bf16 else [])):
        assert all(shape["logits"]["passed"] for shape in openvino[parity].values())
    served = {(f"{r['runtime']}:{r['model']}", r["concurrency"]) for r in bench if r["device"] == "server"}
    models = [  # services end to end too
        f"{fmt}{precision}{service}"
        for fmt, precisions in (("python", ("", "_int8")), ("python_openvino", ("", "_int8", "_bf16")))
        for precision in precisions
        if bf16 or precision != "_bf16"
        for service in ("", "_ensemble")
    ]
    # Each model's sweep is 1, 2, 4 up to where the server saturated (bench.triton.saturation)
    levels = {m: sorted(c for subject, c in served if subject == f"triton:resnet50_{m}") for m in models}
    assert all(found in ([1, 2], [1, 2, 4]) for found in levels.values()), levels
    said = next(s for s in summary["stages"] if s["stage"] == "bench")["metrics"]
    for m, found in levels.items():
        assert (said.get(f"saturated_resnet50_{m}") or {}).get("not_measured", []) == [4][: 3 - len(found)]
    assert {subject for subject, _ in served} == {f"triton:resnet50_{m}" for m in models}
    stats = next(s for s in summary["stages"] if s["stage"] == "stats")["metrics"]["stats"]
    # ~25.5 M parameters (BatchNorm folded into the convs) and the published ~4.1 GMACs at 224x224.
    assert 25.4e6 < stats["params"] < 25.6e6 and stats["flops"] / 2 == pytest.approx(4.1e9, rel=0.02)
    report = (run.dir / "runs" / "resnet50" / "report.html").read_text()
    # select's chart under the conclusion the report opens with, then bench's plot
    assert report.count("data:image/png;base64,") == 2 and "Triton: server-side time per request" in report
    assert (
        report.index("id='conclusion'") < report.index("img class='chart'") < report.index("<h2>Stages</h2>")
    )
    assert "deploy " in report.split("class='decision'>")[1].split("</p>")[0]
    selection = next(s for s in summary["stages"] if s["stage"] == "select")["metrics"]["selection"]
    assert set(selection) == {"latency", "throughput", "throughput, cosine >= 0.995"} and all(
        selection.values()
    )
    assert "Status per format and precision" in report
    for model in ("resnet50_onnx", "resnet50_torchscript", "resnet50_python"):
        text = (run.dir / "model_repository" / model / "config.pbtxt").read_text()
        parsed = text_format.Parse(text, model_config_pb2.ModelConfig())
        assert parsed.max_batch_size == 32 and list(parsed.input[0].dims) == [3, 224, 224]
        assert list(parsed.output[0].dims) == [1000]
