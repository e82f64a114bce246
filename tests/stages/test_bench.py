"""The bench stage on the tiny model: every runtime at every batch, the outputs, the
host in the key, and the regression gate."""

from __future__ import annotations

import json

import pytest

from pipeline import keys
from pipeline.errors import StageError
from pipeline.project import load_project
from tests.helpers import run
from tests.stages.test_stages import output_path

FAST = {"warmup_ms": 10, "duration_s": 0.05, "iterations": 5}


def bench_config(write_config, bench, name="bench.yaml"):
    stages = {"trace": {}, "export": {}, "quantize": {"calibration": {"count": 8}, "holdout_count": 8, "gate": {"min_cosine": 0.9}}, "bench": {**FAST, **bench}}
    return write_config(replace={"stages": stages}, name=name)


def test_bench_times_every_runtime_at_every_batch(write_config):
    path = bench_config(write_config, {"runtimes": ["eager", "torchscript", "onnxruntime", "onnxruntime_int8"]})
    results = run(path)
    data = json.loads(output_path(path, results, "bench", "results").read_text())
    cells = {(r["runtime"], r["batch"]) for r in data["results"]}
    assert cells == {(rt, b) for rt in ("eager", "torchscript", "onnxruntime", "onnxruntime_int8") for b in (1, 4, 16)}
    assert all(r["iterations"] >= 5 and r["items_per_s"] > 0 for r in data["results"])
    eager = next(r for r in data["results"] if r["runtime"] == "eager" and r["batch"] == 4)
    assert eager["speedup_vs_eager"] == pytest.approx(1.0)
    assert data["host"]["host_cores"] and data["host"]["host_cpu"]
    table = output_path(path, results, "bench", "table").read_text()
    assert table.count("\n") == 2 + 12 and "| onnxruntime_int8 | cpu | 16 | 1 |" in table
    assert output_path(path, results, "bench", "plot").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_host_is_part_of_the_key(write_config):
    project = load_project(bench_config(write_config, {}))
    node = project.graph.node("bench")
    env = keys.components(node.spec, node.params, project.config, {})["env"]
    assert {"host_cpu", "host_cores", "host_gpu"} <= set(env)


def test_regression_gate_fails_with_the_numbers(write_config):
    path = bench_config(write_config, {"runtimes": ["onnxruntime"], "batches": [1], "gate": {"max_latency_ms": {"onnxruntime@1": 0.000001}, "min_speedup_vs_eager": {"onnxruntime": 1.5}}})
    with pytest.raises(StageError, match=r"benchmark regression gate failed: onnxruntime@1: p99 [0-9.]+ ms > 1e-06 ms"):
        run(path)
