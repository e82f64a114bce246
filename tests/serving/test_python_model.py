"""serving/python_model.py on a real tritonserver (the nvidia-pytriton wheel's, CPU), started
through serving.launch / serving.tritonserver: an ONNX model with two inputs and two outputs
comes up READY, its metadata is what the shape spec expects, it answers what torch answers
over HTTP and gRPC (a golden case cut into max_batch_size chunks), requests the dynamic
batcher groups are each answered with their own rows, a request ONNX Runtime rejects gets
the error while the model stays loaded, and a short perf sweep reads the server's share."""

from __future__ import annotations

import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from deploy.runtimes.harness import Settings
from deploy.serving import perf, requests
from deploy.serving.launch import serve_repository
from deploy.serving.layout import LAYOUTS, PYTHON_MODEL, TRITON_TYPES
from deploy.serving.model_state import ModelState
from deploy.serving.server_spec import ServerSpec
from deploy.serving.tritonserver import repository_index
from deploy.spec.config import DeployConfig
from deploy.stages.smoke import checks
from tests.helpers import export_two_heads, tritonservers, two_heads_net

pytestmark = pytest.mark.triton

CONFIG = """name: "{name}"
backend: "{backend}"
max_batch_size: 4
input [
  {{ name: "a" data_type: {fp32} dims: [{width}] }},
  {{ name: "b" data_type: {fp32} dims: [{width}] }}
]
output [
  {{ name: "mix" data_type: {fp32} dims: [3] }},
  {{ name: "gate" data_type: {fp32} dims: [3] }}
]
instance_group [{{ kind: KIND_CPU count: 1 }}]
dynamic_batching {{ max_queue_delay_microseconds: 300000 }}
parameters {{ key: "deploy_precision" value {{ string_value: "fp32" }} }}
"""

SPEC = DeployConfig.model_validate(
    {
        "name": "heads",
        "model": {"factory": "somewhere.models:build"},  # the model is built below, not from here
        "inputs": [
            {"name": n, "dims": ["batch", 4], "min": [1, 4], "opt": [2, 4], "max": [4, 4]} for n in ("a", "b")
        ],
        "outputs": [{"name": "mix"}, {"name": "gate"}],
        "stages": {"trace": {}},
    }
)


@dataclass(frozen=True)
class Case:
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]


def case(net: torch.nn.Module, rows: int, seed: int) -> Case:
    rng = np.random.default_rng(seed)
    inputs = {n: rng.normal(size=(rows, 4)).astype(np.float32) for n in ("a", "b")}
    with torch.no_grad():
        mix, gate = net(torch.from_numpy(inputs["a"]), torch.from_numpy(inputs["b"]))
    return Case(inputs, {"mix": mix.numpy(), "gate": gate.numpy()})


def python_model(repo: Path, name: str, onnx: Path, width: int = 4) -> None:
    layout = LAYOUTS["python"]
    (repo / name / "1").mkdir(parents=True)
    shutil.copy(onnx, repo / name / "1" / layout.model_file)
    shutil.copy(PYTHON_MODEL, repo / name / "1" / "model.py")
    config = CONFIG.format(name=name, backend=layout.backend, fp32=TRITON_TYPES["float32"], width=width)
    (repo / name / "config.pbtxt").write_text(config)


def assert_answers(got: dict[str, np.ndarray], want: Case) -> None:
    for name, value in want.outputs.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def burst(server_grpc: str, model: str, cases: list[Case]) -> list[dict[str, np.ndarray]]:
    """The cases sent at once (gRPC async): the batcher may group them into one execution."""
    import tritonclient.grpc as grpcclient

    conn = grpcclient.InferenceServerClient(server_grpc)
    answers: list[dict[str, np.ndarray]] = [{} for _ in cases]
    errors: list[str] = []
    done = threading.Semaphore(0)

    def on_answer(index: int, result, error) -> None:
        if error is not None:
            errors.append(str(error))
        else:
            answers[index] = {n: result.as_numpy(n) for n in ("mix", "gate")}
        done.release()

    try:
        for index, c in enumerate(cases):
            feeds = [requests.Feed(n, c.inputs[n], "FP32") for n in ("a", "b")]
            conn.async_infer(
                model,
                requests.infer_inputs(grpcclient, feeds),
                lambda result, error, index=index: on_answer(index, result, error),
            )
        for _ in cases:
            assert done.acquire(timeout=30), "no answer within 30 s"
    finally:
        conn.close()
    assert not errors, errors
    return answers


def test_the_python_model_serves_an_onnx_file(tmp_path: Path) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    net = two_heads_net()
    onnx = export_two_heads(net, tmp_path / "heads.onnx")
    repo = tmp_path / "repo"
    python_model(repo, "heads", onnx)
    python_model(repo, "heads_wrong", onnx, width=5)  # Triton accepts [n, 5]; ONNX Runtime does not
    golden = {
        label: case(net, rows, seed)
        for seed, (label, rows) in enumerate((("min", 1), ("opt", 2), ("max", 4)))
    }
    before = tritonservers()

    with serve_repository(ServerSpec(startup_timeout_s=120), repo, tmp_path / "work") as served:
        assert (served.found["heads"].fmt, served.found["heads"].precision) == ("python", "fp32")
        assert {n: s.state for n, s in served.states.items()} == {
            "heads": ModelState.READY,
            "heads_wrong": ModelState.READY,
        }
        http = httpclient.InferenceServerClient(served.server.http)
        grpc = grpcclient.InferenceServerClient(served.server.grpc)
        try:
            assert served.found["heads"].max_batch_size == 4
            inputs, outputs = checks.expected(SPEC, "python", golden, served.found["heads"].batched)
            assert checks.metadata_problems(http.get_model_metadata("heads"), inputs, outputs) == []
            assert checks.batch_problem(http.get_model_config("heads"), 4) is None

            # Six rows against max_batch_size 4: two requests per protocol, concatenated back.
            six = case(net, 6, seed=10)
            for conn, protocol in ((http, "http"), (grpc, "grpc")):
                target = checks.ModelEndpoint(conn, protocol, "heads", max_batch_size=4)
                assert_answers(checks.infer(target, six, inputs, outputs), six)

            # Requests of 1, 1 and 2 rows sent at once: one execution of 4, each answered with its rows.
            counted = requests.statistics(grpc, "heads")
            cases = [case(net, rows, seed=20 + i) for i, rows in enumerate((1, 1, 2))]
            for got, want in zip(burst(served.server.grpc, "heads", cases), cases):
                assert_answers(got, want)
            after = requests.settled(
                lambda: requests.statistics(grpc, "heads"), lambda s: s.requests, counted.requests + 3, 5.0
            )
            assert after.requests - counted.requests == 3 and after.inferences - counted.inferences == 4
            assert after.executions - counted.executions < 3, "the dynamic batcher grouped the burst"

            # ONNX Runtime's error reaches the client; the model stays loaded.
            wrong = [requests.Feed(n, np.zeros((1, 5), np.float32), "FP32") for n in ("a", "b")]
            with pytest.raises(InferenceServerException, match=r"ONNXRuntimeError.*Got invalid dimensions"):
                http.infer("heads_wrong", requests.infer_inputs(httpclient, wrong))
            assert repository_index(served.server)["heads_wrong"].ready

            # A short closed-loop sweep: a row per concurrency, the server's share from its counters.
            settings = Settings(
                warmup_ms=50, duration_s=0.3, iterations=6, percentiles=(50.0,), max_windows=4
            )
            feeds = requests.opt_feeds(SPEC, served.found["heads"], 4)
            (row,) = perf.sweep(served.server.grpc, "heads", feeds, (2,), settings)
            assert (row.runtime, row.model, row.device, row.concurrency, row.batch) == (
                "triton",
                "heads",
                "server",
                2,
                4,
            )
            assert row.server is not None and row.server.requests >= row.iterations > 0
            assert row.server.inferences == 4 * row.server.requests and row.server.compute_infer_us > 0

            # With a saturation stop: every level measured rose past the best before it, but
            # the last, which is where it stopped (or the ladder's end).
            levels = (1, 2, 4, 8, 16)
            rows = perf.sweep(served.server.grpc, "heads", feeds, levels, settings, saturation=0.05)
            assert [r.concurrency for r in rows] == list(levels[: len(rows)])
            assert not any(perf.saturated(rows[:n], 0.05) for n in range(1, len(rows)))
            assert len(rows) == len(levels) or perf.saturated(rows, 0.05)
        finally:
            http.close()
            grpc.close()
    assert not tritonservers() - before, "the server outlived serve_repository"
