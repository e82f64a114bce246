"""`deploy bench MODEL_FILE`: trtexec-style timing of one model file."""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.errors import ConfigError, Issue

RUNTIMES = {".onnx": "onnxruntime", ".pt": "torchscript", ".ts": "torchscript"}


def bench_file(
    model: Path, shapes: str | None, warmup_ms: float, duration_s: float, iterations: int,
    percentiles: str, export: Path | None, runtime: str, threads: int | None,
) -> None:
    from stages import _bench, _bench_runtimes

    chosen = _runtime(model, runtime)
    settings = _bench.Settings(warmup_ms, duration_s, iterations, _percentiles(percentiles))
    make = _bench_runtimes.onnxruntime if chosen == "onnxruntime" else _bench_runtimes.torchscript
    try:
        call, batch = make(model, _bench_runtimes.parse_shapes(shapes), threads)
    except ConfigError as exc:  # a --shapes problem is a command-line problem
        raise typer.BadParameter("; ".join(i.message for i in exc.issues), param_hint="--shapes") from None
    typer.echo(f"[I] Model: {model} ({chosen}), shapes: {shapes or 'from the model'}")
    timing = _bench.measure(call, settings)
    for line in _bench.report_lines(chosen, _bench.summarize(timing, batch, settings)):
        typer.echo(line)
    if export is not None:
        _bench.export_times(export, timing)
        typer.echo(f"[I] Per-call times written to {export}")


def _runtime(model: Path, runtime: str) -> str:
    if not model.is_file():
        raise ConfigError(str(model), [Issue("MODEL_FILE", "file not found")])
    if runtime == "auto":
        runtime = RUNTIMES.get(model.suffix, "")
    if runtime not in ("onnxruntime", "torchscript"):
        raise typer.BadParameter(f"cannot tell the runtime of '{model.name}'; pass onnxruntime or torchscript", param_hint="--runtime")
    return runtime


def _percentiles(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or not all(0 < v <= 100 for v in values):
        raise typer.BadParameter(f"'{text}' is not a list of percentiles in (0, 100]", param_hint="--percentile")
    return values
