"""The Python API as its docstring shows it: load -> plan -> run -> selection, on the
tiny model with real stages; a dict config is written where a CI job can repeat it;
misuse raises the typed errors the CLI reports; nothing prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import deploy
from deploy.pipeline.errors import ConfigError, StageError
from deploy.pipeline.graph.plan import Action
from deploy.pipeline.report.results import Status
from tests.helpers import ROOT, comparable, run_cli, tiny_dict

FAST = {"warmup_ms": 10, "duration_s": 0.05, "iterations": 5, "batches": [1, 4]}


def config(tmp_path: Path) -> dict:
    data = tiny_dict(tmp_path)
    data["stages"] = {
        "export": {},
        "validate": {"runtimes": ["onnxruntime"]},
        "bench": {**FAST, "runtimes": ["eager", "onnxruntime"]},
        "select": {"min_gain": 0},
    }
    return data


def test_load_plan_run_selection(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pipeline = deploy.load(config(tmp_path))
    assert pipeline.stages == ["golden", "export", "validate", "bench", "select"]
    assert {r.action for r in pipeline.plan()} <= {Action.RUN, Action.PENDING}
    result = pipeline.run()
    assert result.ok and {s.status for s in result.stages.values()} == {Status.RAN}
    bench = json.loads(result.artifact("bench", "results").read_text())
    rows = [r for r in bench["results"] if r["batch"] == 1]
    steady = [r for r in rows if comparable(r)]  # select compares only rows that can carry a verdict
    fastest = min(steady, key=lambda r: r["median_ms"])["runtime"] if steady else "eager"  # else FP32 kept
    latency = next(o for o in result.selection.objectives if o.name == "latency")
    assert latency.selected and fastest in latency.selected
    assert capsys.readouterr() == ("", "")  # a library prints nothing
    assert {r.action for r in deploy.load(config(tmp_path)).plan()} == {Action.CACHED}
    _reads_well(pipeline, result)


def _reads_well(pipeline: deploy.Pipeline, result: deploy.RunResult) -> None:
    """Short reprs; HTML with every stage and the decision; one-file artifacts as files."""
    text = repr(result)
    assert len(repr(pipeline)) < 300 and "golden → export → validate → bench → select" in repr(pipeline)
    # The decision, or first the warning that the timings under it did not settle (a busy
    # machine): the repr is cut to its first line, the page has all of it.
    decided = "deploy " in text or "NO SPEED VERDICT" in text
    assert len(text) < 300 and "'tiny': ok" in text and "5 ran" in text and decided, text
    page = result._repr_html_()
    assert page.count("<tr>") == 6 and "<b>Decision:</b> " in page and "deploy " in page, page
    assert all(f"<td>{s}</td>" in page for s in pipeline.stages)
    onnx = result.artifact("export", "onnx")
    assert onnx.is_file() and onnx.name == "model.onnx", onnx
    import onnx as onnx_lib

    onnx_lib.checker.check_model(str(onnx))


def test_a_dict_config_is_written_and_the_cli_finds_its_run_cached(tmp_path: Path) -> None:
    data = config(tmp_path)
    data["stages"] = {"export": {}, "validate": {"runtimes": ["onnxruntime"]}}
    pipeline = deploy.load(data)
    pipeline.run()
    written = pipeline.project.path
    assert written == tmp_path / "runs" / "tiny" / "config.yaml" and written.is_file()
    done = run_cli("plan", str(written), "--json")
    assert done.returncode == 0, done.stderr
    assert {row["action"] for row in json.loads(done.stdout)} == {"cached"}


def test_a_dict_config_s_relative_paths_are_written_as_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mapping's relative paths start at the current directory, a YAML file's at its own
    folder: the written config.yaml holds them resolved, so `deploy plan` of it finds the
    model and the cached run from any directory (it said: file not found: runs/...)."""
    import shutil

    shutil.copytree(ROOT / "configs" / "models", tmp_path / "models")
    monkeypatch.chdir(tmp_path)
    data = config(tmp_path)
    data["stages"] = {"export": {}}
    data["model"]["file"] = "models/tiny_cnn.py"
    data["run_dir"] = "runs"
    pipeline = deploy.load(data)
    assert pipeline.run().ok
    written = tmp_path / "runs" / "tiny" / "config.yaml"
    assert yaml.safe_load(written.read_text())["model"]["file"] == str(tmp_path / "models" / "tiny_cnn.py")
    done = run_cli("plan", str(written), "--json", cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {row["action"] for row in json.loads(done.stdout)} == {"cached"}


def test_misuse_raises_the_typed_errors_the_cli_reports(tmp_path: Path) -> None:
    data = config(tmp_path)
    with pytest.raises(ConfigError, match="unknown stage 'nosuch'"):
        deploy.load(data).run(only=["nosuch"])
    with pytest.raises(ConfigError, match=r"force: unknown stage\(s\) \['nosuch'\]"):
        deploy.load(data).run(force=["nosuch"])
    broken = {**data, "stages": {"export": {"opset": "high"}, "nosuch": {}}}
    with pytest.raises(ConfigError) as info:
        deploy.load(broken)
    assert {i.where for i in info.value.issues} == {"stages.export.opset", "stages.nosuch"}
    assert info.value.source.endswith("deploy.load(mapping)")  # it named a config.yaml that did not exist


def test_one_stage_and_a_cache_dir_may_be_given_as_strings(tmp_path: Path) -> None:
    """`force="export"` was read letter by letter ("unknown stage(s) ['e', 'x', ...]") and
    `cache_dir="..."` raised AttributeError ('str' object has no attribute 'absolute')."""
    data = config(tmp_path)
    data["stages"] = {"export": {}}
    pipeline = deploy.load(data, cache_dir=str(tmp_path / "elsewhere"))
    assert pipeline.project.cache_dir == tmp_path / "elsewhere"
    assert pipeline.run().ok
    again = pipeline.run(force="export", only="export")
    assert again.stages["export"].status is Status.RAN and again.stages["golden"].status is not Status.RAN


def test_a_failing_stage_raises_stage_error_after_writing_the_summary(tmp_path: Path) -> None:
    data = config(tmp_path)
    data["stages"] = {
        "export": {},
        "validate": {"runtimes": ["onnxruntime"], "atol": 0, "rtol": 0, "min_cosine": 1.0},
    }
    with pytest.raises(StageError, match="stage 'validate' failed"):
        deploy.load(data).run()
    summary = json.loads((tmp_path / "runs" / "tiny" / "summary.json").read_text())
    assert {s["stage"]: s["status"] for s in summary["stages"]}["validate"] == "failed"
