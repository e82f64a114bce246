"""The gates' reports as records: accuracy.json (quantize, fp16; read by select) and
parity.json (validate) come back from JSON as they were measured, and a report of
another layout is refused with its path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from deploy.gates import parity
from deploy.gates.accuracy import measure
from deploy.gates.accuracy_report import AccuracyReport, Evidence, Speed
from deploy.gates.references import Case
from deploy.gates.tolerance import Tolerance
from deploy.pipeline.graph.records import SchemaMismatch
from deploy.spec.tensors import OutputKind

RNG = np.random.default_rng(0)


def accuracy_report() -> AccuracyReport:
    reference = [{"logits": RNG.normal(size=(4, 10)), "embedding": RNG.normal(size=(4, 3))} for _ in range(3)]
    noisy = [{k: v + RNG.normal(scale=0.05, size=v.shape) for k, v in r.items()} for r in reference]
    kinds = {"logits": OutputKind.LOGITS, "embedding": OutputKind.EMBEDDING}
    metrics = measure(reference, noisy, 5, kinds)
    evidence = Evidence(True, "random inputs (seed 1234)", "stages.quantize.calibration")
    return AccuracyReport(
        metrics,
        12,
        {"min_cosine": 0.99},
        Speed(2.0, 1.0, 20, rounds=8, low=1.9, high=2.1, stable=True, machine="quiet: load 0.4 on 2 cores"),
        {"recipe": "static"},
        evidence,
    )


def test_accuracy_report_round_trip_keeps_top_k_and_the_stage_details(tmp_path: Path) -> None:
    report = accuracy_report()
    path = tmp_path / "accuracy.json"
    path.write_text(json.dumps(report.to_json()))
    assert "top5_agreement" in json.loads(path.read_text())["outputs"]["logits"]
    back = AccuracyReport.read(path)
    assert back == report
    assert back.worst_cosine() == min(m.cosine for m in report.outputs.values() if m.cosine is not None)


def test_an_accuracy_report_of_another_layout_is_refused(tmp_path: Path) -> None:
    data = accuracy_report().to_json()
    del data["outputs"]
    path = tmp_path / "accuracy.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SchemaMismatch, match=r"accuracy\.json: not an accuracy report"):
        AccuracyReport.read(path)


def test_parity_report_round_trip_with_a_skipped_runtime_and_an_incomparable_output(tmp_path: Path) -> None:
    ref = {"y": RNG.normal(size=(2, 4)).astype(np.float32)}
    golden = {"opt": Case({"x": np.zeros((2, 4), np.float32)}, ref)}
    table = parity.compare({"opt": {"y": ref["y"] + 1e-3}}, golden, Tolerance())
    broken = parity.unanswered(golden, ["y"], "inference failed")
    report = parity.ParityReport(
        Tolerance().model_dump(mode="json"),
        {
            "onnxruntime": parity.RuntimeParity(table, True),
            "torchscript": parity.RuntimeParity(broken, False),
            "tensorrt": parity.RuntimeParity(skipped="no engine"),
        },
    )
    path = tmp_path / "parity.json"
    path.write_text(json.dumps(report.to_json()))
    back = parity.ParityReport.read(path)
    assert back == report
    assert isinstance(back.runtimes["torchscript"].table["opt"]["y"], parity.Incomparable)  # type: ignore[index]


def test_a_parity_report_from_another_release_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "parity.json"
    path.write_text(json.dumps({"thresholds": {}, "onnxruntime": {"passed": True, "shapes": {}}}))
    with pytest.raises(SchemaMismatch, match=r"parity\.json: schema None"):
        parity.ParityReport.read(path)


@pytest.mark.parametrize(
    ("spoil", "says"),
    [
        (lambda d: d["speed"].update(calls="twenty"), r"speed\.calls"),
        (lambda d: d["outputs"]["logits"].pop("max_abs"), r"logits|max_abs"),
        (lambda d: d["evidence"].pop("synthetic"), r"evidence\.synthetic"),
    ],
    ids=["wrong-type", "missing-output-field", "missing-evidence"],
)
def test_an_accuracy_report_names_the_field_it_cannot_read(tmp_path: Path, spoil, says: str) -> None:
    data = accuracy_report().to_json()
    spoil(data)
    path = tmp_path / "accuracy.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SchemaMismatch, match=says):
        AccuracyReport.read(path)


def test_a_parity_line_that_is_neither_a_table_nor_a_skip_is_refused(tmp_path: Path) -> None:
    data = {"schema": parity.SCHEMA, "thresholds": {}, "onnxruntime": {"passed": "perhaps"}}
    path = tmp_path / "parity.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SchemaMismatch, match=r"parity\.json: not a parity report \(onnxruntime"):
        parity.ParityReport.read(path)


def test_search_results_round_trip_and_a_point_missing_its_rows_is_refused(tmp_path: Path) -> None:
    from deploy.stages.triton_search.search_record import Point, SearchedPoint, SearchResults

    current, other = Point(1, 16, None), Point(2, 16, 100, (4, 8))
    results = SearchResults(
        "m_python",
        other,
        42.5,
        12.0,
        "throughput",
        current,
        [
            SearchedPoint(current, 30.0, "budget broken", "", [], ""),
            SearchedPoint(
                other, None, "", "", [], "CONTENDED: load 7.0 on 2 cores, others 90 % of the cores"
            ),
        ],
    )
    path = tmp_path / "search.json"
    path.write_text(json.dumps(results.to_json()))
    assert SearchResults.read(path) == results
    data = results.to_json()
    del data["points"][1]["rows"]  # type: ignore[index]
    path.write_text(json.dumps(data))
    with pytest.raises(SchemaMismatch, match=r"search\.json: not a search results record \(points\.1\.rows"):
        SearchResults.read(path)
