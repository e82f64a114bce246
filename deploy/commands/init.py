"""`deploy init`: a starter config for a model nobody configured yet. The model is built
from its source and called at the smallest batch of the `opt` shapes; what it returns (a
tensor, a tuple, a dict, a `ModelOutput`, or one dict of detections per image) becomes the
declared outputs, each with its path and a guessed `kind`. Dims get readable names (batch,
sequence, height, width; one name for a sequence length that inputs share), integer
inputs named like masks get {0, 1}, and an output that depends on the rest of its batch
(measured as golden measures it) is written with `max_batch_size: 0`. The file is written
only once it passes the same validation as `deploy validate`."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

import yaml

from deploy.commands.init_model import COUNT, MAX_DETECTIONS, Findings, Found, discover
from deploy.domain.issues import Issue
from deploy.pipeline.errors import ConfigError

if TYPE_CHECKING:
    from deploy.spec.config import ModelSource
    from deploy.spec.tensors import InputSpec

__all__ = ["discover", "initialise", "input_specs", "parse_input", "starter"]

INPUT_FORM = (
    "NAME:DTYPE:MIN/OPT/MAX, shapes as 1x3x224x224 (e.g. image:float32:1x3x224x224/4x3x224x224/8x3x224x224)"
)
SHAPE = re.compile(r"^\d+(x\d+)*$")
# Random token ids stay below any real vocabulary's size; masks and segment ids are 0 / 1.
INT_RANGE = (0, 99)
BINARY_RANGE = (0, 1)
BINARY_NAMES = re.compile(r"mask|token_type|segment", re.I)
DETECTION_RTOL = 0.01


class InputEntry(TypedDict):
    """One `inputs:` entry of a written config (spec.tensors.InputSpec's YAML form)."""

    name: str
    dtype: str
    dims: list[int | str]
    min: list[int]
    opt: list[int]
    max: list[int]
    value_range: NotRequired[list[float]]


class SourceEntry(TypedDict, total=False):
    """The `model:` section of a written config (spec.config.ModelSource's YAML form)."""

    factory: str
    file: str
    callable: str
    torchscript: str
    checkpoint: str
    kwargs: dict[str, object]
    detections: dict[str, int]


def input_entry(
    name: str, dtype: str, dims: list[int | str], low: Sequence[int], opt: Sequence[int], high: Sequence[int]
) -> InputEntry:
    entry = InputEntry(name=name, dtype=dtype, dims=dims, min=list(low), opt=list(opt), max=list(high))
    if dtype.startswith(("int", "uint")):
        entry["value_range"] = list(BINARY_RANGE if BINARY_NAMES.search(name) else INT_RANGE)
    return entry


@dataclass(frozen=True)
class InputArg:
    name: str
    dtype: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]


def parse_input(text: str) -> InputArg:
    """`--input NAME:DTYPE:MIN/OPT/MAX`; a ConfigError naming the option and the form."""
    parts = text.split(":")
    shapes = parts[2].split("/") if len(parts) == 3 else []
    if len(shapes) != 3 or not all(SHAPE.match(s) for s in shapes):
        raise ConfigError("--input", [Issue("--input", f"'{text}' is not {INPUT_FORM}")])
    low, mid, high = (tuple(int(d) for d in s.split("x")) for s in shapes)
    return InputArg(parts[0], parts[1], low, mid, high)


def parse_kwargs(items: list[str]) -> dict[str, object]:
    """`--kwarg weights=null`: the factory's keyword arguments, values read as YAML."""
    found: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise ConfigError("--kwarg", [Issue("--kwarg", f"'{item}' is not KEY=VALUE (e.g. weights=null)")])
        found[key] = yaml.safe_load(value)
    return found


def input_specs(args: list[InputArg]) -> list[InputEntry]:
    """Dims named from the shapes: a varying axis 0 is `batch`; other varying axes are
    named by their role (sequence, height, width), one name per role and range across
    inputs (a sequence length inputs share), another where the ranges differ."""
    names: dict[tuple[str, tuple[int, int, int]], str] = {}
    specs = []
    for arg in args:
        dims: list[int | str] = []
        for axis, (low, mid, high) in enumerate(zip(arg.min, arg.opt, arg.max)):
            if low == high:
                dims.append(low)
            elif axis == 0:
                dims.append("batch")
            else:
                dims.append(_dim_name(names, _role(axis, len(arg.min), arg.dtype), (low, mid, high)))
        specs.append(input_entry(arg.name, arg.dtype, dims, arg.min, arg.opt, arg.max))
    return specs


def _dim_name(
    names: dict[tuple[str, tuple[int, int, int]], str], role: str, span: tuple[int, int, int]
) -> str:
    """The role's name for this range; a second range of the same role gets a number."""
    taken = sum(1 for r, _ in names if r == role)
    return names.setdefault((role, span), role if not taken else f"{role}{taken + 1}")


def _role(axis: int, rank: int, dtype: str) -> str:
    """What a dynamic axis most likely is: images are [batch, channels, height, width],
    token ids [batch, sequence], embeddings [batch, sequence, features]."""
    if rank == 4 and axis in (2, 3) and not dtype.startswith(("int", "uint")):
        return ("height", "width")[axis - 2]
    if axis == 1 and rank in (2, 3):
        return "sequence"
    return f"dim{axis}"


def detection_inputs(specs: list[InputEntry]) -> list[InputEntry]:
    """A model that takes its batch as a list of images is exported unrolled: batch 1; its
    images are in [0, 1] (torchvision's detectors normalise them themselves)."""
    found = []
    for spec in specs:
        shapes = [[1, *spec[k][1:]] for k in ("min", "opt", "max")]
        entry = input_entry(spec["name"], spec["dtype"], [1, *spec["dims"][1:]], *shapes)
        if not spec["dtype"].startswith(("int", "uint")):
            entry["value_range"] = [0, 1]
        found.append(entry)
    return found


def starter(name: str, source: SourceEntry, inputs: list[InputEntry], found: Findings) -> str:
    """The config's text, commented for the person who will edit it."""
    model = SourceEntry(**source)
    if found.detections:
        model["detections"] = {"max_detections": MAX_DETECTIONS}
    body: dict[str, object] = {
        "name": name,
        "model": model,
        "inputs": inputs,
        "outputs": [_output(o) for o in found.outputs],
    }
    fixed = all(isinstance(s["dims"][0], int) for s in inputs)
    if fixed:
        body["batch_dim"] = None
    shapes = [
        f"# outputs: {o.name} {list(o.shape)} at the smallest batch (kind '{o.kind}' is a guess)"
        for o in found.outputs
    ]
    lines = [
        f"# Written by `deploy init` for '{name}'; check the guesses, then `deploy run` this file.",
        "# Every key is in the config reference; `deploy validate FILE` checks the file.",
        *_notes(found, fixed),
        yaml.safe_dump(body, sort_keys=False, default_flow_style=None).rstrip(),
        *shapes,
        "",
        "stages:",
        *_stage_lines(found, fixed),
        "",
    ]
    return "\n".join(lines)


def _stage_lines(found: Findings, fixed: bool) -> list[str]:
    # Detections decode box coordinates through exp(): float noise grows with their scale.
    tolerance = f" {{tolerance: {{rtol: {DETECTION_RTOL}}}}}" if found.detections else " {}"
    lines = [
        f"  export:{tolerance}          # ONNX; exporter auto: torch.export, the legacy exporter where it fails",
        f"  simplify:{tolerance}        # onnxsim, with a parity check against the eager model",
        "  validate:           # ONNX Runtime against the eager model at min / opt / max",
        "    runtimes: [onnxruntime]",
        *([f"    rtol: {DETECTION_RTOL}"] if found.detections else []),
        "  triton_config:      # a Triton repository; `python` (ONNX Runtime) loads on any tritonserver",
        "    formats: [python]",
        *(
            ["    max_batch_size: 0  # fixed shapes: each request is one call of the model, as sent"]
            if fixed
            else []
        ),
        *_batch_lines(found),
        f"  smoke:{tolerance}           # a real tritonserver: metadata, HTTP + gRPC parity, concurrent clients",
        "  # quantize: {}      # INT8 with an accuracy gate (give calibration data: docs/how-to)",
        "  # bench: {}         # trtexec-style timing of every runtime",
    ]
    return lines


def _notes(found: Findings, fixed: bool) -> list[str]:
    if found.detections:
        return [
            "# The model answers one dict of detections per image: each tensor is padded to max_detections",
            f"# rows, with {COUNT} valid ones. It takes its batch as a list of images, which the export",
            "# unrolls: the batch is fixed at 1.",
        ]
    if fixed:
        return ["# Every input shape is fixed: no batch dim (batch_dim: null), Triton's max_batch_size is 0."]
    return []


def _batch_lines(found: Findings) -> list[str]:
    """max_batch_size: 0 where an output depends on the rest of its batch (measured)."""
    record = found.batching
    if record is None or not record.dependent() or found.detections:
        return []
    names = {m.name: o.name for m, o in zip(record.outputs, found.outputs)}
    said = [
        f"    # {names.get(o.name, o.name)} depends on the rest of its batch: {o.difference()}"
        for o in record.dependent()
    ]
    return [
        *said,
        "    # Triton must not merge clients' requests (dynamic batching): each request runs as sent.",
        "    max_batch_size: 0",
    ]


def _output(found: Found) -> dict[str, str]:
    entry = {"name": found.name}
    if found.path is not None:
        entry["path"] = found.path
    return entry | {"kind": found.kind}


def write_checked(text: str, dest: Path) -> None:
    """Written only if it validates as `deploy validate` would (nothing on failure)."""
    from deploy.pipeline.project import load_project

    tmp = dest.with_name(f".{dest.name}.init")
    tmp.write_text(text)
    try:
        load_project(tmp)
    except ConfigError as exc:  # about the file being written, not the scratch copy
        tmp.unlink(missing_ok=True)
        raise ConfigError(str(dest), exc.issues) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(dest)


@dataclass(frozen=True)
class InitRequest:
    """`deploy init`'s options."""

    factory: str | None
    file: Path | None
    callable: str | None
    torchscript: Path | None
    kwargs: list[str]
    inputs: list[str]
    name: str | None
    output: Path | None
    overwrite: bool

    @property
    def chosen_name(self) -> str:
        raw = (self.factory or "").rpartition(":")[2] or self.callable
        raw = raw or (self.torchscript.stem if self.torchscript else "") or "model"
        return re.sub(r"[^A-Za-z0-9_.-]", "_", raw)

    def source(self, base: Path) -> SourceEntry:
        """`model:` as the written file needs it: local paths relative to its directory."""
        found = SourceEntry()
        if self.factory is not None:
            found["factory"] = self.factory
        if self.callable is not None:
            found["callable"] = self.callable
        if self.file is not None:
            found["file"] = os.path.relpath(self.file.absolute(), base)
        if self.torchscript is not None:
            found["torchscript"] = os.path.relpath(self.torchscript.absolute(), base)
        if self.kwargs:
            found["kwargs"] = parse_kwargs(self.kwargs)
        return found


def initialise(request: InitRequest) -> Path:
    """Writes the starter config; returns where. Nothing is written on any error."""
    name = request.name or request.chosen_name
    dest = (request.output or Path(f"{name}.yaml")).absolute()
    if dest.exists() and not request.overwrite:
        raise ConfigError(str(dest), [Issue("--output", "exists; pass --overwrite to replace it")])
    inputs = [parse_input(i) for i in request.inputs]
    write_checked(make_config(request.source(dest.parent), inputs, name, dest), dest)
    return dest


def make_config(source: SourceEntry, args: list[InputArg], name: str, dest: Path) -> str:
    """Builds the model from `source`, calls it (deploy/commands/init_model.py) and returns the
    starter config's text; a ConfigError naming the option or the model's failure."""
    from deploy.commands.init_model import inspect
    from deploy.modelio.loading import load_model
    from deploy.pipeline.errors import StageFailed

    specs = input_specs(args)
    model_source, checked = _validated(source, specs, dest.parent)
    try:
        found = inspect(load_model(model_source), checked)
    except StageFailed as exc:  # the model could not be built or called: say which
        raise ConfigError("model", [Issue("model", str(exc))]) from None
    return starter(name, source, detection_inputs(specs) if found.detections else specs, found)


def _validated(
    source: SourceEntry, specs: list[InputEntry], base: Path
) -> tuple[ModelSource, list[InputSpec]]:
    from pydantic import ValidationError

    from deploy.spec.config import ModelSource
    from deploy.spec.tensors import InputSpec

    model: ModelSource | None = None

    issues, checked = [], []
    try:
        model = ModelSource.model_validate(source, context={"base_dir": base})
    except ValidationError as exc:
        issues += [Issue(f"--{_option(err['loc'])}", err["msg"]) for err in exc.errors()]
    for spec in specs:
        try:
            checked.append(InputSpec.model_validate(spec))
        except ValidationError as exc:
            issues += [Issue(f"--input {spec['name']}", err["msg"]) for err in exc.errors()]
    if issues or model is None:
        raise ConfigError("deploy init", issues)
    return model, checked


def _option(loc: tuple[int | str, ...]) -> str:
    return str(loc[0]) if loc else "factory"
