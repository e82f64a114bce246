"""`deploy bench MODEL_FILE`: trtexec-style timing of one model file."""

from __future__ import annotations

import re
import sys
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import typer

from deploy.domain.issues import Issue
from deploy.domain.vocabulary import Metric
from deploy.pipeline.errors import ConfigError, Contended, DeployError, EnvError, StageFailed
from deploy.runtimes.base import Device
from deploy.runtimes.catalog import PLUGINS, for_suffix, get, names
from deploy.runtimes.plugin import Made

# `deploy bench MODEL` times one file, with the runtime its suffix implies or --runtime names.
FILE_RUNTIMES = tuple(p.name for p in PLUGINS if p.open_file is not None)
SHAPE = re.compile(r"^([A-Za-z_][\w.:/-]*):(\d+(?:x\d+)*)$")


@dataclass(frozen=True, kw_only=True)
class BenchRequest:
    """`deploy bench`'s options, as trtexec names them where the concept is the same."""

    shapes: str | None
    warmup_ms: float
    duration_s: float
    iterations: int
    percentiles: str
    export: Path | None
    runtime: str
    threads: int | None
    streams: int | None  # None: 1, or the requests OpenVINO's throughput hint asks for
    # perf_analyzer's stability rule: the last K windows agree within ±percentage, up to max trials.
    stability_windows: int = 3
    stability_percentage: float = 10.0
    max_trials: int = 10
    hint: str = "latency"  # OpenVINO's performance hint
    wait_quiet_s: float = 0.0  # --wait-quiet: 0 times at once


def bench_file(model: Path, request: BenchRequest) -> None:
    from deploy.runtimes import contention, harness

    chosen = _runtime(model, request.runtime)
    settings = _settings(request)
    hint = _hint(request.hint, chosen)
    fit = contention.fitted(request.threads)  # bench's threads policy: --threads, else the free cores
    if request.threads is not None and (fit.threads or 0) < request.threads:
        typer.echo(
            f"[W] --threads {request.threads}: this machine has {contention.cores()} cores; timing with {fit.threads}"
        )
    try:
        made = _make(chosen, model, replace(request, threads=fit.threads), hint)
    except ConfigError as exc:  # a --shapes problem is a command-line problem
        raise typer.BadParameter("; ".join(i.message for i in exc.issues), param_hint="--shapes") from None
    except (ImportError, MemoryError, EnvError, typer.BadParameter):
        raise
    except Exception as exc:  # the runtime cannot read the file: a bad input file (exit 3), not a crash
        if _hook_bug(exc, chosen):
            raise  # the hook's own code, not the file: deploy's bug (exit 70, its traceback)
        said = " ".join(str(exc).split())[:400]
        kind = (
            "" if isinstance(exc, DeployError) else f"{type(exc).__name__}: "
        )  # deploy's own words need no class
        raise ConfigError(
            str(model), [Issue("MODEL_FILE", f"{chosen} cannot read it: {kind}{said}")]
        ) from None
    if not isinstance(made, Made):  # a plugin's hook: its bug named, not an AttributeError's traceback
        raise StageFailed(f"runtime {chosen}'s open_file hook returned {type(made).__name__}, not a Made")
    _first_call(made.call, request.shapes, chosen)
    kept = made.settings.get("requests", 1)  # the requests OpenVINO's throughput hint keeps in flight
    count = request.streams or (kept if hint == Metric.THROUGHPUT and isinstance(kept, int) else 1)
    typer.echo(
        f"[I] Model: {model} ({chosen}), shapes: {request.shapes or 'from the model'}, streams: {count}"
    )
    if made.settings:
        typer.echo("[I] Settings: " + ", ".join(f"{k} {v}" for k, v in made.settings.items()))
    _settle(request.wait_quiet_s)
    timing = _timing(made.call, settings, count, fit)
    for line in harness.report_lines(chosen, harness.summarize(timing, made.batch, settings), settings):
        typer.echo(line)
    if request.export is not None:
        harness.export_times(request.export, timing)
        typer.echo(f"[I] Per-call times written to {request.export}")


def _settle(wait_s: float) -> None:
    """--wait-quiet: a quiet stretch before timing, or exit 8 naming the load (after the
    model is loaded and called once: loading is not what the wait is for)."""
    import time

    from deploy.runtimes import contention

    if wait_s <= 0:
        return
    began = time.monotonic()

    def busy(now: contention.Environment) -> None:
        typer.echo(
            f"[I] Waiting for a quiet machine ({time.monotonic() - began:.0f} of {wait_s:g} s): {now.text()}"
        )

    found = contention.settle(contention.QUIET_S, wait_s, busy=busy)
    if found is not None and found.contended:
        raise Contended(
            f"{found.text()} for {time.monotonic() - began:.0f} s: gave up waiting for a quiet machine (--wait-quiet); nothing was timed"
        )
    typer.echo(
        f"[I] Quiet after {time.monotonic() - began:.0f} s: {found.text() if found else 'not measured (no /proc)'}"
    )


def _first_call(call: Any, shapes: str | None, runtime: str) -> None:
    """One call before any timing: a shape the model cannot take is said as the runtime says
    it, against --shapes (a usage error), not as a traceback from inside the timing loop."""
    try:
        call()
    except (ImportError, MemoryError, EnvError):  # the machine's or the install's, not the shape's
        raise
    except Exception as exc:
        said = f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"  # ORT's indices are on line 2
        if shapes:
            raise typer.BadParameter(
                f"the model does not run at {shapes} under {runtime}: {said}", param_hint="--shapes"
            ) from None
        raise StageFailed(
            f"the model does not run under {runtime} at the shapes it declares: {said}"
        ) from exc


# What a hook's own code raises on a mistake in it, whatever file it was given.
BUG_TYPES = (NameError, AttributeError, TypeError, AssertionError)


def _hook_bug(exc: Exception, chosen: str) -> bool:
    """The runtime's open_file hook raised a programming error in its own module (not in
    the library it handed the file to): the hook's bug, which no file would avoid."""
    if not isinstance(exc, BUG_TYPES) or exc.__traceback__ is None:
        return False
    hook = get(chosen).open_file
    module = sys.modules.get(getattr(hook, "__module__", ""))
    source = getattr(module, "__file__", None)
    innermost = traceback.extract_tb(exc.__traceback__)[-1].filename
    return source is not None and Path(innermost).resolve() == Path(source).resolve()


def _make(chosen: str, model: Path, request: BenchRequest, hint: str) -> Any:
    opened = get(chosen).open_file
    assert opened is not None, f"{chosen} runs no model file"
    return opened(model, parse_shapes(request.shapes), request.threads, hint)


def parse_shapes(text: str | None) -> dict[str, tuple[int, ...]]:
    """trtexec's --shapes: `input:8x3x224x224,mask:8x128`."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in filter(None, (text or "").split(",")):
        match = SHAPE.match(item.strip())
        if match is None:
            raise ConfigError(
                "--shapes", [Issue("--shapes", f"'{item}' is not NAME:DxDxD (e.g. input:1x3x224x224)")]
            )
        shapes[match.group(1)] = tuple(int(d) for d in match.group(2).split("x"))
        if 0 in shapes[match.group(1)]:
            raise ConfigError(
                "--shapes", [Issue("--shapes", f"'{item}' has a dim of 0: every dim is at least 1")]
            )
    return shapes


def _hint(hint: str, runtime: str) -> str:
    if hint not in HINTS:
        raise typer.BadParameter(f"'{hint}' is not one of {', '.join(HINTS)}", param_hint="--hint")
    if hint != Metric.LATENCY and get(runtime).throughput is None:
        raise typer.BadParameter(f"a performance hint is OpenVINO's; {runtime} has none", param_hint="--hint")
    return hint


AUTO = "auto"  # --runtime: chosen by the model file's suffix
HINTS = tuple(Metric)  # OpenVINO's performance hints, by what they favour


def _settings(request: BenchRequest) -> Any:
    from deploy.runtimes import harness

    if not 0 < request.stability_percentage < 100:
        raise typer.BadParameter(
            f"{request.stability_percentage} is not in (0, 100)", param_hint="--stability-percentage"
        )
    if request.max_trials < request.stability_windows:
        raise typer.BadParameter(
            f"{request.max_trials} < --stability-windows {request.stability_windows}",
            param_hint="--max-trials",
        )
    return harness.Settings(
        request.warmup_ms,
        request.duration_s,
        request.iterations,
        _percentiles(request.percentiles),
        request.stability_windows,
        request.stability_percentage / 100,
        request.max_trials,
    )


def _timing(call: Any, settings: Any, count: int, fit: Any) -> Any:
    from deploy.runtimes import harness, streams

    if count == 1:
        return harness.measure(call, settings, fit)
    return streams.measure([call] * count, settings, fit=fit)[0]  # one session, called from every stream


def _runtime(model: Path, runtime: str) -> str:
    if model.is_dir():
        raise ConfigError(str(model), [Issue("MODEL_FILE", "is a directory: name a model file in it")])
    if not model.is_file():
        raise ConfigError(str(model), [Issue("MODEL_FILE", "file not found")])
    if runtime == AUTO:
        found = for_suffix(model.suffix)
        runtime = found.name if found is not None and found.open_file is not None else ""
    if runtime not in FILE_RUNTIMES:
        said = f"'{runtime}' runs no model file" if runtime else f"cannot tell the runtime of '{model.name}'"
        raise typer.BadParameter(f"{said}; pass one of {names(FILE_RUNTIMES)}", param_hint="--runtime")
    plugin = get(runtime)
    if reason := plugin.reason_unavailable(
        plugin.on(Device.CPU)
    ):  # e.g. a CUDA provider on a machine without a GPU
        raise EnvError(f"--runtime {runtime}: {reason}")
    return runtime


def _percentiles(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or not all(0 < v <= 100 for v in values):
        raise typer.BadParameter(
            f"'{text}' is not a list of percentiles in (0, 100]", param_hint="--percentile"
        )
    return values
