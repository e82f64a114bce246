"""The runtimes the bench stage and `deploy bench` time: each becomes a zero-argument
call over fixed random inputs (and, on a GPU, a per-call H2D / compute / D2H record).
Heavy libraries are imported inside the functions that need them."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.domain.issues import Issue
from deploy.domain.vocabulary import Runtime
from deploy.pipeline.contract import StageContext
from deploy.pipeline.errors import ConfigError
from deploy.runtimes.base import Device, Feeds
from deploy.runtimes.catalog import CATALOG, Family, artifact_of
from deploy.runtimes.timing import Timed

SHAPE = re.compile(r"^([A-Za-z_][\w.:/-]*):(\d+(?:x\d+)*)$")


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
    return shapes


# -- the bench stage: inputs from the shape spec -------------------------------------------------
def make(runtime: str, ctx: StageContext, feeds: Feeds, device: Device, threads: int | None) -> Timed:
    """The runtime loaded from its artifact, timed over `feeds`."""
    names = (ctx.config.input_names(), ctx.config.output_names())
    if runtime.startswith("onnxruntime"):
        from deploy.runtimes.onnxrt import OnnxRuntime

        session = OnnxRuntime(ctx.input(artifact_of(runtime)), device, threads)
        ctx.record(f"{runtime}_settings", session.settings())
        return session.timed(feeds)
    if runtime.startswith("openvino"):
        model = _openvino(runtime, ctx, threads)
        ctx.record(f"{runtime}_settings", model.settings())  # the streams and threads its hint chose
        return model.timed(feeds)
    if runtime == Runtime.TENSORRT:
        from deploy.runtimes.tensorrt import TensorRTEngine

        return TensorRTEngine(ctx.input("engine"), *names).timed(feeds)
    from deploy.runtimes.torchrt import TorchModule

    if runtime == Runtime.TORCHSCRIPT:
        return TorchModule.torchscript(ctx.input("torchscript"), *names, device, threads).timed(feeds)
    if CATALOG[Runtime(runtime)].family is Family.INDUCTOR:
        from deploy.runtimes import inductorrt

        return inductorrt.load(ctx.input(artifact_of(runtime)), *names, device, threads).timed(feeds)
    from deploy.modelio.loading import load_adapted

    return TorchModule(load_adapted(ctx.config, feeds), *names, device, threads).timed(feeds)


def _openvino(runtime: str, ctx: StageContext, threads: int | None, throughput: bool = False) -> Any:
    from deploy.runtimes.openvinort import Compute, Hint, OpenVino

    compute = Compute.BF16 if runtime == Runtime.OPENVINO_BF16 else Compute.F32
    hint = Hint.THROUGHPUT if throughput else Hint.LATENCY
    return OpenVino(ctx.input(artifact_of(runtime)), hint=hint, threads=threads, compute=compute)


def throughput(
    runtime: str, ctx: StageContext, feeds: Feeds, threads: int | None
) -> tuple[list[Callable[[], Any]], dict[str, object]]:
    """OpenVINO under its THROUGHPUT hint: one closed-loop stream per request the plugin
    asks to keep in flight (OPTIMAL_NUMBER_OF_INFER_REQUESTS), each on its own request;
    and the streams and threads the hint chose."""
    model = _openvino(runtime, ctx, threads, throughput=True)
    settings = model.settings()
    return [model.call_per_thread(feeds)] * int(settings["requests"]), settings


def unavailable(runtime: str, device: Device) -> str | None:
    """Why this host cannot run `runtime` on `device` (bench skips it, saying so, as
    validate and plan said before the run); None when it can."""
    from deploy.runtimes.host import cannot_run

    if reason := cannot_run(Runtime(runtime), device):
        return reason
    if runtime != Runtime.OPENVINO_BF16:
        return None
    from deploy.runtimes.openvinort import Compute, lacks

    return lacks(Compute.BF16)


# -- `deploy bench FILE`: inputs from --shapes or the model -------------------------------------
@dataclass(frozen=True)
class Made:
    """A model file ready to time: the call, its batch, the runtime's settings."""

    call: Callable[[], Any]
    batch: int
    settings: dict[str, object] = field(default_factory=dict)


def onnxruntime(path: Path, shapes: dict[str, tuple[int, ...]], threads: int | None) -> Made:
    from deploy.runtimes.arrays import random_array
    from deploy.runtimes.onnxrt import OnnxRuntime

    model = OnnxRuntime(path, Device.CPU, threads)
    declared = model.input_types()
    feeds = {
        name: random_array(_shape(name, shape, shapes), dtype) for name, (shape, dtype) in declared.items()
    }
    _unknown(shapes, feeds)
    return Made(model.timed(feeds).call, _batch(feeds), model.settings())


def openvino(
    path: Path, shapes: dict[str, tuple[int, ...]], threads: int | None, hint: str = "latency"
) -> Made:
    """In FP32 (asked for: this CPU's default would be bf16), under `hint`."""
    from deploy.runtimes.arrays import random_array
    from deploy.runtimes.openvinort import Hint, OpenVino

    model = OpenVino(path, hint=Hint(hint.upper()), threads=threads)
    feeds = {
        name: random_array(_shape(name, shape, shapes), dtype)
        for name, (shape, dtype) in model.input_types().items()
    }
    _unknown(shapes, feeds)
    return Made(model.call_per_thread(feeds), _batch(feeds), model.settings())


def torchscript(path: Path, shapes: dict[str, tuple[int, ...]], threads: int | None) -> Made:
    from deploy.runtimes.arrays import random_array
    from deploy.runtimes.torchrt import TorchModule

    if not shapes:
        raise ConfigError(
            "--shapes",
            [Issue("--shapes", "TorchScript files carry no input shapes: give --shapes NAME:DxD,...")],
        )
    feeds = {name: random_array(shape, "float32") for name, shape in shapes.items()}
    # The module's outputs are not named in a file alone: timing does not need names.
    module = TorchModule.torchscript(path, list(feeds), (), Device.CPU, threads)
    return Made(module.timed(feeds).call, _batch(feeds))


def _shape(name: str, declared: list[Any], given: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    if name in given:
        return given[name]
    if all(isinstance(d, int) for d in declared):
        return tuple(declared)
    raise ConfigError(
        "--shapes",
        [Issue("--shapes", f"input '{name}' has dynamic dims {declared}: give --shapes {name}:DxD...")],
    )


def _unknown(given: dict[str, tuple[int, ...]], feeds: Feeds) -> None:
    extra = sorted(set(given) - set(feeds))
    if extra:
        raise ConfigError(
            "--shapes", [Issue("--shapes", f"the model has no input(s) {extra} (inputs: {sorted(feeds)})")]
        )


def _batch(feeds: Feeds) -> int:
    first = next(iter(feeds.values()))
    return int(first.shape[0]) if first.ndim else 1
