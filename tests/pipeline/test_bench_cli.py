"""`deploy bench MODEL_FILE`: trtexec-style output on real ONNX Runtime and TorchScript."""

from __future__ import annotations

import json

import pytest

from pipeline.errors import ExitCode
from stages import _bench
from tests.conftest import run_cli
from tests.helpers import run
from tests.stages.test_stages import output_path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    import yaml

    from tests.conftest import tiny_dict

    tmp = tmp_path_factory.mktemp("bench")
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_dict(tmp), sort_keys=False))
    results = run(path, stop="export")
    return output_path(path, results, "export", "onnx"), output_path(path, results, "trace", "torchscript")


def test_onnx_bench_prints_trtexec_summary_and_exports_times(models, tmp_path):
    times = tmp_path / "times.json"
    proc = run_cli("bench", str(models[0]), "--runtime", "onnxruntime", "--shapes", "image:4x1x8x8", "--warmUp", "50",
                   "--duration", "0.3", "--iterations", "50", "--percentile", "50,99", "--exportTimes", str(times))
    assert proc.returncode == 0, proc.stderr
    assert "=== Performance summary (onnxruntime, batch 4) ===" in proc.stdout
    assert "percentile(50%)" in proc.stdout and "percentile(99%)" in proc.stdout and "Total Host Walltime" in proc.stdout
    rows = json.loads(times.read_text())
    assert len(rows) >= 50 and all(r["latencyMs"] > 0 for r in rows)
    assert rows == sorted(rows, key=lambda r: r["startMs"])


def test_torchscript_bench(models):
    proc = run_cli("bench", str(models[1]), "--runtime", "torchscript", "--shapes", "x:2x1x8x8", "--duration", "0.2")
    assert proc.returncode == 0, proc.stderr
    assert "(torchscript, batch 2)" in proc.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--shapes", "image=1x1"], "is not NAME:DxDxD"),
        ([], "has dynamic dims"),
        (["--shapes", "nope:1x1x8x8,image:1x1x8x8"], "no input(s) ['nope']"),
        (["--shapes", "image:1x1x8x8", "--percentile", "0"], "not a list of percentiles"),
    ],
)
def test_bad_arguments_are_usage_errors(models, args, fragment):
    proc = run_cli("bench", str(models[0]), "--runtime", "onnxruntime", "--duration", "0.1", *args)
    assert proc.returncode == ExitCode.USAGE, proc.stdout + proc.stderr
    assert fragment in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


def test_measure_honours_duration_and_iterations():
    settings = _bench.Settings(warmup_ms=10, duration_s=0.05, iterations=500, percentiles=(50.0, 100.0))
    timing = _bench.measure(lambda: None, settings)
    assert len(timing.latencies_ms) >= 500 and timing.wall_s >= 0.05 and timing.warmup_calls >= 1
    summary = _bench.summarize(timing, batch=4, settings=settings)
    assert summary["percentiles_ms"]["p100"] == summary["max_ms"]
    assert summary["items_per_s"] == pytest.approx(4 * summary["qps"])
    assert _bench.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0 and _bench.percentile([1.0, 2.0, 3.0, 4.0], 99) == 4.0
    hundred = [float(i) for i in range(1, 101)]
    assert _bench.percentile(hundred, 7) == 7.0  # 0.07 * 100 is 7.000000000000001 in floats
    assert _bench.percentile([float(i) for i in range(1, 1001)], 99.9) == 999.0


def test_streams_overlap_their_calls(models, tmp_path):
    times = tmp_path / "times.json"
    proc = run_cli("bench", str(models[0]), "--runtime", "onnxruntime", "--shapes", "image:512x1x8x8", "--threads", "1", "--streams", "3", "--duration", "0.3",
                   "--iterations", "30", "--exportTimes", str(times))
    assert proc.returncode == 0, proc.stderr
    assert "streams: 3" in proc.stdout and "=== Performance summary (onnxruntime, batch 512) ===" in proc.stdout
    rows = json.loads(times.read_text())
    assert len(rows) >= 30
    # With three closed-loop streams, some call starts before the previous one has ended.
    overlaps = sum(1 for a, b in zip(rows, rows[1:]) if b["startMs"] < a["startMs"] + a["latencyMs"])
    assert overlaps > len(rows) // 4


def test_stream_measurement_counts_calls_completed_inside_the_window():
    import time

    from stages import _bench_streams

    settings = _bench.Settings(warmup_ms=20, duration_s=0.2, iterations=10, percentiles=(50.0,))
    edges = iter(range(100))
    one, _ = _bench_streams.measure([lambda: time.sleep(0.005)], settings)
    two, (before, after) = _bench_streams.measure([lambda: time.sleep(0.005)] * 2, settings, lambda: next(edges))
    assert (before, after) == (0, 1) and two.warmup_calls >= 2
    assert len(two.latencies_ms) >= 10 and min(two.latencies_ms) >= 4.5
    # Every counted call ended inside the window; one may have started before it.
    assert all(-lat <= s and s + lat <= 1000 * two.wall_s + 1e-6 for s, lat in zip(two.starts_ms, two.latencies_ms))
    assert min(two.starts_ms) < 0, "the calls in flight when the window opened completed inside it and count"
    # Two streams of sleeping calls complete about twice as many calls as one.
    assert len(two.latencies_ms) / two.wall_s > 1.5 * len(one.latencies_ms) / one.wall_s


def test_a_failing_stream_fails_the_measurement():
    from pipeline.errors import StageFailed
    from stages import _bench_streams

    def broken() -> None:
        raise RuntimeError("model exploded")

    with pytest.raises(StageFailed, match="a stream failed: RuntimeError: model exploded"):
        _bench_streams.measure([broken], _bench.Settings(warmup_ms=0, duration_s=0.01, iterations=1))
