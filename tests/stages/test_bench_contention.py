"""The bench and select stages on a busy machine: busy loops started by the test (another
job's work, as on a shared CI agent) take every core while the tiny model is timed. Each
row then says so, the threads fit the cores left (one), the headline leads with CONTENDED,
select gives no speed verdict (the FP32 reference kept), a regression gate that a
contended row breaks stops as Contended (exit 8, not a regression), and `--wait-quiet`
gives up before timing anything."""

from __future__ import annotations

import json

import pytest

from deploy.pipeline.errors import ExitCode, StageError
from deploy.runtimes import contention
from tests.helpers import cpu_hogs, output_path, run, run_cli

pytestmark = pytest.mark.skipif(contention.usage() is None, reason="needs Linux's /proc")

FAST = {"warmup_ms": 10, "duration_s": 0.1, "iterations": 5, "batches": [1, 4]}


def busy_config(write_config, bench: dict, select: bool = True):
    stages = {"export": {}, "bench": {**FAST, "runtimes": ["eager", "onnxruntime"], **bench}}
    if select:
        stages["select"] = {"min_gain": 0}
    return write_config(replace={"stages": stages}, name="busy.yaml")


def test_a_busy_machine_is_measured_said_and_decides_nothing(write_config) -> None:
    path = busy_config(write_config, {})
    with cpu_hogs(contention.cores()):
        results = run(path)
    bench = results["bench"]
    rows = json.loads(output_path(path, results, "bench", "results").read_text())["results"]
    assert rows and all(r["environment"]["contended"] for r in rows), [r.get("environment") for r in rows]
    assert all(r["environment"]["others_share"] > contention.CONTENDED_SHARE for r in rows)
    assert all("speedup_vs_eager" not in r for r in rows)  # no ratio of contended timings
    assert bench.metrics["threads"]["used"] == 1 and bench.metrics["threads"]["cores_free"] < 1
    assert str(bench.metrics["headline"]).startswith("CONTENDED: load "), bench.metrics["headline"]
    assert bench.partial and f"{len(rows)} rows contended or implausible" in bench.partial
    # Provisional: replayed as it is, but `--wait-quiet` measures again (it replayed the contended
    # rows for ever, so the way out the message names never gave a verdict).
    assert "`deploy run --wait-quiet SECONDS` measures again" in bench.partial
    planned = {r["stage"]: r for r in json.loads(run_cli("plan", str(path), "--json").stdout)}
    assert planned["bench"]["action"] == "cached" and "cached partial: " in planned["bench"]["reasons"][0]
    with cpu_hogs(contention.cores()):
        again = run_cli("run", str(path), "--wait-quiet", "1")
    said = again.stdout + again.stderr
    assert again.returncode == ExitCode.CONTENDED and "its cached result was provisional" in said, said
    chosen = json.loads(output_path(path, results, "select", "selection").read_text())
    for objective in chosen["objectives"]:
        assert objective["withheld"] == "every contender's timing is contended", objective
        assert objective["selected"] == "pytorch fp32 (eager)"  # the first FP32 contender, not the fastest
        verdicts = {c["runtime"]: c["verdict"] for c in objective["candidates"]}
        # its flag as its verdict: it read `slower`, though it measured faster than the pick
        assert verdicts == {"eager": "selected", "onnxruntime": "contended"}
        (other,) = [c for c in objective["candidates"] if c["runtime"] == "onnxruntime"]
        assert "while it was timed: not compared" in other["reason"], other
    assert str(results["select"].metrics["headline"]).startswith(
        "NO SPEED VERDICT for 'latency', 'throughput'"
    )
    assert results["select"].partial and "rerun on a quiet machine" in results["select"].partial


def test_a_gate_broken_by_a_contended_row_is_no_verdict(write_config) -> None:
    gate = {"max_latency_ms": {"onnxruntime@1": 1e-6}}
    path = busy_config(write_config, {"runtimes": ["onnxruntime"], "batches": [1], "gate": gate}, False)
    with cpu_hogs(contention.cores()), pytest.raises(StageError) as failed:
        run(path)
    assert failed.value.exit_code is ExitCode.CONTENDED, failed.value
    assert "the regression gate could not judge onnxruntime@1 (CONTENDED: load" in str(failed.value)
    assert "rerun on a quiet machine" in str(failed.value)


def test_wait_quiet_gives_up_before_timing_on_a_busy_machine(write_config, tmp_path) -> None:
    path = busy_config(write_config, {"runtimes": ["onnxruntime"]}, False)
    with cpu_hogs(contention.cores()):
        done = run_cli(
            "run", str(path), "--wait-quiet", "6", cwd=tmp_path
        )  # a busy 5-s stretch, then the end
    assert done.returncode == ExitCode.CONTENDED, done.stdout + done.stderr
    log = (tmp_path / "runs" / "tiny" / "logs" / "bench.log").read_text()  # and as progress, while it waits
    # It stops where no whole quiet stretch (5 s) fits before the limit: it waited 10 s for 6 before.
    assert "waiting for a quiet machine (5 of 6 s): CONTENDED: load" in log and "waited 5 s" in log
    assert (
        "bench gave up waiting for a quiet machine (wait_quiet_s); nothing was timed"
        in done.stdout + done.stderr
    )
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.parametrize("given", ["abc", "-1", "inf"])
def test_a_wait_quiet_from_the_environment_that_is_no_seconds_is_refused_naming_it(
    monkeypatch, given
) -> None:
    """The CLI refuses it (exit 2); through the Python API it reached bench as float('abc'),
    a ValueError that named no variable."""
    from deploy.pipeline.errors import ConfigError
    from deploy.stages.bench import machine

    monkeypatch.setenv(machine.WAIT_ENV, given)
    with pytest.raises(ConfigError, match=rf"\$DEPLOY_WAIT_QUIET: '{given}' is not a number of seconds"):
        machine._env_wait()
    monkeypatch.setenv(machine.WAIT_ENV, "12.5")
    assert machine._env_wait() == 12.5
