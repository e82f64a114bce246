"""TensorRT: the build stage's engine, on the GPU whatever bench.device says (its absence,
no TensorRT or no GPU here, is the build stage's skip, said as the artifact missing)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from deploy.domain.artifacts import ENGINE
from deploy.domain.vocabulary import Precision, ServingFormat
from deploy.runtimes.base import Device, Feeds
from deploy.runtimes.host import tensorrt_cannot
from deploy.runtimes.plugin import Family, RuntimePlugin

if TYPE_CHECKING:
    from deploy.pipeline.graph.contract import StageContext
    from deploy.runtimes.base import Session
    from deploy.runtimes.timing import Timed


def _engine(ctx: StageContext) -> Session:
    from deploy.runtimes.tensorrt import TensorRTEngine

    return TensorRTEngine(ctx.input(ENGINE), ctx.config.input_names(), ctx.config.output_names())


def _bench(ctx: StageContext, feeds: Feeds, device: Device, threads: int | None) -> Timed:
    return _engine(ctx).timed(feeds)


PLUGIN = RuntimePlugin(
    "tensorrt",
    "engine",
    Family.TENSORRT,
    Precision.MIXED,
    (ServingFormat.PLAN,),
    device=Device.CUDA,
    absent="no engine: the build stage was skipped (no TensorRT or GPU)",
    unavailable=tensorrt_cannot,
    bench=_bench,
    parity=_engine,
)
