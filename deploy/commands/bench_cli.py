"""`deploy bench MODEL_FILE`: its arguments, as trtexec names them; the work is deploy/commands/benchmark.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from deploy.commands.cli_common import WaitQuietOpt

ModelFile = Annotated[
    Path,
    typer.Argument(help="A model file: .onnx (ONNX Runtime), .xml (OpenVINO IR), .pt/.ts (TorchScript), … ."),
]
Shapes = Annotated[str | None, typer.Option("--shapes", help="NAME:DxDxD,... (as trtexec).")]
WarmUp = Annotated[float, typer.Option("--warmUp", min=0, help="Warm-up time, ms.")]
Duration = Annotated[float, typer.Option("--duration", min=0, help="Minimum timed duration, s.")]
Iterations = Annotated[int, typer.Option("--iterations", min=1, help="Minimum timed calls.")]
Percentiles = Annotated[str, typer.Option("--percentile", help="Comma-separated, e.g. 90,95,99.")]
ExportTimes = Annotated[Path | None, typer.Option("--exportTimes", help="Write per-call times (JSON).")]
Runtime = Annotated[
    str,
    typer.Option(
        "--runtime",
        help="auto (by the file's suffix), or a runtime that runs model files (`deploy doctor` lists them).",
    ),
]
Threads = Annotated[int | None, typer.Option("--threads", min=1, help="Intra-op threads.")]
Streams = Annotated[
    int | None,
    typer.Option(
        "--streams",
        "--concurrency",
        min=1,
        help="Parallel closed-loop streams (default 1; with OpenVINO's throughput hint, the requests it asks for).",
    ),
]
Hint = Annotated[str, typer.Option("--hint", help="OpenVINO's performance hint: latency | throughput.")]
Windows = Annotated[
    int, typer.Option("--stability-windows", min=1, help="Stop once the last K windows agree.")
]
Spread = Annotated[
    float, typer.Option("--stability-percentage", help="Allowed spread of those windows, ± % of their mean.")
]
Trials = Annotated[
    int, typer.Option("--max-trials", min=1, help="Most windows before giving up (marked unstable).")
]


# What the harness holds per timed call at its peak (a start and an end, then each kept
# call's latency and start as floats, sorted once): 122 B measured over 10^6 calls
# (runtimes/harness.measure, tracemalloc), rounded up.
BYTES_PER_CALL = 128


def _room_for(iterations: int) -> None:
    """--iterations 10**9 would hold 128 GB of call times: refused before the model loads,
    where it grew until the kernel killed it."""
    available = _available_bytes()
    needed = iterations * BYTES_PER_CALL
    if available is not None and needed > available // 2:
        raise typer.BadParameter(
            f"{iterations} calls keep about {needed / 2**30:.1f} GiB of call times, over half of the "
            f"{available / 2**30:.1f} GiB this machine has available; ask for fewer (--duration sets the time instead)",
            param_hint="--iterations",
        )


def _available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as info:
            line = next(line for line in info if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return None  # not Linux: no estimate
    return int(line.split()[1]) * 1024


def bench(
    model: ModelFile,
    shapes: Shapes = None,
    warmup: WarmUp = 200.0,
    duration: Duration = 3.0,
    iterations: Iterations = 10,
    percentile: Percentiles = "90,95,99",
    export_times: ExportTimes = None,
    runtime: Runtime = "auto",
    threads: Threads = None,
    streams: Streams = None,
    hint: Hint = "latency",
    stability_windows: Windows = 3,
    stability_percentage: Spread = 10.0,
    max_trials: Trials = 10,
    wait_quiet: WaitQuietOpt = None,
) -> None:
    """Time one model file the way trtexec does (warm-up, duration, percentiles), in windows until stable as perf_analyzer."""
    from deploy.commands.benchmark import BenchRequest, bench_file
    from deploy.commands.runs import check_writable

    check_writable("--exportTimes", export_times)  # before timing, not after it
    _room_for(iterations)
    request = BenchRequest(
        shapes=shapes,
        warmup_ms=warmup,
        duration_s=duration,
        iterations=iterations,
        percentiles=percentile,
        export=export_times,
        runtime=runtime,
        threads=threads,
        streams=streams,
        stability_windows=stability_windows,
        stability_percentage=stability_percentage,
        max_trials=max_trials,
        hint=hint,
        wait_quiet_s=wait_quiet or 0.0,
    )
    bench_file(model, request)
