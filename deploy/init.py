"""`deploy init`: a starter config for a model nobody configured yet. The model is built
from its source and called once at the `opt` shapes; what it returns (a tensor, a tuple,
a dict, a `ModelOutput`) becomes the declared outputs, each with its path and a guessed
`kind`. The file is written only once it passes the same validation as `deploy validate`."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pipeline.errors import ConfigError, Issue

INPUT_FORM = (
    "NAME:DTYPE:MIN/OPT/MAX, shapes as 1x3x224x224 (e.g. image:float32:1x3x224x224/4x3x224x224/8x3x224x224)"
)
SHAPE = re.compile(r"^\d+(x\d+)*$")
# Random token ids stay below any real vocabulary's size.
INT_RANGE = (0, 99)


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


def parse_kwargs(items: list[str]) -> dict[str, Any]:
    """`--kwarg weights=null`: the factory's keyword arguments, values read as YAML."""
    found: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise ConfigError("--kwarg", [Issue("--kwarg", f"'{item}' is not KEY=VALUE (e.g. weights=null)")])
        found[key] = yaml.safe_load(value)
    return found


def input_specs(args: list[InputArg]) -> list[dict[str, Any]]:
    """Dims named from the shapes: a varying axis 0 is `batch`; other varying axes with
    the same min/opt/max share one name across inputs (a sequence length)."""
    names: dict[tuple[int, int, int], str] = {}
    specs = []
    for arg in args:
        dims: list[int | str] = []
        for axis, (low, mid, high) in enumerate(zip(arg.min, arg.opt, arg.max)):
            if low == high:
                dims.append(low)
            elif axis == 0:
                dims.append("batch")
            else:
                dims.append(names.setdefault((low, mid, high), f"dim{len(names) + 1}"))
        spec: dict[str, Any] = {"name": arg.name, "dtype": arg.dtype, "dims": dims}
        spec |= {"min": list(arg.min), "opt": list(arg.opt), "max": list(arg.max)}
        if arg.dtype.startswith(("int", "uint")):
            spec["value_range"] = list(INT_RANGE)
        specs.append(spec)
    return specs


@dataclass(frozen=True)
class Found:
    """One tensor the model returned, as an output entry."""

    name: str
    path: str | None  # None: the default (a lone tensor, or positions in order)
    shape: tuple[int, ...]
    kind: str


def discover(result_tensors: list[tuple[str, tuple[int, ...], str]], batched: bool) -> list[Found]:
    """Output entries for what the model returned (modelio.adapter.returned_tensors)."""
    by_position = all(path.isdigit() for path, _, _ in result_tensors)
    found = []
    for index, (path, shape, dtype) in enumerate(result_tensors):
        name = (
            re.sub(r"\W", "_", path) if path and not by_position else f"output{index}" if path else "output"
        )
        keep_path = None if (by_position or not path or path == name) else path
        found.append(
            Found(
                _valid_name(name), keep_path, shape, _kind(name, shape, dtype, batched, len(result_tensors))
            )
        )
    return found


def _valid_name(name: str) -> str:
    return name if re.match(r"^[A-Za-z_]", name) else f"out_{name}"


def _kind(name: str, shape: tuple[int, ...], dtype: str, batched: bool, count: int) -> str:
    """A guess, marked as one in the file: class scores are [batch, classes] floats."""
    if not dtype.startswith(("float", "bfloat")):
        return "other"
    rank2 = len(shape) == 2 and (shape[1] >= 2) and batched
    if rank2 and ("logit" in name or "score" in name or count == 1):
        return "logits"
    if rank2 or any(word in name for word in ("embed", "pool", "hidden")):
        return "embedding"
    return "other"


def starter(name: str, source: dict[str, Any], inputs: list[dict[str, Any]], outputs: list[Found]) -> str:
    """The config's text, commented for the person who will edit it."""
    body: dict[str, object] = {
        "name": name,
        "model": source,
        "inputs": inputs,
        "outputs": [_output(o) for o in outputs],
    }
    if all(isinstance(s["dims"][0], int) for s in inputs):
        body["batch_dim"] = None
    lines = [
        f"# Written by `deploy init` for '{name}'; check the guesses, then `deploy run` this file.",
        "# Every key is in the config reference; `deploy validate FILE` checks the file.",
        yaml.safe_dump(body, sort_keys=False, default_flow_style=None).rstrip(),
        *[f"# outputs: {o.name} {list(o.shape)} at opt (kind '{o.kind}' is a guess)" for o in outputs],
        "",
        "stages:",
        "  export: {}          # ONNX with the dims above as dynamic axes (exporter: torchscript | dynamo)",
        "  simplify: {}        # onnxsim, with a parity check against the eager model",
        "  validate:           # ONNX Runtime against the eager model at min / opt / max",
        "    runtimes: [onnxruntime]",
        "  triton_config:      # a Triton repository; `python` (ONNX Runtime) loads on any tritonserver",
        "    formats: [python]",
        "  smoke: {}           # a real tritonserver: metadata, HTTP + gRPC parity",
        "  # quantize: {}      # INT8 with an accuracy gate (give calibration data: docs/how-to)",
        "  # bench: {}         # trtexec-style timing of every runtime",
        "",
    ]
    return "\n".join(lines)


def _output(found: Found) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": found.name}
    if found.path is not None:
        entry["path"] = found.path
    return entry | {"kind": found.kind}


def write_checked(text: str, dest: Path) -> None:
    """Written only if it validates as `deploy validate` would (nothing on failure)."""
    from pipeline.project import load_project

    tmp = dest.with_name(f".{dest.name}.init")
    tmp.write_text(text)
    try:
        load_project(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(dest)


@dataclass(frozen=True)
class Request:
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

    def source(self, base: Path) -> dict[str, Any]:
        """`model:` as the written file needs it: local paths relative to its directory."""
        found: dict[str, Any] = {"factory": self.factory, "callable": self.callable}
        for key, path in (("file", self.file), ("torchscript", self.torchscript)):
            found[key] = os.path.relpath(path.absolute(), base) if path is not None else None
        found["kwargs"] = parse_kwargs(self.kwargs) if self.kwargs else None
        return {k: v for k, v in found.items() if v is not None}


def initialise(request: Request) -> Path:
    """Writes the starter config; returns where. Nothing is written on any error."""
    name = request.name or request.chosen_name
    dest = (request.output or Path(f"{name}.yaml")).absolute()
    if dest.exists() and not request.overwrite:
        raise ConfigError(str(dest), [Issue("--output", "exists; pass --overwrite to replace it")])
    inputs = [parse_input(i) for i in request.inputs]
    write_checked(make_config(request.source(dest.parent), inputs, name, dest), dest)
    return dest


def make_config(source: dict[str, Any], args: list[InputArg], name: str, dest: Path) -> str:
    """Builds the model from `source`, calls it once at the opt shapes, and returns the
    starter config's text; a ConfigError naming the option or the model's failure."""
    specs = input_specs(args)
    model_source, checked = _validated(source, specs, dest.parent)
    tensors = _returned(model_source, checked)
    if not tensors:
        raise ConfigError("model", [Issue("model", "the model returned no tensors at the opt shapes")])
    batched = any(isinstance(s["dims"][0], str) for s in specs)
    return starter(name, source, specs, discover(tensors, batched))


def _validated(source: dict[str, Any], specs: list[dict[str, Any]], base: Path) -> tuple[Any, list[Any]]:
    from pydantic import ValidationError

    from pipeline.config import InputSpec, ModelSource

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
    if issues:
        raise ConfigError("deploy init", issues)
    return model, checked


def _option(loc: tuple[Any, ...]) -> str:
    return str(loc[0]) if loc else "factory"


def _returned(model_source: Any, specs: list[Any]) -> list[tuple[str, tuple[int, ...], str]]:
    import numpy as np

    from modelio.adapter import probe, returned_tensors
    from modelio.loading import load_model
    from pipeline.config import InputsBy
    from pipeline.errors import StageFailed
    from runtimes.arrays import random_input

    rng = np.random.default_rng(0)
    sample = {s.name: random_input(s, s.shape("opt"), rng) for s in specs}
    try:
        result, _ = probe(load_model(model_source), tuple(sample), InputsBy.AUTO, sample)
    except StageFailed as exc:  # the model could not be built or called: say which
        raise ConfigError("model", [Issue("model", str(exc))]) from None
    return returned_tensors(result)
