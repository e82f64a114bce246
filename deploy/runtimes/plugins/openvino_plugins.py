"""OpenVINO in process, always on the CPU: the openvino stage's FP32 IR (computed in f32, or
in bf16 as a precision of its own), its FP16-weights IR, and NNCF's INT8 IR; under the
latency hint, or the throughput hint with the requests the plugin asks for in flight."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploy.domain.artifacts import OPENVINO
from deploy.domain.vocabulary import ModelSuffix, Precision, ServingFormat
from deploy.runtimes.base import Device, Feeds
from deploy.runtimes.plugin import (
    BenchHook,
    Family,
    Made,
    RuntimePlugin,
    Shapes,
    ThroughputHook,
    batch_of,
    random_feeds,
)

if TYPE_CHECKING:
    from deploy.pipeline.graph.contract import StageContext
    from deploy.runtimes.base import Session
    from deploy.runtimes.timing import Timed

# Served by Triton's openvino backend, or by OpenVINO in the python backend.
FORMATS = (ServingFormat.OPENVINO, ServingFormat.PYTHON_OPENVINO)


def _model(artifact: str, bf16: bool, ctx: StageContext, threads: int | None, throughput: bool) -> Any:
    from deploy.runtimes.openvinort import Compute, Hint, OpenVino

    hint = Hint.THROUGHPUT if throughput else Hint.LATENCY
    compute = Compute.BF16 if bf16 else Compute.F32
    return OpenVino(ctx.input(artifact), hint=hint, threads=threads, compute=compute)


def _bench(name: str, artifact: str, bf16: bool) -> BenchHook:
    def bench(ctx: StageContext, feeds: Feeds, device: Device, threads: int | None) -> Timed:
        model = _model(artifact, bf16, ctx, threads, throughput=False)
        ctx.record(f"{name}_settings", model.settings())  # the streams and threads its hint chose
        return model.timed(feeds)  # type: ignore[no-any-return]

    return bench


def _throughput(artifact: str, bf16: bool) -> ThroughputHook:
    """One closed-loop stream per request the plugin asks to keep in flight
    (OPTIMAL_NUMBER_OF_INFER_REQUESTS), each on its own request; the hint's settings."""

    def loads(
        ctx: StageContext, feeds: Feeds, threads: int | None
    ) -> tuple[list[Callable[[], Any]], dict[str, object]]:
        model = _model(artifact, bf16, ctx, threads, throughput=True)
        settings = model.settings()
        return [model.call_per_thread(feeds)] * int(settings["requests"]), settings

    return loads


def _parity(ctx: StageContext) -> Session:
    from deploy.runtimes.openvinort import Compute, OpenVino

    return OpenVino(ctx.input(OPENVINO), outputs=ctx.config.output_names(), compute=Compute.F32)


def _file(path: Path, shapes: Shapes, threads: int | None, hint: str) -> Made:
    """In FP32 (asked for: this CPU's default would be bf16), under `hint`."""
    from deploy.runtimes.openvinort import Hint, OpenVino

    model = OpenVino(path, hint=Hint(hint.upper()), threads=threads)
    feeds = random_feeds(model.input_types(), shapes)
    return Made(model.call_per_thread(feeds), batch_of(feeds), model.settings())


def _load(path: Path, outputs: Sequence[str] | None, precision: str) -> Any:
    """A served IR: computed in bf16 where it is served as bf16, else in f32."""
    from deploy.runtimes.openvinort import Compute, OpenVino

    compute = Compute.BF16 if precision == Precision.BF16 else Compute.F32
    return OpenVino(path, outputs=outputs, compute=compute)


def _no_bf16(device: Device) -> str | None:
    """Asks OpenVINO only where the CPU's flags do not already say yes (native bf16, which
    OpenVINO's CPU plugin computes in): `deploy validate` and `plan` import no runtime.
    Their absence is not a no: OpenVINO may use other instructions."""
    from deploy.runtimes.host import lacks_native

    if lacks_native(Precision.BF16, Device.CPU) is None:
        return None
    from deploy.runtimes.openvinort import Compute, lacks

    return lacks(Compute.BF16)


def openvino(name: str, artifact: str, precision: Precision, served: bool = True) -> RuntimePlugin:
    fp32 = precision is Precision.FP32  # the openvino stage's IR: validate checks it, files run by it
    bf16 = precision is Precision.BF16  # that IR computed in bf16
    return RuntimePlugin(
        name,
        artifact,
        Family.OPENVINO,
        precision,
        FORMATS if served else (),
        accuracy=None if fp32 else f"accuracy_{name}",
        device=Device.CPU,
        absent="no OpenVINO IR: this config has no openvino stage" if fp32 else "",
        unavailable=_no_bf16 if bf16 else (lambda device: None),
        bench=_bench(name, artifact, bf16),
        throughput=_throughput(artifact, bf16),
        parity=_parity if fp32 else None,
        open_file=_file if fp32 else None,
        load_file=_load if fp32 else None,
        suffixes=(ModelSuffix.IR,) if fp32 else (),
    )


ALL = (
    openvino("openvino", "openvino", Precision.FP32),
    openvino("openvino_int8", "openvino_int8", Precision.INT8),
    openvino("openvino_bf16", "openvino", Precision.BF16),
    # In process only: the IR with FP16 weights (computed in FP32 on a CPU).
    openvino("openvino_fp16", "openvino_fp16", Precision.FP16, served=False),
)
