"""validate judges the answers the file's producer kept (simplify: ONNX Runtime, trace:
TorchScript) instead of running the runtime again, and only where the record is for that
very file, those golden inputs and the library installed; it judges them, so a record that
disagrees with eager fails the gate. Real ONNX Runtime and TorchScript on the tiny model
(random weights: mechanics only)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import yaml

from deploy.domain.artifacts import ONNX
from deploy.gates import kept_answers, references
from deploy.gates.kept_answers import KeptAnswers
from deploy.pipeline.errors import StageFailed
from deploy.pipeline.graph.contract import StageContext
from deploy.pipeline.graph.project import load_project
from deploy.runtimes.onnxrt import OnnxRuntime
from deploy.stages import validate
from tests.helpers import merge, output_path, run, tiny_dict


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny run to validate; the files validate reads, by artifact, and the config."""
    root = tmp_path_factory.mktemp("kept")
    path = root / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_dict(root), sort_keys=False))
    results = run(path, stop="validate")
    where = {"onnx": "simplify", "onnx_answers": "simplify", "torchscript": "trace"}
    where |= {"torchscript_answers": "trace", "golden": "golden", "eager": "golden"}
    files = {a: output_path(path, results, stage, a) for a, stage in where.items()}
    files["exported"] = output_path(path, results, "export", "onnx")  # before onnxsim
    return files | {"config": path, "validate_metrics": results["validate"].metrics}


def _validate(made: dict[str, Path], tmp_path: Path, **swap: Path) -> StageContext:
    """validate's run on the run's files, ONNX Runtime only, with some inputs swapped."""
    names = ("onnx", "onnx_answers", "golden", "eager")
    inputs = {n: made[n] for n in names} | swap
    outputs = {a.name: a for a in validate.SPEC.outputs}
    config = load_project(made["config"]).config
    ctx = StageContext(config, inputs, tmp_path, outputs, logging.getLogger("test"))
    validate.run(ctx, validate.ValidateParams(runtimes=("onnxruntime",)))
    return ctx


def test_validate_judges_the_kept_answers_which_are_the_runtimes_own(made):
    """In the pipeline both files were judged on their producers' answers; those answers are
    what ONNX Runtime computes on the file now, at every golden case."""
    metrics = made["validate_metrics"]
    assert metrics["answers_kept"] == ["onnxruntime", "torchscript"] and metrics["answers_computed"] == {}
    golden = references.load(made["golden"])
    kept = kept_answers.usable(made["onnx_answers"], "onnxruntime", made["onnx"], made["golden"], golden)
    assert not isinstance(kept, str), kept
    fresh = references.run(OnnxRuntime(made["onnx"], outputs=["logits"]), golden)
    assert set(kept) == set(golden)
    for case, outs in fresh.items():
        np.testing.assert_allclose(kept[case]["logits"], outs["logits"], rtol=1e-6, atol=1e-7)


def test_kept_answers_that_disagree_with_eager_fail_validate(made, tmp_path):
    """validate does not take the producer's word: the same record (same file, golden and
    library), its answers moved off eager's, fails the gate naming the runtime."""
    record = KeptAnswers.read(made["onnx_answers"])
    assert record is not None and record.answers is not None
    moved = {c: {k: v + 0.5 for k, v in outs.items()} for c, outs in record.answers.items()}
    KeptAnswers(**{**vars(record), "answers": moved}).write(tmp_path / "moved.npz")
    with pytest.raises(StageFailed, match="onnxruntime vs eager"):
        _validate(made, tmp_path, onnx_answers=tmp_path / "moved.npz")


@pytest.mark.parametrize(
    "change", ["file", "golden", "library", "garbage", "truncated", "too_big", "not_kept"]
)
def test_a_record_that_is_not_for_this_file_is_run_again(made, tmp_path, monkeypatch, change):
    """A record for another file (export's unsimplified ONNX), other golden inputs, another
    library version, one that is not a record or was cut short, one whose answers were too big to keep, or
    one saying its producer did not check the file: validate runs ONNX Runtime itself, says
    why, and the run passes on its own answers."""
    golden = references.load(made["golden"])
    record = tmp_path / "record.npz"
    _write(change, record, made, golden, monkeypatch)
    ctx = _validate(made, tmp_path, onnx_answers=record)
    why = ctx.metrics["answers_computed"]["onnxruntime"]
    assert why.startswith(EXPECTED[change]), why
    assert ctx.metrics["answers_kept"] == [] and ctx.metrics["parity"]["onnxruntime"]["passed"] is True


EXPECTED = {
    "file": "kept for another model file",
    "golden": "kept for another golden inputs",
    "library": "kept for another library version",
    "garbage": "no answers kept",
    "truncated": "no answers kept",
    "too_big": "its answers (",
    "not_kept": "simplify passed the model through unchecked",
}


def _write(change: str, record: Path, made: dict[str, Path], golden: references.Golden, monkeypatch) -> None:
    fresh = references.run(OnnxRuntime(made["onnx"], outputs=["logits"]), golden)
    model, golden_file = made["onnx"], made["golden"]
    if change == "file":  # the same graph before onnxsim: other bytes
        model = made["exported"]
    elif change == "golden":
        golden_file = record.parent / "golden.npz"
        references.save(golden_file, {"min": golden["min"]})
    elif change == "garbage":
        record.write_bytes(b"not a record")
        return
    elif change == "not_kept":
        kept_answers.not_kept(record, ONNX, "simplify passed the model through unchecked")
        return
    elif change == "too_big":
        monkeypatch.setattr(kept_answers, "MAX_BYTES", 16)
    kept_answers.keep(record, ONNX, model, golden_file, fresh)
    if change == "truncated":
        record.write_bytes(record.read_bytes()[: record.stat().st_size // 2])
    if change == "library":
        kept = KeptAnswers.read(record)
        assert kept is not None
        KeptAnswers(**{**vars(kept), "library": "onnxruntime 0.0.1"}).write(record)


def test_validate_runs_what_simplify_did_not_check(tmp_path):
    """simplify disabled hands export's file on unchecked: validate runs ONNX Runtime on it."""
    path = tmp_path / "tiny.yaml"
    data = merge(tiny_dict(tmp_path), {"stages": {"simplify": {"enabled": False}}})
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    metrics = run(path, stop="validate")["validate"].metrics
    assert metrics["answers_computed"] == {"onnxruntime": "simplify passed the model through unchecked"}
    assert metrics["answers_kept"] == ["torchscript"] and metrics["parity"]["onnxruntime"]["passed"] is True
