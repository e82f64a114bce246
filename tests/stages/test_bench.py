"""The bench stage on the tiny model: every runtime at every batch, the outputs, the
host in the key, and the regression gate."""

from __future__ import annotations

import json
import re

import pytest

from deploy.pipeline.errors import ExitCode, StageError
from deploy.pipeline.graph import keys
from deploy.pipeline.graph.project import load_project
from deploy.runtimes import contention, host
from tests.helpers import comparable, output_path, run, run_cli

FAST = {"warmup_ms": 10, "duration_s": 0.05, "iterations": 5}


def bench_config(write_config, bench, name="bench.yaml"):
    stages = {
        "trace": {},
        "export": {},
        "quantize": {"calibration": {"count": 8}, "holdout_count": 8, "gate": {"min_cosine": 0.9}},
        "bench": {**FAST, **bench},
    }
    return write_config(replace={"stages": stages}, name=name)


def test_bench_times_every_runtime_at_every_batch(write_config):
    path = bench_config(
        write_config, {"runtimes": ["eager", "torchscript", "onnxruntime", "onnxruntime_int8"]}
    )
    results = run(path)
    data = json.loads(output_path(path, results, "bench", "results").read_text())
    cells = {(r["runtime"], r["batch"]) for r in data["results"]}
    assert cells == {
        (rt, b) for rt in ("eager", "torchscript", "onnxruntime", "onnxruntime_int8") for b in (1, 4, 16)
    }
    assert all(r["iterations"] >= 5 and r["items_per_s"] > 0 for r in data["results"])
    eager = next(r for r in data["results"] if r["runtime"] == "eager" and r["batch"] == 4)
    if comparable(eager):  # a contended or implausible row carries no speed-up at all
        assert eager["speedup_vs_eager"] == pytest.approx(1.0)
    else:
        assert eager.get("speedup_vs_eager") is None
    assert data["host"]["host_cores"] and data["host"]["host_cpu"]
    table = output_path(path, results, "bench", "table").read_text()
    # A header, a rule and 12 cells; notes about unsupported percentiles may follow.
    assert sum(1 for line in table.splitlines() if line.startswith("|")) == 2 + 12
    assert "| onnxruntime_int8 | cpu | 16 | 1 |" in table
    assert output_path(path, results, "bench", "plot").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_host_is_part_of_the_key(write_config):
    project = load_project(bench_config(write_config, {}))
    node = project.graph.node("bench")
    env = keys.components(node.spec, node.params, project.config, {}).env
    assert {"host_cpu", "host_cores", "host_gpu"} <= set(env)


def test_regression_gate_fails_with_the_numbers(write_config):
    path = bench_config(
        write_config,
        {
            "runtimes": ["onnxruntime"],
            "batches": [1],
            "gate": {
                "max_latency_ms": {"onnxruntime@1": 0.000001},
                "min_speedup_vs_eager": {"onnxruntime": 1.5},
            },
        },
    )
    said = gate_verdict(path, "onnxruntime@1")
    assert said is None or re.search(
        r"benchmark regression gate failed: onnxruntime@1: p99 [0-9.]+ ms > 1e-06 ms", said
    )


def gate_verdict(path, cell: str) -> str | None:
    """The gate's failure message; None where the machine was busy while `cell` was timed
    (the other test workers, a loaded agent): then the gate must have said it could not
    judge that cell (exit 8), never passed or failed it (test_bench_contention forces that case)."""
    with pytest.raises(StageError) as failed:
        run(path)
    if failed.value.exit_code is ExitCode.CONTENDED:
        assert f"the regression gate could not judge {cell} (" in str(failed.value), failed.value
        return None
    assert failed.value.exit_code is ExitCode.STAGE, failed.value
    return str(failed.value)


def triton_config(write_config, bench, name="triton.yaml"):
    stages = {
        "trace": {},
        "export": {},
        "triton_config": {
            "formats": ["onnx", "python"],
            "max_batch_size": 16,
            "dynamic_batching": {"max_queue_delay_us": 2000},
        },
        "bench": {
            **FAST,
            "duration_s": 0.3,
            "iterations": 20,
            "runtimes": ["onnxruntime", "triton"],
            "batches": [1],
            **bench,
        },
    }
    return write_config(replace={"stages": stages}, name=name)


@pytest.mark.triton
def test_triton_sweep_reports_client_latency_and_the_server_share(write_config):
    path = triton_config(write_config, {"triton": {"concurrency": [1, 4]}})
    results = run(path)
    data = json.loads(output_path(path, results, "bench", "results").read_text())
    served = [r for r in data["results"] if r["runtime"] == "triton"]
    # Only the python model: the wheel's server has no onnxruntime backend.
    assert [(r["model"], r["concurrency"]) for r in served] == [("tiny_python", 1), ("tiny_python", 4)]
    for row in served:
        server = row["server"]
        assert row["iterations"] >= 20 and server["requests"] >= row["iterations"]
        assert server["compute_infer_us"] > 0 and server["executions"] >= 1
        # The client waits for everything the server does (the two sets of requests can
        # differ by the few that straddle the window's edges). The server's counters span
        # the warm-up too: where other processes held the cores (the suite's other workers)
        # a stalled warm-up request weighs on them and on no client window, so the bound
        # holds only for a quiet row.
        if not (row.get("environment") or {}).get("contended"):
            assert server["queue_us"] + server["compute_infer_us"] < 1.1 * 1000 * row["mean_ms"]
    single, four = served
    assert single["server"]["avg_server_batch"] == pytest.approx(1.0)
    assert four["server"]["avg_server_batch"] > 1.0, (
        "4 concurrent clients with a 2 ms queue delay were never batched"
    )
    assert "speedup_vs_eager" not in four
    table = output_path(path, results, "bench", "table").read_text()
    assert "**Triton server-side, per request**" in table
    # What the instance settings imply for threads, beside the served rows: one instance
    # (Triton's default) of ONNX Runtime with its default threads, one per physical core.
    physical = contention.physical_cores()
    implied = f"tiny_python: 1 instance(s) x {physical} = {physical} threads on {contention.cores()} cores"
    assert all(r["served_threads"].startswith(implied) for r in served), served[0]["served_threads"]
    assert implied in table
    assert data["settings"]["triton"]["concurrency"] == [1, 4]


@pytest.mark.triton
def test_request_rate_mode_offers_the_rate_and_shows_when_it_could_not(write_config):
    rates = [20.0, 20000.0]  # far below, and far above, what 2 cores serve
    path = triton_config(
        write_config,
        {"runtimes": ["triton"], "triton": {"concurrency": [1], "request_rate": rates, "max_outstanding": 4}},
    )
    results = run(path)
    data = json.loads(output_path(path, results, "bench", "results").read_text())
    paced = {r["request_rate"]: r for r in data["results"] if "request_rate" in r}
    assert sorted(paced) == rates and all(r["concurrency"] == 0 for r in paced.values())
    slow, flood = paced[20.0], paced[20000.0]
    # The rate offered is the check: a pacer that fell behind restarts its schedule without
    # a catch-up burst, so it would serve under the rate. Late sends (over 1 ms behind) at
    # 20/s are the machine's scheduling (13 % at 50/s in tests/runtimes/test_pacing.py; 33 %
    # in a CI run with three busy workers, 61 % beside a busy loop as well), not the pacing's:
    # one behind would be late on nearly all.
    busy = (slow.get("environment") or {}).get("contended")
    assert slow["qps"] <= 20.0 * 1.15  # never a catch-up burst
    if not busy:  # a contended window's sends wake late, and it says so instead
        assert slow["qps"] == pytest.approx(20.0, rel=0.15) and slow["late_share"] < 0.8
    assert slow["server"]["requests"] >= slow["iterations"]
    # Served at what the server can do; sends wait for one of the 4 slots (a batch the
    # server answers at once frees several, so not every send is late).
    assert flood["qps"] < 0.5 * 20000 and flood["late_share"] > 0.2
    # Four requests always in flight: the dynamic batcher forms batches, unlike at 20/s
    # where every request arrives alone and waits out the queue delay.
    assert flood["server"]["avg_server_batch"] > 1.5
    # At 20/s each request arrives alone; a loaded machine (flagged contended) may hold one
    # long enough for the next to join it now and then
    assert slow["server"]["avg_server_batch"] == pytest.approx(1.0, abs=0.2 if busy else 0.05)
    table = output_path(path, results, "bench", "table").read_text()
    assert "| triton:tiny_python | server | 1 | r20 |" in table
    assert "| triton:tiny_python | server | 1 | r20000 |" in table


@pytest.mark.triton
def test_gate_names_the_triton_cell(write_config):
    path = triton_config(
        write_config,
        {
            "runtimes": ["triton"],
            "iterations": 120,  # p99 needs 100 samples: a busy machine must not get fewer in 0.3 s
            "triton": {"concurrency": [2]},
            "gate": {"max_latency_ms": {"triton:tiny_python@1/c2": 1e-6}},
        },
    )
    said = gate_verdict(path, "triton:tiny_python@1/c2")
    assert said is None or re.search(r"triton:tiny_python@1/c2: p99 [0-9.]+ ms > 1e-06 ms", said), said


def test_triton_models_must_exist_in_the_repository(write_config):
    path = triton_config(write_config, {"runtimes": ["triton"], "triton": {"models": ["nope"]}})
    with pytest.raises(StageError, match=r"bench.triton.models: \['nope'\] not in the repository"):
        run(path)


@pytest.mark.triton
def test_a_runtime_that_fails_keeps_the_rows_measured_before_and_after_it(write_config):
    """Triton fails between two in-process runtimes (no server answers at the URL): its
    rows are skipped with the reason, the others kept, and the stage is partial, not failed."""
    server = {"kind": "url", "url": "127.0.0.1:9", "grpc_url": "127.0.0.1:9", "startup_timeout_s": 3}
    bench = {"runtimes": ["onnxruntime", "triton", "eager"], "batches": [1], "triton": {"server": server}}
    path = triton_config(write_config, bench)
    results = run(path)
    data = json.loads(output_path(path, results, "bench", "results").read_text())
    assert {r["runtime"] for r in data["results"]} == {"onnxruntime", "eager"}
    assert data["skipped"]["triton"].startswith("failed: ") and "127.0.0.1:9" in data["skipped"]["triton"]
    assert results["bench"].partial is not None and "triton failed" in results["bench"].partial


@pytest.mark.skipif(host.cuda_gpus() > 0, reason="this machine has an NVIDIA GPU")
def test_device_cuda_without_a_gpu_is_said_by_validate_and_skipped_by_bench(write_config, tmp_path):
    """The install answers before the run: validate and plan name each runtime that cannot
    run on cuda here; bench then measures the rest (OpenVINO, on the CPU it runs on)."""
    stages = {"export": {}, "openvino": {}, "bench": {**FAST, "device": "cuda", "batches": [1]}}
    stages["bench"]["runtimes"] = ["eager", "onnxruntime", "openvino"]
    path = write_config(replace={"stages": stages})
    said = run_cli("validate", str(path))
    assert said.returncode == 0, said.stdout + said.stderr
    notes = [line for line in said.stdout.splitlines() if line.startswith("note: stages.bench.runtimes:")]
    assert [n.split(": ")[2] for n in notes] == ["eager", "onnxruntime"], said.stdout
    assert all("no NVIDIA GPU" in n for n in notes)
    results = run(path)
    data = json.loads(output_path(path, results, "bench", "results").read_text())
    assert {(r["runtime"], r["device"]) for r in data["results"]} == {("openvino", "cpu")}  # and its hint row
    assert set(data["skipped"]) == {"eager", "onnxruntime"} and "no NVIDIA GPU" in data["skipped"]["eager"]
    # Known up front: skipped, not failed (a partial note may only be about contended rows).
    partial = results["bench"].partial
    assert partial is None or re.fullmatch(r"\d+ rows contended or implausible: .*", partial), partial


@pytest.mark.skipif(host.cuda_gpus() > 0, reason="this machine has an NVIDIA GPU")
def test_a_bench_that_could_measure_nothing_fails_naming_each_runtime(write_config):
    """device: cuda on a CPU machine with only CUDA runtimes listed: no numbers at all is a
    failure (the run said `run ok` with an empty bench before), not a stage that ran."""
    stages = {
        "export": {},
        "bench": {**FAST, "device": "cuda", "batches": [1], "runtimes": ["eager", "onnxruntime"]},
    }
    with pytest.raises(StageError) as failed:
        run(write_config(replace={"stages": stages}))
    message = str(failed.value)
    assert "stage 'bench' failed: nothing was measured: eager: " in message and "onnxruntime: " in message
    assert "no NVIDIA GPU" in message


def test_server_identity_enters_the_key_only_with_triton(write_config):
    with_triton = load_project(triton_config(write_config, {}))
    without = load_project(bench_config(write_config, {}))
    env = [
        keys.components(p.graph.node("bench").spec, p.graph.node("bench").params, p.config, {}).env
        for p in (with_triton, without)
    ]
    assert "triton_server" in env[0] and "triton_server" not in env[1]


@pytest.mark.gpu
def test_cuda_rows_split_h2d_compute_d2h(write_config):
    path = bench_config(
        write_config, {"runtimes": ["eager", "torchscript"], "batches": [1, 16], "device": "cuda"}
    )
    results = run(path)
    rows = json.loads(output_path(path, results, "bench", "results").read_text())["results"]
    assert {(r["runtime"], r["batch"], r["device"]) for r in rows} == {
        (rt, b, "cuda") for rt in ("eager", "torchscript") for b in (1, 16)
    }
    for row in rows:
        phases = row["gpu"]
        assert all(phases[k]["median"] > 0 for k in ("h2d_ms", "compute_ms", "d2h_ms"))
        # The GPU's share of the call cannot exceed the host's wall time for it.
        assert sum(phases[k]["median"] for k in ("h2d_ms", "compute_ms", "d2h_ms")) <= row["max_ms"]
    assert "GPU phases" in output_path(path, results, "bench", "table").read_text()


def test_gate_keys_that_match_no_cell_are_config_errors(write_config):
    """A typo in a gate key is found before anything is measured, not after."""
    from deploy.pipeline.errors import ConfigError

    path = bench_config(
        write_config,
        {"runtimes": ["onnxruntime"], "batches": [1], "gate": {"min_items_per_s": {"onnxruntime@2": 1.0}}},
    )
    with pytest.raises(
        ConfigError,
        match=r"stages.bench.gate.min_items_per_s: key 'onnxruntime@2': batch '2' is not one of the measured batches \[1\]",
    ):
        load_project(path)
    path = bench_config(
        write_config, {"runtimes": ["onnxruntime"], "gate": {"min_speedup_vs_eager": {"eager": 1.0}}}
    )
    with pytest.raises(
        ConfigError, match=r"stages.bench.gate.min_speedup_vs_eager: key 'eager': runtime 'eager' is not in"
    ):
        load_project(path)


@pytest.mark.parametrize(
    ("bench", "where"),
    [
        ({"percentiles": [150]}, "stages.bench.percentiles[0]"),
        ({"percentiles": []}, "stages.bench.percentiles"),
        ({"batches": [0]}, "stages.bench.batches[0]"),
        ({"triton": {"concurrency": [0]}}, "stages.bench.triton.concurrency[0]"),
        ({"stability_windows": 0}, "stages.bench.stability_windows"),
        ({"stability_threshold": 1.0}, "stages.bench.stability_threshold"),
        ({"stability_threshold": 0}, "stages.bench.stability_threshold"),
        ({"max_windows": 2}, "max_windows (2) must be >= stability_windows (3)"),
    ],
)
def test_bad_bench_settings_name_their_field(write_config, bench, where):
    from deploy.pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(where)):
        load_project(bench_config(write_config, bench))


def test_stability_settings_reach_every_cell_and_the_table_shows_n(write_config):
    path = bench_config(
        write_config,
        {
            "runtimes": ["onnxruntime"],
            "batches": [1, 4],
            "stability_windows": 2,
            "max_windows": 2,
            "percentiles": [50, 99],
        },
    )
    results = run(path)
    rows = json.loads(output_path(path, results, "bench", "results").read_text())["results"]
    for row in rows:
        # max_windows = K = 2: exactly two windows, both kept.
        assert row["windows_used"] == len(row["windows"]) == 2
        assert (
            row["iterations"] == sum(w["n"] for w in row["windows"]) and row["percentiles_supported"]["p50"]
        )
    table = output_path(path, results, "bench", "table").read_text()
    header = table.splitlines()[0]
    assert "| load | n | median ms |" in header and "| stable | machine | plausible | windows |" in header
    assert f"| onnxruntime | cpu | 4 | 1 | {rows[1]['iterations']} |" in table


def _row(latencies, runtime="onnxruntime", percentiles=(50.0, 99.0)):
    from deploy.runtimes import harness

    settings = harness.Settings(percentiles=percentiles)
    from deploy.runtimes.record import BenchRow

    summary = harness.summarize(harness.Timing(latencies, [0.0] * len(latencies), 1.0, 1), 1, settings)
    return BenchRow.of(summary, runtime, "cpu")


def test_tables_mark_unsupported_percentiles_with_a_footnote():
    from deploy.stages.bench import output

    rows = [_row([1.0] * 20), _row([1.0] * 100, runtime="eager")]
    table = output.markdown(rows, (50.0, 99.0))
    assert "| onnxruntime | cpu | 1 | 1 | 20 | 1.000 | 1.000 | 1.000* |" in table
    assert "| eager | cpu | 1 | 1 | 100 | 1.000 | 1.000 | 1.000 |" in table
    assert "\\* fewer samples than the percentile needs (n >= 1 / (1 - p): p99 needs 100)" in table
    assert "fewer samples" not in output.markdown(rows[1:], (50.0, 99.0))


def test_gate_refuses_a_percentile_the_samples_do_not_support():
    from deploy.pipeline.errors import StageFailed
    from deploy.stages.bench.output import RegressionGate, gate

    limits = RegressionGate(max_latency_ms={"onnxruntime": 1000.0})
    gate([_row([1.0] * 100)], limits)  # p99 supported and within the limit
    with pytest.raises(
        StageFailed,
        match=r"onnxruntime@1: p99 is not supported by 20 samples \(needs >= 100\); raise iterations",
    ):
        gate([_row([1.0] * 20)], limits)


def test_a_gated_cell_of_a_flagged_row_is_no_verdict_even_where_it_meets_the_limit():
    """Under load bench fits fewer threads, and a small model ran faster on one: its limit,
    met on the contended row, failed on the quiet machine, and the pass was cached."""
    import dataclasses

    from deploy.pipeline.errors import Contended
    from deploy.stages.bench.output import RegressionGate, gate

    limits = RegressionGate(max_latency_ms={"onnxruntime@1": 1000.0})
    quiet = _row([1.0] * 100)
    gate([quiet], limits)  # met on a quiet, plausible row: the verdict is a pass
    flagged = dataclasses.replace(quiet, implausible="batch 1 slower per item than batch 4")
    with pytest.raises(Contended, match=r"could not judge onnxruntime@1 \(implausible: batch 1 slower"):
        gate([flagged], limits)
    gate([flagged, _row([1.0] * 100, runtime="eager")], RegressionGate(max_latency_ms={"eager": 1000.0}))
