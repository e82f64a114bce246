"""PyTorch in process: eager (the baseline every speed-up is measured against), TorchScript,
and AOTInductor packages at each precision the inductor stages compile."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deploy.domain.artifacts import TORCHSCRIPT
from deploy.domain.vocabulary import ModelSuffix, Precision, ServingFormat
from deploy.pipeline.graph.contract import SOURCE_ARTIFACT
from deploy.runtimes.base import Device, Feeds
from deploy.runtimes.host import torch_cannot
from deploy.runtimes.plugin import BenchHook, Family, Made, RuntimePlugin, Shapes, batch_of

if TYPE_CHECKING:
    from pathlib import Path

    from deploy.pipeline.graph.contract import StageContext
    from deploy.runtimes.base import Session
    from deploy.runtimes.timing import Timed


def _eager(ctx: StageContext, feeds: Feeds, device: Device, threads: int | None) -> Timed:
    from deploy.modelio.loading import load_adapted
    from deploy.runtimes.torchrt import TorchModule

    names = (ctx.config.input_names(), ctx.config.output_names())
    return TorchModule(load_adapted(ctx.config, feeds), *names, device, threads).timed(feeds)


def _torchscript(ctx: StageContext, feeds: Feeds, device: Device, threads: int | None) -> Timed:
    from deploy.runtimes.torchrt import TorchModule

    names = (ctx.config.input_names(), ctx.config.output_names())
    return TorchModule.torchscript(ctx.input(TORCHSCRIPT), *names, device, threads).timed(feeds)


def _torchscript_parity(ctx: StageContext) -> Session:
    from deploy.runtimes.torchrt import TorchModule

    return TorchModule.torchscript(
        ctx.input(TORCHSCRIPT), ctx.config.input_names(), ctx.config.output_names()
    )


def _torchscript_file(path: Path, shapes: Shapes, threads: int | None, hint: str) -> Made:
    from deploy.domain.issues import Issue
    from deploy.pipeline.errors import ConfigError
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
    return Made(module.timed(feeds).call, batch_of(feeds))


def _inductor(artifact: str) -> BenchHook:
    def bench(ctx: StageContext, feeds: Feeds, device: Device, threads: int | None) -> Timed:
        from deploy.runtimes import inductorrt

        names = (ctx.config.input_names(), ctx.config.output_names())
        return inductorrt.load(ctx.input(artifact), *names, device, threads).timed(feeds)

    return bench


def _inductor_file(path: Path, outputs: Sequence[str] | None, precision: str) -> Any:
    from deploy.runtimes import inductorrt

    return inductorrt.load_file(path, outputs)  # computes in the precision it was compiled in


def inductor(precision: Precision, suffix: str = "") -> RuntimePlugin:
    """The AOTInductor package of one precision: a parameter, not a copied runtime."""
    artifact = f"inductor{suffix}"
    return RuntimePlugin(
        artifact,
        artifact,
        Family.INDUCTOR,
        precision,
        (ServingFormat.PYTHON_INDUCTOR,),
        accuracy=f"accuracy_{artifact}" if suffix else None,
        unavailable=torch_cannot,
        bench=_inductor(artifact),
        load_file=_inductor_file,
        suffixes=(ModelSuffix.PT2,),
        by_suffix=not suffix,
    )


EAGER_RUNTIME = RuntimePlugin(
    "eager",
    SOURCE_ARTIFACT,
    Family.PYTORCH,
    Precision.FP32,
    baseline=True,
    unavailable=torch_cannot,
    bench=_eager,
)
TORCHSCRIPT_RUNTIME = RuntimePlugin(
    "torchscript",
    "torchscript",
    Family.TORCHSCRIPT,
    Precision.FP32,
    (ServingFormat.TORCHSCRIPT,),
    absent="no TorchScript: this config has no trace stage",
    unavailable=torch_cannot,
    bench=_torchscript,
    parity=_torchscript_parity,
    open_file=_torchscript_file,
    suffixes=(".pt", ".ts"),
)
ALL = (
    EAGER_RUNTIME,
    TORCHSCRIPT_RUNTIME,
    inductor(Precision.FP32),
    inductor(Precision.FP16, "_fp16"),
    inductor(Precision.BF16, "_bf16"),
)
