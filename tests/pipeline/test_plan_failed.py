"""`deploy plan` after a failed stage says how it failed, not that it never ran."""

from __future__ import annotations

import json

from deploy.pipeline.errors import ExitCode
from tests.helpers import Cli


def test_plan_after_a_failed_stage_says_it_failed_last_time(write_config, cli: Cli) -> None:
    # atol = rtol = 0: ONNX Runtime's float rounding (~1e-7) fails validate, upstream passes.
    path = write_config({"stages": {"validate": {"atol": 0.0, "rtol": 0.0, "runtimes": ["onnxruntime"]}}})
    run = cli("run", str(path), "--to", "validate")
    assert run.returncode == ExitCode.STAGE, run.stdout + run.stderr
    plan = cli("plan", str(path), "--json")
    rows = {row["stage"]: row for row in json.loads(plan.stdout)}
    validate = rows["validate"]
    assert validate["action"] == "run"
    assert validate["reasons"][0].startswith("failed in the last run (")
    assert "with this same key: onnxruntime vs eager parity failed" in validate["reasons"][0]
    assert "never ran with this cache" not in validate["reasons"]
    assert rows["trace"]["action"] == "cached" and not rows["trace"]["reasons"]


def test_plan_on_a_fresh_cache_still_says_never_ran(write_config, cli: Cli) -> None:
    path = write_config()
    plan = cli("plan", str(path), "--json")
    rows = {row["stage"]: row for row in json.loads(plan.stdout)}
    assert "never ran with this cache" in rows["trace"]["reasons"]


BLIND = """
import torch


class Blind(torch.nn.Module):  # answers the same whatever the image: golden passes it as partial
    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.arange(4.0))

    def forward(self, image):
        return self.bias.expand(image.shape[0], -1) + 0.0 * image.sum((1, 2, 3))[:, None]


def blind():
    return Blind()
"""


def test_plan_names_a_cached_stage_that_passed_only_partly(write_config, cli: Cli, tmp_path) -> None:
    """A partial result (a runtime bench could not time, answers golden found input-blind) is
    cached and replayed as it was: plan said `cached` with no word, so a transient failure
    looked like a pass until someone forced the stage."""
    (tmp_path / "blind.py").write_text(BLIND)
    path = write_config(replace={"model": {"file": str(tmp_path / "blind.py"), "callable": "blind"}})
    assert cli("run", str(path), "--to", "golden").returncode == 0
    rows = {row["stage"]: row for row in json.loads(cli("plan", str(path), "--json").stdout)}
    golden = rows["golden"]
    assert golden["action"] == "cached" and golden["reasons"][0].startswith("cached partial: "), golden
    assert golden["reasons"][0].endswith("(--force golden runs it again)")
