"""What a runtime is, in one record: a plugin module under deploy/runtimes/plugins/ declares
each runtime's name, the artifact it loads, its family and precision, the device it runs on,
the Triton formats that serve it, and its hooks: how bench times it, how validate checks
its parity, how `deploy bench FILE` and smoke run a file of it. The catalog
(runtimes/catalog.py) registers them; bench, validate, select, `deploy bench`, the host
checks and runtimes/files dispatch through this contract, never on a runtime's name.

Stdlib only: plugins import their libraries inside their hooks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploy.domain.issues import Issue
from deploy.domain.vocabulary import Precision, ServingFormat
from deploy.pipeline.errors import ConfigError
from deploy.runtimes.base import Device, Feeds

if TYPE_CHECKING:
    from deploy.pipeline.graph.contract import StageContext
    from deploy.runtimes.base import Session
    from deploy.runtimes.timing import Timed


class Family(StrEnum):
    """What a deployment of a runtime is, whatever its precision."""

    PYTORCH = "pytorch"
    TORCHSCRIPT = "torchscript"
    ONNX = "onnx"
    OPENVINO = "openvino"
    TENSORRT = "tensorrt"
    INDUCTOR = "inductor"  # an AOTInductor package
    TRITON = "triton"


@dataclass(frozen=True)
class Made:
    """A model file ready to time: the call, its batch, the runtime's settings."""

    call: Callable[[], Any]
    batch: int
    settings: dict[str, object] = field(default_factory=dict)


Shapes = Mapping[str, tuple[int, ...]]
# bench: (ctx, feeds at one batch, device, intra-op threads) -> the timed call
BenchHook = Callable[["StageContext", Feeds, Device, "int | None"], "Timed"]
# OpenVINO's throughput hint: one call per request it keeps in flight, and its settings
ThroughputHook = Callable[
    ["StageContext", Feeds, "int | None"], tuple[list[Callable[[], Any]], dict[str, object]]
]
ParityHook = Callable[["StageContext"], "Session"]  # validate: the session answering golden's inputs
FileHook = Callable[
    [Path, Shapes, "int | None", str], Made
]  # `deploy bench FILE`: (path, --shapes, --threads, hint)
LoadHook = Callable[[Path, "Sequence[str] | None", str], Any]  # a served file, answered here (smoke)


def runs_anywhere(device: Device) -> str | None:
    return None


@dataclass(frozen=True)
class RuntimePlugin:
    name: str
    artifact: str  # the pipeline artifact it loads
    family: Family
    precision: Precision | None  # None: the served model's own (a Triton row)
    served_as: tuple[ServingFormat, ...] = ()  # Triton model formats (serving/layout.py) that serve it
    accuracy: str | None = None  # the artifact of its accuracy report against FP32, if any
    device: Device | None = None  # where it runs whatever bench.device says (None: bench.device)
    in_process: bool = True  # False: Triton, timed through a server
    baseline: bool = False  # the row speed-ups are measured against (eager PyTorch)
    absent: str = ""  # validate's words where its artifact was not made
    # Why this host cannot run it on a device (None: it can); said before a run, skipped in bench.
    unavailable: Callable[[Device], str | None] = runs_anywhere
    bench: BenchHook | None = None
    throughput: ThroughputHook | None = None
    parity: ParityHook | None = None
    open_file: FileHook | None = None
    load_file: LoadHook | None = None
    suffixes: tuple[str, ...] = ()  # model files it runs (`deploy bench FILE`, smoke's references)
    by_suffix: bool = True  # the one picked for those suffixes (False: asked for by name only)

    def reason_unavailable(self, device: Device) -> str | None:
        """`unavailable`, guarded: a check that raises is the reason, naming the runtime
        (a plugin's bug was a traceback, exit 70, in validate, plan and doctor)."""
        try:
            return self.unavailable(device)
        except Exception as exc:
            return f"runtime {self.name}'s availability check raised {type(exc).__name__}: {exc}"

    def on(self, asked: Device) -> Device:
        """The device it runs on when bench asks for `asked`."""
        return self.device or asked


def random_feeds(declared: Mapping[str, tuple[list[Any], str]], shapes: Shapes) -> Feeds:
    """Random inputs for a model file: declared (dims, dtype) per input, dynamic dims from
    --shapes; a --shapes name the model lacks is a command-line error."""
    from deploy.runtimes.arrays import random_array

    feeds = {
        name: random_array(_shape(name, dims, shapes), dtype) for name, (dims, dtype) in declared.items()
    }
    extra = sorted(set(shapes) - set(feeds))
    if extra:
        raise ConfigError(
            "--shapes", [Issue("--shapes", f"the model has no input(s) {extra} (inputs: {sorted(feeds)})")]
        )
    return feeds


def _shape(name: str, declared: list[Any], given: Shapes) -> tuple[int, ...]:
    if name in given:
        return given[name]
    if all(isinstance(d, int) for d in declared):
        return tuple(declared)
    raise ConfigError(
        "--shapes",
        [Issue("--shapes", f"input '{name}' has dynamic dims {declared}: give --shapes {name}:DxD...")],
    )


def batch_of(feeds: Feeds) -> int:
    first = next(iter(feeds.values()))
    return int(first.shape[0]) if first.ndim else 1
