"""An AOTInductor package (`model.pt2`, built by stages/inductor) loaded and fed numpy
arrays, and the typed record written beside it: what it was compiled for and how long
that took. Imports torch in the functions that load."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploy.domain.vocabulary import Precision
from deploy.pipeline.errors import StageFailed, first_line
from deploy.pipeline.graph.facts import Fact
from deploy.pipeline.graph.records import read_record, record_json
from deploy.runtimes.base import Device

if TYPE_CHECKING:
    from deploy.runtimes.torchrt import TorchModule

PACKAGE_FILE = "model.pt2"
RECORD_FILE = "package.json"
SCHEMA = 2  # 2: the input names (a served package is run locally without the config)

# The device the inductor stage compiles for (`stages.inductor.device`): the reduced-precision
# packages (gates/inductor_precision) are compiled for the same one, and timed beside it.
INDUCTOR_DEVICE: Fact[Device] = Fact("inductor_device", Device.CPU)


@dataclass(frozen=True)
class PackageRecord:
    """Beside model.pt2: the runtime that loads it checks the device, the report says
    what the build cost."""

    device: Device
    precision: Precision
    compile_s: float
    torch: str
    batch: tuple[int, int] | None  # the batch range compiled (min, max); None: fixed shapes
    inputs: tuple[str, ...]  # the declared inputs, in the order the package takes them

    def write(self, folder: Path) -> None:
        (folder / RECORD_FILE).write_text(json.dumps(record_json(self, SCHEMA), indent=2) + "\n")

    @classmethod
    def read(cls, folder: Path) -> PackageRecord:
        return read_record(folder / RECORD_FILE, cls, SCHEMA, "an AOTInductor package record")


class Package:
    """The loaded package as a module: called with the inputs by position, it returns
    the declared outputs in order (the build compiled the I/O adapter)."""

    def __init__(self, path: Path, device: Device) -> None:
        import torch._inductor

        try:
            self._run = torch._inductor.aoti_load_package(str(path))
        except Exception as exc:  # a damaged file, or a package of another torch
            raise StageFailed(f"AOTInductor cannot load {path}: {first_line(exc)}") from exc
        self.device = device

    def __call__(self, *args: Any) -> Any:
        return self._run(*args)

    def to(self, device: str) -> Package:
        if device != self.device.value:
            raise StageFailed(f"this AOTInductor package was compiled for {self.device.value}, not {device}")
        return self

    def eval(self) -> Package:
        return self


def load(
    path: Path, inputs: Sequence[str], outputs: Sequence[str], device: Device, threads: int | None = None
) -> TorchModule:
    """The package at `path` (its folder, or model.pt2 in it), to run on `device`: refused,
    naming the stage's setting, where it was compiled for another device."""
    from deploy.runtimes.torchrt import TorchModule

    folder = path if path.is_dir() else path.parent
    record = PackageRecord.read(folder)
    if record.device is not device:
        raise StageFailed(
            f"the AOTInductor package was compiled for {record.device.value}, not {device.value} "
            f"(stages.inductor.device: {device.value} builds one for it)"
        )
    return TorchModule(Package(folder / PACKAGE_FILE, device), inputs, outputs, device, threads)


def load_file(path: Path, outputs: Sequence[str] | None = None) -> TorchModule:
    """A package on its own (a served model file): its inputs and device from its record."""
    record = PackageRecord.read(path if path.is_dir() else path.parent)
    return load(path, record.inputs, outputs or (), record.device)
