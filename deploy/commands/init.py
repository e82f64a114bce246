"""`deploy init`: a starter config for a model nobody configured yet. The options are read
here; the model is built from its source and called with the declared shapes, and what
it teaches becomes the config (deploy/starter: the inputs' dims and values, the outputs
with their paths and guessed kinds, max_batch_size: 0 where an output depends on the rest
of its batch). The file is written only once it passes the same validation as
`deploy validate`; it says what the model was called with."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from deploy.domain.issues import Issue
from deploy.pipeline.errors import ConfigError, UsageError
from deploy.starter.entries import VALUE_FORMS, InputArg, InputEntry, SourceEntry, input_specs

if TYPE_CHECKING:
    from deploy.spec.config import ModelSource
    from deploy.spec.tensors import InputSpec

__all__ = ["initialise", "parse_input", "parse_ranges", "parse_values"]

INPUT_FORM = (
    "NAME:DTYPE:MIN/OPT/MAX, shapes as 1x3x224x224 (e.g. image:float32:1x3x224x224/4x3x224x224/8x3x224x224); "
    "a 0-d scalar leaves them empty (timestep:int64://)"
)
SHAPE = re.compile(r"^(\d+(x\d+)*)?$")
KINDS = ("mask", "padding", "lengths", "indices", "offsets")


def parse_input(text: str) -> InputArg:
    """`--input NAME:DTYPE:MIN/OPT/MAX`; a ConfigError naming the option and the form."""
    parts = text.split(":")
    shapes = (parts[2].split("/") if parts[2] else ["", "", ""]) if len(parts) == 3 else []
    if len(shapes) != 3 or not all(SHAPE.match(s) for s in shapes) or len({s == "" for s in shapes}) > 1:
        raise UsageError("--input", [Issue("--input", f"'{text}' is not {INPUT_FORM}")])
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_.]*$", parts[0]):  # as InputSpec's name takes it
        why = f"'{parts[0]}' is not a tensor name (letters, digits, _ and ., not starting with a digit)"
        raise UsageError("--input", [Issue("--input", f"in '{text}': {why}")])
    low, mid, high = (tuple(int(d) for d in s.split("x")) if s else () for s in shapes)
    if why := _out_of_order(low, mid, high):  # a typo in the flag, said as one: not a static dim
        raise UsageError("--input", [Issue("--input", f"in '{text}': {why}")])
    return InputArg(parts[0], parts[1], low, mid, high)


def _out_of_order(low: tuple[int, ...], mid: tuple[int, ...], high: tuple[int, ...]) -> str:
    if not len(low) == len(mid) == len(high):
        return f"min, opt and max have {len(low)}, {len(mid)} and {len(high)} dims: give each the same"
    bad = [
        f"dim {i}: {a} / {b} / {c}"
        for i, (a, b, c) in enumerate(zip(low, mid, high, strict=True))
        if not a <= b <= c
    ]
    return f"need min <= opt <= max in every dim ({'; '.join(bad)})" if bad else ""


def parse_kwargs(items: list[str]) -> dict[str, object]:
    """`--kwarg weights=null`: the factory's keyword arguments, values read as YAML."""
    found: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError("--kwarg", [Issue("--kwarg", f"'{item}' is not KEY=VALUE (e.g. weights=null)")])
        said = yaml.safe_load(value)
        found[key] = None if said == "None" else said  # Python's spelling of YAML's null
    return found


def parse_ranges(items: list[str]) -> dict[str, tuple[float, float]]:
    """`--value-range lengths=1,8`: an input's values, low..high inclusive for integers."""
    found = {}
    for item in items:
        name, _, text = item.partition("=")
        try:
            low, high = (float(v) for v in text.split(","))
        except ValueError:
            raise UsageError(
                "--value-range", [Issue("--value-range", f"'{item}' is not NAME=LOW,HIGH (e.g. lengths=1,8)")]
            ) from None
        found[name] = (low, high)
    return found


def parse_values(items: list[str]) -> dict[str, tuple[str, str | None]]:
    """`--values lengths=lengths:sequence`: what an input's values mean, and of which dim."""
    found = {}
    for item in items:
        name, _, text = item.partition("=")
        kind, _, dim = text.partition(":")
        if kind not in KINDS or (kind in ("lengths", "offsets") and not dim):
            raise UsageError(
                "--values", [Issue("--values", f"'{item}' is not NAME=KIND, KIND one of {VALUE_FORMS}")]
            )
        found[name] = (kind, dim or None)
    return found


def write_checked(text: str, dest: Path) -> None:
    """Written only if it validates as `deploy validate` would (nothing on failure)."""
    from deploy.pipeline.graph.project import load_project

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
    value_ranges: list[str] = field(default_factory=list)
    values: list[str] = field(default_factory=list)
    batch_dim: str | None = None  # None: found from the shapes; "none": no batch dim

    @property
    def chosen_name(self) -> str:
        """--output's stem where one is given (two configs of one model written to two files
        ran into one runs/ folder and one repository's models), else the model's source."""
        raw = (self.factory or "").rpartition(":")[2] or self.callable
        raw = raw or (self.torchscript.stem if self.torchscript else "") or "model"
        return re.sub(r"[^A-Za-z0-9_.-]", "_", self.output.stem if self.output is not None else raw)

    def source(self, base: Path) -> SourceEntry:
        """`model:` as the written file needs it: local paths relative to its directory."""
        found = SourceEntry()
        module, _, function = (self.factory or "").partition(":")
        script = Path(f"{module}.py")  # `--factory m:f` with m.py right here: a script, not a package
        if self.factory is not None and "." not in module and script.is_file():
            found["file"], found["callable"] = os.path.relpath(script.absolute(), base), function
        elif self.factory is not None:
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

    def input_args(self) -> list[InputArg]:
        """The inputs with what --value-range and --values say of them."""
        ranges, values = parse_ranges(self.value_ranges), parse_values(self.values)
        args = [parse_input(i) for i in self.inputs]
        names = [a.name for a in args]
        if twice := sorted({n for n in names if names.count(n) > 1}):
            raise UsageError("deploy init", [Issue("--input", f"{twice} given more than once")])
        _refuse_dtypes(args)
        unknown = sorted((set(ranges) | set(values)) - {a.name for a in args})
        if unknown:
            raise UsageError(
                "deploy init", [Issue("--value-range / --values", f"no --input named {unknown}")]
            )
        return [
            InputArg(
                a.name, a.dtype, a.min, a.opt, a.max, ranges.get(a.name), *values.get(a.name, (None, None))
            )
            for a in args
        ]


def _refuse_dtypes(args: list[InputArg]) -> None:
    """Before the model is built: a dtype deploy does not know."""
    from typing import get_args

    from deploy.spec.tensors import DType

    known = get_args(DType)
    bad = [
        Issue(f"--input {a.name}", f"dtype '{a.dtype}' is not one of {', '.join(known)}")
        for a in args
        if a.dtype not in known
    ]
    if bad:
        raise UsageError("deploy init", bad)


def initialise(request: InitRequest) -> tuple[Path, str]:
    """Writes the starter config; returns where, and what it says of the model (how it was
    called; what its run will refuse).
    Nothing is written on any error."""
    name = request.name or request.chosen_name
    dest = (request.output or Path(f"{name}.yaml")).absolute()
    if dest.is_dir():
        raise UsageError(
            "--output", [Issue("--output", f"{dest} is a directory: name the file, e.g. {dest / name}.yaml")]
        )
    if dest.exists() and not request.overwrite:
        raise ConfigError(str(dest), [Issue("--output", "exists; pass --overwrite to replace it")])
    made = _folders_for(dest)
    try:
        return _initialise(request, name, dest)
    except BaseException:  # nothing written on an error: not the folders made for it either
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _folders_for(dest: Path) -> list[Path]:
    """--output's missing folders, made now (the config's relative paths start there),
    outermost first; a file in the way is a usage error."""
    missing = [p for p in reversed(dest.parents) if not p.exists()]
    blocking = next((p for p in dest.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise UsageError("--output", [Issue("--output", f"{blocking} is a file, not a folder")])
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            "--output", [Issue("--output", f"cannot make its folder {dest.parent}: {exc.strerror}")]
        ) from None
    return missing


def _initialise(request: InitRequest, name: str, dest: Path) -> tuple[Path, str]:
    from deploy.pipeline.process.child_call import CallEnded, in_child

    args = (request.source(dest.parent), request.input_args(), name, dest, request.batch_dim)
    try:  # the model is the user's code: a native crash in it is named, not the command's end
        text = in_child(make_config, *args)
    except CallEnded as exc:
        raise exc.said_while("deploy init built and called it") from None
    write_checked(text, dest)
    from deploy.starter.config_text import SAID

    said = [line.removeprefix("# ") for line in text.splitlines() if line.startswith(SAID)]
    return dest, "\n".join(said)


def make_config(
    source: SourceEntry, args: list[InputArg], name: str, dest: Path, batch_dim: str | None = None
) -> str:
    """Builds the model from `source`, calls it (deploy/starter/inspection.py) and returns
    the starter config's text; a ConfigError naming the option or the model's failure."""
    from deploy.modelio.loading import load_model
    from deploy.pipeline.errors import StageFailed
    from deploy.starter import config_text, entries, inspection

    model_source = _validated_source(source, dest.parent)
    if batch_dim not in (None, "none") and not entries.batched(args, batch_dim):
        raise UsageError("deploy init", [Issue("--batch-dim", entries.why_unbatched(args))])
    try:
        model = load_model(model_source)
        specs = input_specs(args, batch_dim, inspection.vocabulary(model))
        on = entries.batched(args, batch_dim)
        found = inspection.inspect(model, _validated_inputs(specs), on)
    except StageFailed as exc:  # the model could not be built or called: say which
        raise ConfigError("model", [Issue("model", str(exc))]) from None
    except ConfigError as exc:
        raise type(exc)(exc.source, [_in_init_words(i) for i in exc.issues]) from None
    written = entries.detection_inputs(specs) if found.detections else specs
    return config_text.starter(name, source, written, found, _batch_name(batch_dim) if on else None)


def _in_init_words(issue: Issue) -> Issue:
    """A forward argument no --input declares: the config's ways out (model.forward_kwargs,
    model.inputs_by) have no init flag, an --input for it has (a 0-d one for a scalar)."""
    import re

    missing = re.findall(r"missing a required argument: '(\w+)'", issue.message)
    if not missing:
        return issue
    flags = " ".join(f"--input {name}:float32://" for name in missing)
    return Issue(
        issue.where,
        f"{issue.message}. With deploy init: declare it as an input ({flags} for a 0-d scalar; "
        "give its dtype and shapes), or write model.forward_kwargs into the config by hand",
    )


def _batch_name(batch_dim: str | None) -> str:
    return batch_dim if batch_dim not in (None, "none") else "batch"


def _validated_source(source: SourceEntry, base: Path) -> ModelSource:
    from pydantic import ValidationError

    from deploy.spec.config import ModelSource, error_text

    try:
        return ModelSource.model_validate(source, context={"base_dir": base})
    except ValidationError as exc:
        raise ConfigError(
            "deploy init", [Issue(f"--{_option(e['loc'])}", error_text(e)) for e in exc.errors()]
        ) from None


def _validated_inputs(specs: list[InputEntry]) -> list[InputSpec]:
    from pydantic import ValidationError

    from deploy.spec.config import error_text
    from deploy.spec.tensors import InputSpec

    issues, checked = [], []
    for spec in specs:
        try:
            checked.append(InputSpec.model_validate(spec))
        except ValidationError as exc:
            issues += [Issue(f"--input {spec['name']}", error_text(err)) for err in exc.errors()]
    if issues:
        raise ConfigError("deploy init", issues)
    return checked


def _option(loc: tuple[int | str, ...]) -> str:
    return str(loc[0]) if loc else "factory"
