"""`deploy bench MODEL_FILE`: its arguments, as trtexec names them; the work is deploy/commands/benchmark.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def bench(
    model: Annotated[
        Path,
        typer.Argument(
            help="A model file: .onnx (ONNX Runtime), .xml (OpenVINO IR), .pt/.ts (TorchScript), … ."
        ),
    ],
    shapes: Annotated[str | None, typer.Option("--shapes", help="NAME:DxDxD,... (as trtexec).")] = None,
    warmup: Annotated[float, typer.Option("--warmUp", min=0, help="Warm-up time, ms.")] = 200.0,
    duration: Annotated[float, typer.Option("--duration", min=0, help="Minimum timed duration, s.")] = 3.0,
    iterations: Annotated[int, typer.Option("--iterations", min=1, help="Minimum timed calls.")] = 10,
    percentile: Annotated[
        str, typer.Option("--percentile", help="Comma-separated, e.g. 90,95,99.")
    ] = "90,95,99",
    export_times: Annotated[
        Path | None, typer.Option("--exportTimes", help="Write per-call times (JSON).")
    ] = None,
    runtime: Annotated[
        str,
        typer.Option(
            "--runtime",
            help="auto (by the file's suffix), or a runtime that runs model files (`deploy doctor` lists them).",
        ),
    ] = "auto",
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="Intra-op threads.")] = None,
    streams: Annotated[
        int | None,
        typer.Option(
            "--streams",
            "--concurrency",
            min=1,
            help="Parallel closed-loop streams [default: 1; OpenVINO's throughput hint: the requests it asks for].",
        ),
    ] = None,
    hint: Annotated[
        str, typer.Option("--hint", help="OpenVINO's performance hint: latency | throughput.")
    ] = "latency",
    stability_windows: Annotated[
        int, typer.Option("--stability-windows", min=1, help="Stop once the last K windows agree.")
    ] = 3,
    stability_percentage: Annotated[
        float,
        typer.Option("--stability-percentage", help="Allowed spread of those windows, ± % of their mean."),
    ] = 10.0,
    max_trials: Annotated[
        int, typer.Option("--max-trials", min=1, help="Most windows before giving up (marked unstable).")
    ] = 10,
) -> None:
    """Time one model file the way trtexec does (warm-up, duration, percentiles), in windows until stable as perf_analyzer."""
    from deploy.commands.benchmark import BenchRequest, bench_file
    from deploy.commands.runs import check_writable

    check_writable("--exportTimes", export_times)  # before timing, not after it
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
    )
    bench_file(model, request)
