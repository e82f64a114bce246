"""Smoke sends production's traffic: concurrent clients, each with its own inputs, every
answer against the reference for that client's own request. A batch-centred model (the
answer for one sample depends on the other samples of its batch) passes every
one-request-at-a-time check; only concurrent clients with distinct inputs on a server that
merges their requests show that it answers them with each other's data."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest
import yaml

from deploy.pipeline.errors import StageFailed
from deploy.pipeline.graph.contract import StageContext
from deploy.pipeline.graph.project import load_project
from deploy.pipeline.store.objects import Store
from deploy.stages.smoke import stage as smoke
from tests.helpers import run, tiny_dict

pytestmark = pytest.mark.triton

CENTRED = '''
import torch


class Centred(torch.nn.Module):
    """Scores centred over the batch: each row's answer moves with the other rows."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        y = self.fc(x)
        return y - y.mean(0, keepdim=True)


def make():
    torch.manual_seed(0)
    return Centred().eval()
'''


def centred_config(tmp: Path, triton: dict) -> Path:
    (tmp / "centred.py").write_text(CENTRED)
    data = tiny_dict(tmp, smoke=True)
    data.update(
        name="centred",
        model={"file": str(tmp / "centred.py"), "callable": "make"},
        inputs=[
            {
                "name": "x",
                "dtype": "float32",
                "dims": ["batch", 4],
                "min": [2, 4],
                "opt": [4, 4],
                "max": [8, 4],
            }
        ],
        outputs=[{"name": "y"}],
    )
    data["stages"] = {"export": {}, "triton_config": {"formats": ["python"], **triton}, "smoke": {}}
    path = tmp / "centred.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def built_centred(tmp: Path, triton: dict) -> tuple[Path, Path, Path]:
    """(config, repository tree, golden file) of the batch-centred model up to triton_config."""
    path = centred_config(tmp, triton)
    results = run(path, stop="triton_config")
    assert results["triton_config"].status.value == "ran", results["triton_config"].message
    store = Store(tmp / "cache")
    return (
        path,
        store.path_of(results["triton_config"].outputs["repository"]),
        store.path_of(results["golden"].outputs["golden"]),
    )


@pytest.fixture(scope="module")
def centred(tmp_path_factory):
    """Served with a batch dim but without dynamic batching: requests are never merged."""
    return built_centred(tmp_path_factory.mktemp("centred"), {"dynamic_batching": None})


def smoke_on(built, repo: Path, tmp_path: Path) -> StageContext:
    work = tmp_path / "work"
    work.mkdir(parents=True)
    outputs = {a.name: a for a in smoke.SPEC.outputs}
    ctx = StageContext(
        load_project(built[0]).config,
        {"repository": repo, "golden": built[2]},
        work,
        outputs,
        logging.getLogger("smoke-traffic-test"),
    )
    smoke.run(ctx, smoke.SmokeParams())
    return ctx


def writable_copy(tree: Path, dest: Path) -> Path:
    shutil.copytree(tree, dest)
    for path in dest.rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return dest


def test_the_fixed_config_passes_with_each_request_run_as_sent(tmp_path):
    """The fix the config error names: max_batch_size 0 (the batch dim is the client's)."""
    (tmp_path / "fixed").mkdir()
    built = built_centred(tmp_path / "fixed", {"max_batch_size": 0})
    assert "dynamic_batching" not in (built[1] / "centred_python" / "config.pbtxt").read_text()
    ctx = smoke_on(built, built[1], tmp_path)
    traffic = json.loads(ctx.output("smoke").read_text())["models"]["centred_python"]["traffic"]
    assert traffic["mismatch_count"] == 0 and traffic["distinct"] >= 3
    assert not traffic["merging_configured"] and "each request ran as sent" in traffic["note"]


def test_without_dynamic_batching_it_passes_and_with_it_smoke_fails(centred, tmp_path):
    """The same files, but the config Triton reads merges requests (as if written by hand or
    by an older deploy): every one-request check still passes, the concurrent clients don't."""
    passing = smoke_on(centred, centred[1], tmp_path / "first")
    assert json.loads(passing.output("smoke").read_text())["models"]["centred_python"]["status"] == "passed"
    repo = writable_copy(centred[1], tmp_path / "repo")
    config = repo / "centred_python" / "config.pbtxt"
    # A long queue delay: a loaded machine's client threads send a burst over milliseconds,
    # and the server must still merge some of it.
    config.write_text(config.read_text() + "dynamic_batching {\n  max_queue_delay_microseconds: 50000\n}\n")
    with pytest.raises(StageFailed) as info:
        smoke_on(centred, repo, tmp_path)
    message = str(info.value)
    assert "answers to concurrent clients differ from the reference for the client's own request" in message
    assert "while the server merged requests of different clients" in message
    assert "each sent alone is right: the merging is the cause" in message  # each wrong one sent again alone
    assert "output 'y' differs by max |Δ|" in message and "client " in message and "request " in message
    # The golden parity (one request at a time) passed: only the traffic check caught it.
    report = json.loads(Path(ctx_report(tmp_path)).read_text())["models"]["centred_python"]
    assert all(
        p["passed"]
        for protocol in report["protocols"].values()
        for out in protocol.values()
        for p in out.values()
    )


def ctx_report(tmp_path: Path) -> Path:
    return tmp_path / "work" / "smoke.json"


def test_dynamic_batching_of_a_batch_dependent_output_is_a_config_error(tmp_path):
    """golden measures the dependence; triton_config refuses to merge requests, naming the
    output, the measured difference and the fix; nothing is written to the repository."""
    from deploy.pipeline.errors import ExitCode, StageError

    path = centred_config(tmp_path, {})
    with pytest.raises(StageError) as info:
        run(path, stop="triton_config")
    failed = info.value
    assert failed.stage == "triton_config" and failed.exit_code == ExitCode.CONFIG
    message = str(failed)
    assert "stages.triton_config.dynamic_batching: output 'y' depends on the rest of its batch" in message
    assert "max |Δ|" in message and "measured on 4 distinct samples by golden, on the eager model" in message
    assert "max_batch_size: 0" in message and "drop 'y' from outputs" in message
    assert not (tmp_path / "model_repository").exists()
