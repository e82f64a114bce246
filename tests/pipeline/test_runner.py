"""The runner on the tiny model with real torch / ONNX / ONNX Runtime: hits, misses,
invalidation per param and per input, damaged entries, selection, failures."""

from __future__ import annotations

import os

import pytest

from deploy.pipeline.errors import SelectionError, StageError
from deploy.pipeline.graph.plan import Action, make_plan
from deploy.pipeline.graph.project import load_project
from deploy.pipeline.process.runner import Status
from deploy.pipeline.store.objects import Store
from tests.helpers import Recorder, run, statuses


@pytest.fixture
def warm(write_config):
    path = write_config()
    first = run(path)
    assert set(statuses(first).values()) == {"ran"}
    return path


def test_second_run_is_all_cached(warm):
    assert set(statuses(run(warm)).values()) == {"cached"}


def test_tolerance_change_reruns_only_validate(warm, write_config):
    edited = write_config({"stages": {"validate": {"atol": 0.001}}})
    plan = {row.name: row for row in make_plan(load_project(edited), Store(load_project(edited).cache_dir))}
    assert plan["validate"].action is Action.RUN and plan["validate"].reasons == [
        "params.atol: 0.0001 -> 0.001"
    ]
    assert {n for n, r in plan.items() if r.action is not Action.CACHED} == {"validate"}
    result = run(edited)
    assert statuses(result) == {
        "golden": "cached",
        "trace": "cached",
        "export": "cached",
        "simplify": "cached",
        "stats": "cached",
        "validate": "ran",
        "triton_config": "cached",
    }
    assert result["validate"].reasons == ["params.atol: 0.0001 -> 0.001"]


def test_opset_change_reruns_export_and_what_reads_it(warm, write_config):
    edited = write_config({"stages": {"export": {"opset": 18}}})
    project = load_project(edited)
    plan = {row.name: row for row in make_plan(project, Store(project.cache_dir))}
    assert plan["trace"].action is Action.CACHED
    assert plan["export"].reasons == ["params.opset: 17 -> 18"]
    assert plan["simplify"].action is Action.PENDING and plan["simplify"].reasons == ["after export runs"]
    result = run(edited)
    assert statuses(result)["trace"] == "cached"
    assert {statuses(result)[n] for n in ("export", "simplify", "validate", "triton_config")} == {"ran"}
    assert result["export"].metrics["opset_written"] == 18


def test_checkpoint_change_reruns_from_trace(write_config, digits_checkpoint, tmp_path):
    import torch

    checkpoint, _ = digits_checkpoint
    path = write_config({"model": {"checkpoint": str(checkpoint)}})
    assert set(statuses(run(path)).values()) == {"ran"}
    state = torch.load(checkpoint)
    state["head.bias"] += 1.0
    other = tmp_path / "other.pt"
    torch.save(state, other)
    result = run(write_config({"model": {"checkpoint": str(other)}}))
    assert result["trace"].status is Status.RAN
    assert any(r.startswith("inputs.model:") for r in result["trace"].reasons), result["trace"].reasons


def test_damaged_entry_is_rebuilt_not_served(warm):
    store = Store(load_project(warm).cache_dir)
    export_key = store.head("tiny")["export"].key
    entry, _ = store.lookup(export_key)
    model_file = store.tree_manifest(entry.outputs["onnx"].digest)["model.onnx"]
    obj = store.object_path(model_file.digest)
    os.chmod(obj, 0o644)
    obj.write_bytes(obj.read_bytes()[:100])  # truncated
    recorder = Recorder()
    result = run(warm, recorder=recorder)
    assert result["export"].status is Status.RAN
    assert any("export" in w and "truncated" in w for w in recorder.warnings), recorder.warnings
    assert any("damaged" in r for r in result["export"].reasons)
    # The export is deterministic: the rebuilt ONNX is byte-identical, so nothing after it reruns.
    assert statuses(result)["simplify"] == "cached"
    assert obj.stat().st_size == model_file.size


def test_selection_only_force_from_to(warm, write_config):
    assert statuses(run(warm, only=["validate"], force=["validate"])) == {
        "golden": "cached",
        "trace": "cached",
        "export": "cached",
        "simplify": "cached",
        "stats": "cached",
        "validate": "ran",
    }
    assert statuses(run(warm, stop="export")) == {"golden": "cached", "export": "cached"}
    assert set(statuses(run(warm, start="simplify", force=["all"])).values()) >= {"ran", "cached"}
    forced = statuses(run(warm, force=["all"]))
    assert set(forced.values()) == {"ran"}


def test_from_without_cached_upstream_is_a_selection_error(write_config):
    with pytest.raises(SelectionError, match="stage 'golden' is outside the selected stages"):
        run(write_config(), start="simplify")


SPECIALISED = """
import torch
from torch import nn

class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        # int() freezes the traced batch size into the graph: eager and trace disagree
        return self.fc(x.flatten(1)) * int(x.shape[0])

def build():
    return Scaled()
"""


def test_a_gate_failure_leaves_nothing_in_the_cache(write_config, tmp_path):
    model = tmp_path / "scaled.py"
    model.write_text(SPECIALISED)
    # The frozen line accepted: the parity gate is what must fail, not the trace's warning.
    path = write_config(
        {"stages": {"export": {"accept_frozen": ["scaled.py"]}}},
        replace={"model": {"file": str(model), "callable": "build"}},
    )
    run(path, only=["golden"])  # the eager reference is fine; what follows it is not
    cache = load_project(path).cache_dir
    before = sorted(cache.glob("actions/*/*.json")) + sorted(cache.glob("objects/*/*"))
    with pytest.raises(StageError) as info:
        run(path)
    err = info.value
    assert err.stage == "export" and "ONNX Runtime (torchscript export) vs eager parity failed" in str(err)
    assert "min/logits" in str(err) and "--from export" in err.resume
    assert err.log.is_file() and "parity failed" in err.log.read_text()
    assert sorted(cache.glob("actions/*/*.json")) + sorted(cache.glob("objects/*/*")) == before
    assert not list(cache.glob("tmp/*"))
