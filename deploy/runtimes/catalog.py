"""The runtimes, registered: every plugin (runtimes/plugins/, the contract in runtimes/plugin.py)
by name, in the order select lists candidates and `serving` prefers them. A new runtime is
its plugin module and one line below; bench, validate, select, `deploy bench`, the host
checks and runtimes/files find it here and nowhere else.

Light: plugin modules import their libraries inside their hooks."""

from __future__ import annotations

from deploy.domain.vocabulary import Precision, ServingFormat
from deploy.runtimes.plugin import Family, RuntimePlugin
from deploy.runtimes.plugins import (
    onnx_plugins,
    onnxruntime_cuda,
    openvino_plugins,
    tensorrt_plugin,
    torch_plugins,
    triton_plugin,
)

_EAGER, _TORCHSCRIPT, *_INDUCTOR = torch_plugins.ALL
_OPENVINO, _OPENVINO_INT8, _OPENVINO_BF16, _OPENVINO_FP16 = openvino_plugins.ALL
PLUGINS: tuple[RuntimePlugin, ...] = (
    _EAGER,
    _TORCHSCRIPT,
    *onnx_plugins.ALL,
    _OPENVINO,
    _OPENVINO_FP16,
    _OPENVINO_BF16,
    _OPENVINO_INT8,
    tensorrt_plugin.PLUGIN,
    *_INDUCTOR,
    triton_plugin.PLUGIN,
    onnxruntime_cuda.PLUGIN,
)
CATALOG: dict[str, RuntimePlugin] = {p.name: p for p in PLUGINS}
assert len(CATALOG) == len(PLUGINS), "two plugins share a name"

# The runtimes that run in the bench stage's own process (the candidates `select` weighs).
IN_PROCESS = tuple(p.name for p in PLUGINS if p.in_process)
BASELINE = next(p.name for p in PLUGINS if p.baseline)  # the row speed-ups are against
SERVED = next(p.name for p in PLUGINS if not p.in_process)  # bench's rows timed through a server
ONNX_FORMATS = onnx_plugins.FORMATS
OPENVINO_FORMATS = openvino_plugins.FORMATS
# The accuracy reports select reads: one per reduced precision a stage gates.
ACCURACY_REPORTS = tuple(dict.fromkeys(p.accuracy for p in PLUGINS if p.accuracy))
PARITY = tuple(p.name for p in PLUGINS if p.parity is not None)  # what validate can check


def registered(value: tuple[str, ...], among: tuple[str, ...], what: str) -> tuple[str, ...]:
    """A config's runtime names, each one of `among` (a params validator's check)."""
    unknown = [r for r in value if r not in among]
    if unknown:
        raise ValueError(f"{unknown} {what}: one of {names(among)}")
    return value


def get(name: str) -> RuntimePlugin:
    return CATALOG[name]


def artifact_of(runtime: str) -> str:
    return CATALOG[runtime].artifact


def checking(artifact: str) -> str:
    """The runtime validate runs on a file of `artifact`: the first registered that loads it
    and has a parity hook (ONNX Runtime on the CPU before its CUDA provider)."""
    return next(p.name for p in PLUGINS if p.artifact == artifact and p.parity is not None)


def names(where: tuple[str, ...] = ()) -> str:
    """`eager | torchscript | …`, for help texts and messages."""
    return " | ".join(where or tuple(CATALOG))


def serving(fmt: str, precision: str) -> RuntimePlugin | None:
    """The runtime whose artifact a Triton model of `fmt` at `precision` serves (None: deploy
    serves no such model); the first registered where several run the same file (ONNX
    Runtime on the CPU before its CUDA provider). The one table: triton_config writes
    models by it, select maps served models back to in-process rows by it."""
    found = [p for p in PLUGINS if fmt in p.served_as]
    exact = next((p for p in found if p.precision == precision), None)
    if exact is None and precision == Precision.FP32 and len({p.artifact for p in found}) == 1:
        return found[0]  # a TensorRT engine: one file, named as FP32 whatever its layers run in
    return exact


def for_suffix(suffix: str) -> RuntimePlugin | None:
    """The runtime that runs a model file with this suffix (`deploy bench FILE`, smoke)."""
    return next((p for p in PLUGINS if suffix in p.suffixes and p.by_suffix), None)


def formats_of(family: Family) -> tuple[ServingFormat, ...]:
    return tuple(dict.fromkeys(f for p in PLUGINS if p.family is family for f in p.served_as))
