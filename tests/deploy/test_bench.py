"""`deploy bench MODEL_FILE`: trtexec-style output on real ONNX Runtime and TorchScript."""

from __future__ import annotations

import dataclasses
import json
import re
import statistics

import pytest

from deploy.pipeline.errors import ExitCode
from deploy.runtimes import harness
from tests.helpers import Cli, output_path, run


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    import yaml

    from tests.helpers import tiny_dict

    tmp = tmp_path_factory.mktemp("bench")
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_dict(tmp), sort_keys=False))
    results = run(path, stop="trace")
    return output_path(path, results, "export", "onnx"), output_path(path, results, "trace", "torchscript")


def test_onnx_bench_prints_trtexec_summary_and_exports_times(models, tmp_path, cli: Cli):
    times = tmp_path / "times.json"
    proc = cli(
        "bench",
        str(models[0]),
        "--runtime",
        "onnxruntime",
        "--shapes",
        "image:4x1x8x8",
        "--warmUp",
        "50",
        "--duration",
        "0.3",
        "--iterations",
        "50",
        "--percentile",
        "50,99",
        "--exportTimes",
        str(times),
    )
    assert proc.returncode == 0, proc.stderr
    assert "=== Performance summary (onnxruntime, batch 4) ===" in proc.stdout
    assert (
        "percentile(50%)" in proc.stdout
        and "percentile(99%)" in proc.stdout
        and "Total Host Walltime" in proc.stdout
    )
    rows = json.loads(times.read_text())
    assert len(rows) >= 50 and all(r["latencyMs"] > 0 for r in rows)
    assert rows == sorted(rows, key=lambda r: r["startMs"])


def test_torchscript_bench(models, cli: Cli):
    proc = cli(
        "bench", str(models[1]), "--runtime", "torchscript", "--shapes", "x:2x1x8x8", "--duration", "0.2"
    )
    assert proc.returncode == 0, proc.stderr
    assert "(torchscript, batch 2)" in proc.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--shapes", "image=1x1"], "is not NAME:DxDxD"),
        ([], "has dynamic dims"),
        (["--shapes", "nope:1x1x8x8,image:1x1x8x8"], "no input(s) ['nope']"),
        (["--shapes", "image:1x1x8x8", "--percentile", "0"], "not a list of percentiles"),
        (["--shapes", "image:0x1x8x8"], "has a dim of 0: every dim is at least 1"),
        # ONNX Runtime's own words on a shape the model cannot take, not a traceback (exit 70)
        (
            ["--shapes", "image:1x1x16x16"],
            "the model does not run at image:1x1x16x16 under onnxruntime: InvalidArgument",
        ),
        (["--shapes", "image:1x1x8"], "Invalid rank for input: image Got: 3 Expected: 4"),
    ],
)
def test_bad_arguments_are_usage_errors(models, args, fragment, cli: Cli):
    proc = cli("bench", str(models[0]), "--runtime", "onnxruntime", "--duration", "0.1", *args)
    assert proc.returncode == ExitCode.USAGE, proc.stdout + proc.stderr
    assert fragment in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


def test_measure_honours_duration_and_iterations():
    settings = harness.Settings(warmup_ms=10, duration_s=0.05, iterations=500, percentiles=(50.0, 100.0))
    timing = harness.measure(lambda: None, settings)
    assert len(timing.latencies_ms) >= 500 and timing.wall_s >= 0.05 and timing.warmup_calls >= 1
    summary = harness.summarize(timing, batch=4, settings=settings)
    assert summary.percentiles_ms["p100"] == summary.max_ms
    assert summary.items_per_s == pytest.approx(4 * summary.qps)
    assert (
        harness.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
        and harness.percentile([1.0, 2.0, 3.0, 4.0], 99) == 4.0
    )
    hundred = [float(i) for i in range(1, 101)]
    assert harness.percentile(hundred, 7) == 7.0  # 0.07 * 100 is 7.000000000000001 in floats
    assert harness.percentile([float(i) for i in range(1, 1001)], 99.9) == 999.0


def test_streams_overlap_their_calls(models, tmp_path, cli: Cli):
    times = tmp_path / "times.json"
    proc = cli(
        "bench",
        str(models[0]),
        "--runtime",
        "onnxruntime",
        "--shapes",
        "image:4096x1x8x8",
        "--threads",
        "1",
        "--streams",
        "3",
        "--duration",
        "0.3",
        "--iterations",
        "30",
        "--exportTimes",
        str(times),
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        "streams: 3" in proc.stdout and "=== Performance summary (onnxruntime, batch 4096) ===" in proc.stdout
    )
    rows = json.loads(times.read_text())
    assert len(rows) >= 30
    # With three closed-loop streams, some call starts before the previous one has ended.
    overlaps = sum(1 for a, b in zip(rows, rows[1:]) if b["startMs"] < a["startMs"] + a["latencyMs"])
    assert overlaps > len(rows) // 4


def test_stream_measurement_counts_calls_completed_inside_the_window():
    import time

    from deploy.runtimes import streams

    settings = harness.Settings(warmup_ms=20, duration_s=0.2, iterations=10, percentiles=(50.0,))
    edges = iter(range(100))
    one, _ = streams.measure([lambda: time.sleep(0.005)], settings)
    two, (before, after) = streams.measure([lambda: time.sleep(0.005)] * 2, settings, lambda: next(edges))
    # Two snapshots per window edge (just before and just after it); the pair returned
    # brackets the kept (last three) windows from outside.
    edge = len(two.windows) - 3
    assert (before, after) == (2 * edge, 2 * len(two.windows) + 1) and two.warmup_calls >= 2
    assert len(two.latencies_ms) >= 10 and min(two.latencies_ms) >= 4.5
    # Every counted call ended inside the window; one may have started before it.
    assert all(
        -lat <= s and s + lat <= 1000 * two.wall_s + 1e-6 for s, lat in zip(two.starts_ms, two.latencies_ms)
    )
    assert min(two.starts_ms) < 0, "the calls in flight when the window opened completed inside it and count"
    # Two streams of sleeping calls complete about twice as many calls as one stream could at
    # the latency they took (judged within the one measurement: load stretches both alike).
    assert len(two.latencies_ms) / two.wall_s > 1.5 * 1000 / statistics.fmean(two.latencies_ms)
    # One stream never overlaps itself: its calls' time inside the window (the first cut at
    # the window's start) fits in the window, however late a sleep woke.
    inside = sum(lat + min(s, 0.0) for s, lat in zip(one.starts_ms, one.latencies_ms))
    assert inside <= 1000 * one.wall_s + 1e-6


def test_a_failing_stream_fails_the_measurement():
    from deploy.pipeline.errors import StageFailed
    from deploy.runtimes import streams

    def broken() -> None:
        raise RuntimeError("model exploded")

    with pytest.raises(StageFailed, match="a stream failed: RuntimeError: model exploded"):
        streams.measure([broken], harness.Settings(warmup_ms=0, duration_s=0.01, iterations=1))


# -- perf_analyzer's stability rule and percentile support ----------------------------------------
# ms per window: windows 0-3 disagree, then steady. Steady calls of 10 ms leave a loaded
# machine's late wake-ups (1-2 ms) inside the ±25 % the windows must agree within.
NOISY_THEN_STEADY = [4.0, 20.0, 4.0, 20.0, 10.0]


def _kept(summary, settings):
    return summary.windows[-settings.stability_windows :]


def test_windows_are_added_until_the_last_k_agree():
    from tests.helpers import WindowedLatency

    settings = harness.Settings(
        warmup_ms=0, duration_s=0, iterations=60, percentiles=(50.0,), stability_threshold=0.25
    )
    summary = harness.summarize(
        harness.measure(WindowedLatency(NOISY_THEN_STEADY, per_window=20), settings), 1, settings
    )
    # The earliest window set of three that agrees is 4, 5, 6 (all 10 ms): seven windows.
    assert summary.stable and summary.windows_used >= 7 and len(summary.windows) == summary.windows_used
    # Statistics come from the kept windows only: no 4 ms or 20 ms sample among them.
    assert all(9.9 < w.median_ms < 16.0 for w in _kept(summary, settings))
    assert summary.iterations == sum(w.n for w in _kept(summary, settings)) == 60
    assert summary.min_ms >= 10.0 and summary.median_ms < 16.0


def test_windows_stop_at_the_maximum_and_the_run_is_marked_unstable():
    from tests.helpers import WindowedLatency

    settings = harness.Settings(warmup_ms=0, duration_s=0, iterations=30, percentiles=(50.0,), max_windows=5)
    summary = harness.summarize(
        harness.measure(WindowedLatency([1.0, 5.0] * 10, per_window=10), settings), 1, settings
    )
    assert summary.windows_used == 5 and not summary.stable and summary.iterations == 30
    lines = harness.report_lines("x", summary, settings)
    assert any(line.startswith("[W] * The last 3 of 5 windows differ by more than ±10 %") for line in lines)


def test_stream_windows_are_added_until_stable_and_capped():
    from deploy.runtimes import streams
    from tests.helpers import WindowedLatency

    settings = harness.Settings(
        warmup_ms=10, duration_s=0.15, iterations=6, percentiles=(50.0,), stability_threshold=0.25
    )
    steady = WindowedLatency(NOISY_THEN_STEADY)
    timing, (before, after) = streams.measure([steady] * 2, settings, steady.edge)
    summary = harness.summarize(timing, 1, settings)
    assert summary.stable and summary.windows_used >= 7
    used = summary.windows_used
    assert (before, after) == (2 * (used - 3) + 1, 2 * used + 2), (
        "the snapshots just outside the kept windows' edges"
    )
    assert all(9.9 < w.median_ms < 16.0 for w in _kept(summary, settings)) and summary.median_ms < 16.0
    capped = dataclasses.replace(settings, max_windows=4)
    noisy = WindowedLatency([1.0, 5.0] * 10)
    summary = harness.summarize(streams.measure([noisy] * 2, capped, noisy.edge)[0], 1, capped)
    assert summary.windows_used == 4 and not summary.stable


@pytest.mark.parametrize(("p", "needs"), [(50, 2), (90, 10), (95, 20), (99, 100), (99.9, 1000), (100, 1)])
def test_a_percentile_needs_one_over_one_minus_p_samples(p, needs):
    assert harness.required_samples(p) == needs
    assert harness.supported(p, needs) and (needs == 1 or not harness.supported(p, needs - 1))


def test_p99_of_twenty_samples_is_computed_but_marked_unsupported():
    settings = harness.Settings(percentiles=(90.0, 95.0, 99.0))
    timing = harness.Timing([float(i) for i in range(1, 21)], [0.0] * 20, 1.0, 1)
    summary = harness.summarize(timing, 1, settings)
    assert summary.percentiles_ms["p99"] == 20.0
    assert summary.percentiles_supported == {"p90": True, "p95": True, "p99": False}
    latency = next(
        line for line in harness.report_lines("x", summary, settings) if line.startswith("[I] Latency")
    )
    assert (
        "percentile(95%) = 19 ms" in latency
        and "percentile(99%) = n/a (needs >= 100 samples, have 20)" in latency
    )


def test_stability_settings_reach_the_measurement(models, cli: Cli):
    proc = cli(
        "bench",
        str(models[0]),
        "--runtime",
        "onnxruntime",
        "--shapes",
        "image:1x1x8x8",
        "--warmUp",
        "0",
        "--duration",
        "0",
        "--iterations",
        "12",
        "--percentile",
        "50,99",
        "--stability-windows",
        "2",
        "--max-trials",
        "2",
    )
    assert proc.returncode == 0, proc.stderr
    # Two windows of ceil(12 / 2) calls each: both kept, twelve samples, too few for p99.
    assert "[I] Windows: 2 in" in proc.stdout and "statistics from the last 2" in proc.stdout
    assert (
        "n = 12 iterations" in proc.stdout
        and "percentile(99%) = n/a (needs >= 100 samples, have 12)" in proc.stdout
    )
    assert "percentile(50%) = " in proc.stdout and "percentile(50%) = n/a" not in proc.stdout


def test_streams_take_the_stability_settings(models, cli: Cli):
    proc = cli(
        "bench",
        str(models[0]),
        "--runtime",
        "onnxruntime",
        "--shapes",
        "image:1x1x8x8",
        "--warmUp",
        "10",
        "--streams",
        "2",
        "--duration",
        "0.05",
        "--iterations",
        "10",
        "--stability-windows",
        "1",
        "--max-trials",
        "1",
        "--stability-percentage",
        "5",
    )
    assert proc.returncode == 0, proc.stderr
    stable = re.search(
        r"Stable: the last 1 windows agree within ±5 %|Stable only as windows: the last 1 agree within ±5 %, all of them contended",
        proc.stdout,
    )
    assert "[I] Windows: 1 in" in proc.stdout and stable, proc.stdout  # the second on a busy machine
    # The machine beside the timing, the threads the policy gave (no --threads: the free cores).
    said = re.search(
        r"\[(I\] Machine: quiet|W\] \* CONTENDED): load [0-9.]+ on (\d+) cores.*; (\d+) intra-op threads",
        proc.stdout,
    )
    assert said and 1 <= int(said.group(3)) <= int(said.group(2)), proc.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--stability-windows", "3", "--max-trials", "2"], "--max-trials"),
        (["--stability-percentage", "0"], "--stability-percentage"),
        (["--stability-percentage", "100"], "not in (0, 100)"),
    ],
)
def test_bad_stability_settings_are_usage_errors(models, args, fragment, cli: Cli):
    proc = cli(
        "bench",
        str(models[0]),
        "--runtime",
        "onnxruntime",
        "--shapes",
        "image:1x1x8x8",
        "--duration",
        "0",
        *args,
    )
    assert proc.returncode == ExitCode.USAGE, proc.stdout + proc.stderr
    assert fragment in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


def test_stability_needs_both_throughput_and_median_latency_to_agree():
    settings = harness.Settings(stability_windows=3, stability_threshold=0.10)
    steady = [harness.Window(100, 1.0, 10.0)] * 3
    assert harness.is_stable(steady, settings) and not harness.is_stable(steady[:2], settings)
    assert not harness.is_stable([*steady[:2], harness.Window(100, 1.0, 12.0)], settings), (
        "median latency 12 vs mean 10.7"
    )
    assert not harness.is_stable([*steady[:2], harness.Window(125, 1.0, 10.0)], settings), (
        "throughput 125 vs mean 108"
    )
    assert harness.is_stable([harness.Window(100, 1.0, 30.0), *steady], settings), (
        "only the last K windows count"
    )


def test_threads_beyond_the_cores_are_said_to_be_reduced(models, cli: Cli):
    """--threads 64 on a 2-core machine was timed with 2 and said only `threads 2`."""
    from deploy.runtimes.contention import cores

    asked = cores() + 62
    proc = cli(
        "bench", str(models[0]), "--shapes", "image:1x1x8x8", "--threads", str(asked), "--duration", "0.2"
    )
    assert proc.returncode == 0, proc.stderr
    assert f"[W] --threads {asked}: this machine has {cores()} cores; timing with {cores()}" in proc.stdout


def test_wait_quiet_beside_busy_loops_gives_up_with_exit_8_and_times_nothing(models, tmp_path, cli: Cli):
    """`deploy bench --wait-quiet` as `deploy run --wait-quiet`: on a machine kept busy by
    processes this test starts, it says the load and exits 8 without a summary."""
    from deploy.runtimes.contention import cores
    from tests.helpers import cpu_hogs

    times = tmp_path / "times.json"
    args = ("--shapes", "image:1x1x8x8", "--duration", "0.2", "--exportTimes", str(times))
    with cpu_hogs(2 * cores()):
        proc = cli("bench", str(models[0]), *args, "--wait-quiet", "6")
    said = proc.stdout + proc.stderr
    assert proc.returncode == ExitCode.CONTENDED, said
    assert "[I] Waiting for a quiet machine (5 of 6 s): CONTENDED: load" in said
    assert "gave up waiting for a quiet machine (--wait-quiet); nothing was timed" in said
    assert "Performance summary" not in said and not times.exists() and "Traceback" not in said


def _broken_hook(model, shapes, threads, hint):  # type: ignore[no-untyped-def]
    return undefined_name  # noqa: F821  # the hook's own bug: any file meets it


def _refusing_hook(model, shapes, threads, hint):  # type: ignore[no-untyped-def]
    import onnxruntime

    return onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])


def test_a_runtime_hooks_own_bug_is_not_blamed_on_the_file(models, tmp_path, monkeypatch) -> None:
    """Every exception of a runtime's open_file read as "onnxruntime cannot read it" (exit 3,
    the user's file at fault), a NameError in the hook too. A mistake in the hook's own code
    is deploy's bug (its traceback, exit 70); what the library says of the file stays exit 3."""
    import dataclasses as dc

    from deploy.commands.benchmark import BenchRequest, bench_file
    from deploy.pipeline.errors import ConfigError
    from deploy.runtimes import catalog

    request = BenchRequest(
        shapes=None, warmup_ms=0, duration_s=0.1, iterations=1, percentiles="50", export=None,
        runtime="onnxruntime", threads=1, streams=None,
    )  # fmt: skip
    plugin = catalog.CATALOG["onnxruntime"]
    monkeypatch.setitem(catalog.CATALOG, "onnxruntime", dc.replace(plugin, open_file=_broken_hook))
    with pytest.raises(NameError, match="undefined_name"):
        bench_file(models[0], request)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a protobuf")
    monkeypatch.setitem(catalog.CATALOG, "onnxruntime", dc.replace(plugin, open_file=_refusing_hook))
    with pytest.raises(ConfigError, match="onnxruntime cannot read it"):
        bench_file(garbage, request)
