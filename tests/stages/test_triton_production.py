"""triton_config's production settings: each one set on Triton's ModelConfig (round trip
through its schema), warm-up samples written from the golden inputs, mistakes refused up
front; on the embedded server, warm-up seen in the log and the response cache hit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers import Cli

SETTINGS = {
    "warmup": {"cases": ["opt", "max"], "count": 2},
    "response_cache": True,
    "version_policy": {"kind": "specific", "versions": [1]},
    "dynamic_batching": {
        "max_queue_delay_us": 100,
        "queue_policy": {"timeout_action": "delay", "timeout_us": 5000, "max_queue_size": 32},
    },
    "instance_group": {
        "kind": "gpu",
        "count": 2,
        "gpus": [0, 1],
        "rate_limiter": {
            "resources": [{"name": "R1", "count": 2}, {"name": "mem", "count": 1, "shared": True}]
        },
    },
    "onnx_accelerators": [
        {"kind": "tensorrt", "precision": "fp16", "workspace_mib": 1024},
        {"kind": "openvino"},
    ],
}


def _parse(path):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def test_every_setting_reaches_config_pbtxt_as_triton_reads_it(write_config, tmp_path, cli: Cli):
    config = write_config({"stages": {"triton_config": SETTINGS}})
    result = cli("run", str(config), "--to", "triton_config", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    onnx = _parse(tmp_path / "model_repository" / "tiny_onnx" / "config.pbtxt")
    assert [w.name for w in onnx.model_warmup] == ["golden_opt", "golden_max"]
    assert all(w.batch_size == 1 and w.count == 2 for w in onnx.model_warmup)
    assert onnx.response_cache.enable and list(onnx.version_policy.specific.versions) == [1]
    queue = onnx.dynamic_batching.default_queue_policy
    assert (queue.timeout_action, queue.default_timeout_microseconds, queue.max_queue_size) == (1, 5000, 32)
    group = onnx.instance_group[0]
    assert list(group.gpus) == [0, 1] and group.count == 2
    assert [(r.name, r.count, getattr(r, "global")) for r in group.rate_limiter.resources] == [
        ("R1", 2, False),
        ("mem", 1, True),
    ]
    gpu = onnx.optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert gpu.name == "tensorrt" and dict(gpu.parameters) == {
        "precision_mode": "FP16",
        "max_workspace_size_bytes": str(1024 << 20),
    }
    assert onnx.optimization.execution_accelerators.cpu_execution_accelerator[0].name == "openvino"
    # The python format runs on CPU: no GPUs; accelerators are the onnx format's only.
    python = _parse(tmp_path / "model_repository" / "tiny_python" / "config.pbtxt")
    assert (
        not python.instance_group[0].gpus
        and not python.optimization.execution_accelerators.gpu_execution_accelerator
    )


def test_warmup_files_hold_the_first_golden_item(write_config, tmp_path, cli: Cli):
    config = write_config({"stages": {"triton_config": {"warmup": {"cases": ["max"]}}}})
    assert cli("run", str(config), "--to", "triton_config", cwd=tmp_path).returncode == 0
    from tests.helpers import output_path, run

    golden = np.load(output_path(config, run(config, stop="golden"), "golden", "golden"))
    want = next(golden[k] for k in golden.files if k.startswith("max") and "image" in k and "in" in k)
    data = (tmp_path / "model_repository" / "tiny_onnx" / "warmup" / "max_image").read_bytes()
    assert data == np.ascontiguousarray(want[0]).tobytes()


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"instance_group": {"kind": "cpu", "gpus": [0]}}, "stages.triton_config.instance_group.gpus: needs"),
        (
            {"formats": ["python"], "onnx_accelerators": [{"kind": "cuda"}]},
            "onnx_accelerators: apply to the onnx",
        ),
        ({"version_policy": {"kind": "specific"}}, "versions is needed with kind specific"),
        ({"onnx_accelerators": [{"kind": "openvino", "precision": "fp16"}]}, "apply to kind tensorrt only"),
        ({"warmup": {"cases": ["mid"]}}, "stages.triton_config.warmup.cases[0]: Input should be"),
    ],
)
def test_a_setting_that_cannot_apply_is_a_config_error(write_config, tmp_path, settings, says, cli: Cli):
    config = write_config({"stages": {"triton_config": settings}})
    result = cli("validate", str(config), cwd=tmp_path)
    assert result.returncode == 3 and says in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_warmup_problems_read_the_servers_own_lines(tmp_path):
    from deploy.serving.tritonserver import Server
    from deploy.stages.smoke.checks import warmup_problems

    log = tmp_path / "server.log"
    server = Server("h:1", "h:2", log, None, None)
    config = {"model_warmup": [{"name": "golden_opt"}, {"name": "golden_max"}]}
    log.write_text(
        "I1125 backend_model_instance.cc:608] \"model 'm' instance m_0_0 is running warmup sample "
        "'golden_opt' for iteration 1\"\n"
    )
    assert warmup_problems(server, "m", config) == [
        "warm-up sample 'golden_max' is not in the server log as run"
    ]
    assert warmup_problems(server, "other", {"model_warmup": [{"name": "golden_opt"}]}) != []
    assert warmup_problems(server, "m", {}) == []


@pytest.mark.triton
@pytest.mark.parametrize("cache_mib", [32, 0])
def test_smoke_sees_the_warmup_run_and_the_cache_answer(write_config, tmp_path, cache_mib, cli: Cli):
    settings = {
        "formats": ["python"],
        "warmup": {"cases": ["opt"]},
        "response_cache": True,
        # loaded by the server too (not exercised: no timeouts, no --rate-limit here)
        "dynamic_batching": {"queue_policy": {"timeout_us": 10_000_000, "max_queue_size": 64}},
        "instance_group": {"kind": "cpu", "rate_limiter": {"resources": [{"name": "R1", "count": 1}]}},
        "version_policy": {"kind": "latest", "latest": 1},
    }
    server = {"kind": "auto", "startup_timeout_s": 120, "cache_mib": cache_mib}
    config = write_config({"stages": {"triton_config": settings, "smoke": {"server": server}}}, smoke=True)
    result = cli("run", str(config), cwd=tmp_path)
    summary = json.loads((tmp_path / "runs" / "tiny" / "summary.json").read_text())
    smoke = next(s for s in summary["stages"] if s["stage"] == "smoke")
    if cache_mib:
        assert result.returncode == 0, result.stderr[-2000:]
        log = (tmp_path / "runs" / "tiny" / "logs" / "smoke.log").read_text()
        assert "model 'tiny_python' instance" in log and "running warmup sample 'golden_opt'" in log
    else:  # a server without a cache: the enabled cache never answers, and smoke says so
        assert result.returncode == 1 and smoke["status"] == "failed"
        assert (
            "response_cache is enabled but the repeated golden requests were no cache hits" in result.stderr
        )
