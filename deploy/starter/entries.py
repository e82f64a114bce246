"""The `inputs:` entries of a starter config: each input's dims named by role (batch,
sequence, height, width; one name for a sequence length inputs share), a batch dim only
where every input has one (axis 0 of every input varying alike), and, for an integer
input, values that mean something: a mask of ones with padding, lengths within the
sequence, indices below the size they index, token ids below the vocabulary. Where the
name does not say what an integer input holds, the entry is refused, asking for its
value range by name: a guess would make golden data the model is not defined on.
Stdlib only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

from deploy.domain.issues import Issue
from deploy.pipeline.errors import ConfigError

# Random token ids span the model's vocabulary where it has an embedding (its last rows are
# checked too), else stay below any real vocabulary's size; segment ids are 0 / 1; a
# diffusion timestep is 0..999.
INT_RANGE = (0, 99)
BINARY_RANGE = (0, 1)
TIMESTEPS = (0, 999)
MASK = re.compile(r"mask", re.I)
PADDING = re.compile(r"pad", re.I)
BINARY = re.compile(r"token_type|segment", re.I)
LENGTHS = re.compile(r"length|(^|_)lens?($|_)", re.I)
OFFSETS = re.compile(r"offset", re.I)
INDICES = re.compile(r"ind(ex|ices)|(^|_)idx|edge", re.I)
TOKENS = re.compile(r"ids?$|token|word|char|vocab", re.I)
TIMESTEP = re.compile(r"^t$|timestep|^steps?$|sigma", re.I)
VALUE_FORMS = "mask, padding, lengths:DIM, indices:DIM, offsets:DIM"


class InputEntry(TypedDict):
    """One `inputs:` entry of a written config (spec.tensors.InputSpec's YAML form)."""

    name: str
    dtype: str
    dims: list[int | str]
    min: list[int]
    opt: list[int]
    max: list[int]
    value_range: NotRequired[list[float]]
    values: NotRequired[str]
    of: NotRequired[str]


class SourceEntry(TypedDict, total=False):
    """The `model:` section of a written config (spec.config.ModelSource's YAML form)."""

    factory: str
    file: str
    callable: str
    torchscript: str
    checkpoint: str
    kwargs: dict[str, object]
    detections: dict[str, int]
    decoder: dict[str, object]


@dataclass(frozen=True)
class InputArg:
    """One input as the user declared it: its shapes, and what its values are where said."""

    name: str
    dtype: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]
    value_range: tuple[float, float] | None = None
    values: str | None = None  # mask | padding | lengths | indices | offsets
    of: str | None = None


@dataclass(frozen=True)
class Guide:
    """What helps name integer inputs' values: the model's first embedding's size (token
    ids index it), and whether the config has a batch dim."""

    vocabulary: int | None = None
    batched: bool = True
    said: Mapping[str, InputArg] = field(default_factory=dict)
    # Ranges seen in example inputs (deploy.optimize): where a name says nothing.
    seen: Mapping[str, tuple[float, float]] = field(default_factory=dict)


def input_entry(
    name: str, dtype: str, dims: list[int | str], low: Sequence[int], opt: Sequence[int], high: Sequence[int]
) -> InputEntry:
    """An entry whose values are left to `with_values` (floats need none)."""
    return InputEntry(name=name, dtype=dtype, dims=dims, min=list(low), opt=list(opt), max=list(high))


def batched(args: Sequence[InputArg], batch_dim: str | None) -> bool:
    """Whether axis 0 of every input is one batch: every input has one, varying alike
    (`--batch-dim none` says it is not)."""
    if batch_dim == "none" or not args or any(not a.min for a in args):
        return False
    spans = {(a.min[0], a.opt[0], a.max[0]) for a in args}
    return len(spans) == 1 and next(iter(spans))[0] != next(iter(spans))[2]


def why_unbatched(args: Sequence[InputArg]) -> str:
    """Why axis 0 is no batch dim: an input without one, or axis 0 not varying alike."""
    spans = {a.name: (a.min[0], a.opt[0], a.max[0]) if a.min else None for a in args}
    said = ", ".join(f"{n} {'is 0-d' if s is None else f'{s[0]}/{s[1]}/{s[2]}'}" for n, s in spans.items())
    return (
        f"axis 0 of every input must be the batch, varying alike from min to max (min/opt/max: {said}); "
        "give --input shapes whose axis 0 varies, or --batch-dim none"
    )


def input_specs(
    args: Sequence[InputArg], batch_dim: str | None = None, vocabulary: int | None = None
) -> list[InputEntry]:
    """Dims named from the shapes: axis 0 is `batch` (or `batch_dim`) where `batched`;
    other varying axes are named by their role (sequence, height, width), one name per
    role and range across inputs (a sequence length inputs share), another where the
    ranges differ. Integer inputs get their values (`with_values`)."""
    on = batched(args, batch_dim)
    batch = batch_dim if batch_dim not in (None, "none") else "batch"
    names: dict[tuple[str, tuple[int, int, int]], str] = {}
    specs = []
    for arg in args:
        dims: list[int | str] = []
        for axis, (low, mid, high) in enumerate(zip(arg.min, arg.opt, arg.max)):
            if axis == 0 and on:
                dims.append(str(batch))
            elif low == high:
                dims.append(low)
            else:
                dims.append(_dim_name(names, _role(axis, len(arg.min), arg.dtype, on), (low, mid, high)))
        specs.append(input_entry(arg.name, arg.dtype, dims, arg.min, arg.opt, arg.max))
    return with_values(specs, Guide(vocabulary, on, {a.name: a for a in args}))


def _dim_name(
    names: dict[tuple[str, tuple[int, int, int]], str], role: str, span: tuple[int, int, int]
) -> str:
    """The role's name for this range; a second range of the same role gets a number."""
    taken = sum(1 for r, _ in names if r == role)
    return names.setdefault((role, span), role if not taken else f"{role}{taken + 1}")


def _role(axis: int, rank: int, dtype: str, on: bool) -> str:
    """What a dynamic axis most likely is: images are [batch, channels, height, width],
    token ids [batch, sequence], embeddings [batch, sequence, features]."""
    if rank == 4 and axis in (2, 3) and not dtype.startswith(("int", "uint")):
        return ("height", "width")[axis - 2]
    if not on:  # no batch: a graph's nodes and edges, a flat list; nothing says more
        return "rows" if axis == 0 else f"dim{axis}"
    if axis == 1 and rank in (2, 3):
        return "sequence"
    return f"dim{axis}"


def with_values(entries: list[InputEntry], guide: Guide) -> list[InputEntry]:
    """Each integer input's values: as the user said (`--values`, `--value-range`), else
    as its name says; a ConfigError asking for the ones nothing says."""
    issues, found = [], []
    for entry in entries:
        said, problem = _values(entry, entries, guide)
        if problem:
            issues.append(Issue(f"--input {entry['name']}", problem))
        found.append(_with(entry, said))
    if issues:
        raise ConfigError("deploy init", issues)
    return found


@dataclass(frozen=True)
class Values:
    """What an entry says of its values (InputSpec's values / of / value_range)."""

    kind: str | None = None
    of: str | None = None
    value_range: tuple[float, float] | None = None


def _with(entry: InputEntry, said: Values) -> InputEntry:
    found = InputEntry(**entry)
    if said.value_range is not None:
        whole = entry["dtype"].startswith(("int", "uint")) and all(
            float(v).is_integer() for v in said.value_range
        )
        found["value_range"] = [int(v) for v in said.value_range] if whole else list(said.value_range)
    if said.kind is not None:
        found["values"] = said.kind
    if said.of is not None:
        found["of"] = said.of
    return found


def _values(entry: InputEntry, entries: list[InputEntry], guide: Guide) -> tuple[Values, str]:
    said = guide.said.get(entry["name"])
    if said is not None and (said.values or said.value_range):
        return Values(said.values, said.of, said.value_range), ""
    if entry["dtype"] == "bool":  # True marks padding in PyTorch's key_padding_mask and its kin
        return (Values("padding"), "") if PADDING.search(entry["name"]) and entry["dims"] else (Values(), "")
    if not entry["dtype"].startswith(("int", "uint")):
        return (Values("mask"), "") if MASK.search(entry["name"]) and entry["dims"] else (Values(), "")
    return _by_name(entry, entries, guide)


def _by_name(entry: InputEntry, entries: list[InputEntry], guide: Guide) -> tuple[Values, str]:
    name = entry["name"]
    if MASK.search(name) and entry["dims"]:
        return Values("mask"), ""
    if BINARY.search(name):
        return Values(value_range=BINARY_RANGE), ""
    for pattern, kind, where in (
        (LENGTHS, "lengths", _sequence_dim),
        (OFFSETS, "offsets", _flat_dim),
        (INDICES, "indices", _indexed_dim),
    ):
        if pattern.search(name):
            dim = where(entry, entries, guide)
            if dim is not None:
                return Values(kind, dim), ""
            if kind == "indices" and guide.vocabulary:
                return Values(value_range=(0, guide.vocabulary - 1)), ""
            return Values(), _ask(name, f"it looks like {kind}, but no input has the dim they would be of")
    if TIMESTEP.search(name):
        return Values(value_range=TIMESTEPS), ""
    if TOKENS.search(name) and guide.vocabulary == 1:  # one id: a constant input, nothing to check
        return Values(), _ask(name, "the model's first embedding has a single row, so its only id is 0")
    if TOKENS.search(name):
        top = guide.vocabulary - 1 if guide.vocabulary else INT_RANGE[1]
        return Values(value_range=(INT_RANGE[0], top)), ""
    if name in guide.seen:
        return Values(value_range=guide.seen[name]), ""
    return Values(), _ask(name, "its name does not say what its integers are")


def _ask(name: str, why: str) -> str:
    return (
        f"an integer input whose values deploy cannot tell ({why}): say them, as --value-range "
        f"{name}=LOW,HIGH (inclusive) or --values {name}=KIND ({VALUE_FORMS})"
    )


def _sequence_dim(entry: InputEntry, entries: list[InputEntry], guide: Guide) -> str | None:
    """Lengths are of the first sequence-like dim another input has (axis 1 of a batched
    input, else its first dynamic axis)."""
    for other in entries:
        dims = [d for d in other["dims"][1 if guide.batched else 0 :] if isinstance(d, str)]
        if other is not entry and dims:
            return str(dims[0])
    return None


def _flat_dim(entry: InputEntry, entries: list[InputEntry], guide: Guide) -> str | None:
    """Offsets are into a flat (1-d) integer input: its length."""
    for other in entries:
        dims = other["dims"]
        if (
            other is not entry
            and len(dims) == 1
            and isinstance(dims[0], str)
            and other["dtype"].startswith("int")
        ):
            return str(dims[0])
    return None


def _indexed_dim(entry: InputEntry, entries: list[InputEntry], guide: Guide) -> str | None:
    """Indices without a batch (a graph's edges) index axis 0 of the first float input
    with rows (its nodes)."""
    if guide.batched:
        return None
    for other in entries:
        dims = other["dims"]
        if (
            other is not entry
            and len(dims) >= 2
            and isinstance(dims[0], str)
            and not other["dtype"].startswith("int")
        ):
            return str(dims[0])
    return None


def detection_inputs(specs: list[InputEntry]) -> list[InputEntry]:
    """A model that takes its batch as a list of images is exported unrolled: batch 1; its
    images are in [0, 1] (torchvision's detectors normalise them themselves)."""
    found = []
    for spec in specs:
        shapes = [[1, *spec["min"][1:]], [1, *spec["opt"][1:]], [1, *spec["max"][1:]]]
        dims: list[int | str] = [1, *spec["dims"][1:]]
        entry = input_entry(spec["name"], spec["dtype"], dims, *shapes)
        if not spec["dtype"].startswith(("int", "uint")):
            entry["value_range"] = [0, 1]
        found.append(entry)
    return found
