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
