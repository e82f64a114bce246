"""The README's config reference, generated from the pydantic models.

Every key a config may hold, with its type, its default and its description, is read
from `DeployConfig` (the fields every stage shares) and from each stage's params model
(`StageSpec.params`), so the reference cannot drift from the schema:

    python -m deploy.reference                    # print it
    python -m deploy.reference --write README.md  # replace the marked section
    python -m deploy.reference --check README.md  # exit 1, with a diff, if stale

Imported only by this command and the tests, never on a `deploy run`: it imports every
stage module (stdlib + pydantic otherwise).
"""

from __future__ import annotations

import argparse
import difflib
import enum
import json
import math
import re
import sys
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

START = "<!-- config-reference:start -->"
END = "<!-- config-reference:end -->"
# The DeployConfig key under which each stage's params sit (one section per stage).
STAGES_FIELD = "stages"
REQUIRED = "required"

_PLAIN = re.compile(r"^[\w.][\w .:/@+-]*$")
# What YAML 1.1 (PyYAML) would read as something else than a string: numbers (1_000, 0x1f,
# 1.5e+3), sexagesimal ints (1:20) and dates; a dotted quad (127.0.0.1) stays a string.
_NOT_STR = re.compile(
    r"^[-+]?(\.?\d[\d_]*(\.[\d_]*)?([eE][-+]?\d+)?|0x[\da-fA-F_]+|0o?[0-7_]+|\d+(:[0-5]?\d)+|\d{4}-\d\d?-\d\d?.*)$"
)
_BOUNDS = (
    annotated_types.Gt,
    annotated_types.Ge,
    annotated_types.Lt,
    annotated_types.Le,
    annotated_types.Interval,
)
_YAML_WORDS = {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~", ".inf", ".nan", "-.inf"}


@dataclass(frozen=True)
class Row:
    path: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class Section:
    title: str
    intro: str
    rows: tuple[Row, ...]


# -- walking the models -------------------------------------------------------------------------
def walk(
    model: type[BaseModel], prefix: str = "", _seen: tuple[type[BaseModel], ...] = ()
) -> Iterator[tuple[str, FieldInfo]]:
    """(dotted path, field) for every field of `model`, each followed (depth first) by the
    fields of the models it holds: `prefix.field`, `prefix.list[].field`, `prefix.map.*.field`;
    the variants of a union of models one after the other, as `prefix.field[kind: images].x`."""
    if model in _seen:  # a recursive model: its fields are listed once, further up
        return
    model.model_rebuild()  # resolves postponed annotations (defer_build=True models)
    for name, field in model.model_fields.items():
        path = f"{prefix}.{field.alias or name}" if prefix else field.alias or name
        yield path, field
        yield from _nested(field.annotation, path, (*_seen, model))


def rows(model: type[BaseModel], prefix: str = "") -> Iterator[Row]:
    for path, field in walk(model, prefix):
        yield Row(
            path,
            render_type(field.annotation, field.metadata),
            render_default(field),
            _one_line(field.description),
        )


def _nested(annotation: Any, path: str, seen: tuple[type[BaseModel], ...]) -> Iterator[tuple[str, FieldInfo]]:
    annotation = _strip(annotation)
    if _is_model(annotation):
        yield from walk(annotation, path, seen)
        return
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if _is_union(annotation):
        variants = [a for a in (_strip(a) for a in args) if a is not type(None)]
        models = [a for a in variants if _is_model(a)]
        if len(models) > 1:
            for variant in models:
                yield from walk(variant, f"{path}[{_variant_label(variant)}]", seen)
            return
        for variant in variants:
            yield from _nested(variant, path, seen)
    elif origin in (tuple, list, Sequence, set, frozenset) and args:
        items = [a for a in args if a is not Ellipsis]
        if len(set(items)) == 1:
            yield from _nested(items[0], f"{path}[]", seen)
    elif origin in (dict, Mapping) and len(args) == 2:
        yield from _nested(args[1], f"{path}.*", seen)


def _variant_label(model: type[BaseModel]) -> str:
    """A union variant by its tag (a field that is a one-value Literal), else its class name."""
    for name, field in model.model_fields.items():
        annotation = _strip(field.annotation)
        if typing.get_origin(annotation) is typing.Literal and len(typing.get_args(annotation)) == 1:
            return f"{name}: {render_value(typing.get_args(annotation)[0])}"
    return model.__name__


def _strip(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


# -- types ----------------------------------------------------------------------------------------
def render_type(annotation: Any, metadata: Sequence[Any] = ()) -> str:
    """Readable, YAML-minded: Literal -> `a | b`, tuples -> `list[int]`, Optional ->
    `... | null`, a nested model -> `object`, with the field's bounds: `1 ≤ int ≤ 5`,
    `non-empty list[str]`."""
    annotation, metadata = _unwrap(annotation, metadata)
    if _is_union(annotation):
        args = typing.get_args(annotation)
        members = [a for a in args if a is not type(None)]
        null = ["null"] if len(members) < len(args) else []
        if len(members) == 1:  # Optional[X] = Field(ge=...): the bounds are X's
            return " | ".join([render_type(members[0], metadata), *null])
        parts = dict.fromkeys(render_type(a) for a in members)  # a union of models: `object` once
        return _bounded(" | ".join([*parts, *null]), metadata)
    return _bounded(_render_bare(annotation), metadata)


def _unwrap(annotation: Any, metadata: Sequence[Any]) -> tuple[Any, list[Any]]:
    """Strips Annotated[...] layers, collecting their metadata; a FieldInfo in metadata
    (Annotated[int, Field(ge=1)]) contributes its own."""
    found = list(metadata)
    while typing.get_origin(annotation) is typing.Annotated:
        annotation, *extra = typing.get_args(annotation)
        found += extra
    flat: list[Any] = []
    for item in found:
        flat += item.metadata if isinstance(item, FieldInfo) else [item]
    return annotation, flat


def _render_bare(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None) or annotation is None:
        return "null"
    if annotation is typing.Any:
        return "any"
    if origin is typing.Literal:
        return " | ".join(render_value(a) for a in args)
    if origin is tuple and args:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"list[{render_type(args[0])}]"
        return "[" + ", ".join(render_type(a) for a in args) + "]"
    if origin in (list, set, frozenset, Sequence) and args:
        return f"list[{render_type(args[0])}]"
    if origin in (dict, Mapping) and len(args) == 2:
        return f"map[{render_type(args[0])}, {render_type(args[1])}]"
    if _is_model(annotation):
        return "object"
    if isinstance(annotation, type):
        if issubclass(annotation, PurePath):
            return "path"
        if issubclass(annotation, enum.Enum):
            return " | ".join(render_value(m.value) for m in annotation)
        return {"dict": "map", "tuple": "list"}.get(annotation.__name__, annotation.__name__)
    return str(annotation).replace("typing.", "")


def _bounded(base: str, metadata: Sequence[Any]) -> str:
    """`13 ≤ int ≤ 23`, `float > 0`, `non-empty list[str]`, from annotated_types metadata
    (what Field(ge=..., min_length=...) records); other metadata (patterns) is left out."""
    lower: tuple[str, Any] | None = None
    upper: tuple[str, Any] | None = None
    min_len, max_len = 0, None
    for item in metadata:
        for attr, sign in (("gt", ">"), ("ge", "≥")):
            if isinstance(item, _BOUNDS) and getattr(item, attr, None) is not None:
                lower = (sign, getattr(item, attr))
        for attr, sign in (("lt", "<"), ("le", "≤")):
            if isinstance(item, _BOUNDS) and getattr(item, attr, None) is not None:
                upper = (sign, getattr(item, attr))
        if isinstance(item, annotated_types.MinLen):
            min_len = item.min_length
        elif isinstance(item, annotated_types.MaxLen):
            max_len = item.max_length
    text, single = base, lower or upper
    if lower and upper:  # 13 ≤ int ≤ 23
        text = f"{render_value(lower[1])} {'<' if lower[0] == '>' else '≤'} {base} {upper[0]} {render_value(upper[1])}"
    elif single:  # int ≥ 1
        text = f"{base} {single[0]} {render_value(single[1])}"
    if min_len == 1 and max_len is None:
        return f"non-empty {text}"
    if min_len or max_len is not None:
        return f"{text} ({min_len}..{'' if max_len is None else max_len} items)"
    return text


# -- defaults -------------------------------------------------------------------------------------
def render_default(field: FieldInfo) -> str:
    """The default as YAML would spell it; `required` when there is none."""
    if field.is_required():
        return REQUIRED
    return render_value(field.get_default(call_default_factory=True, validated_data={}))


def render_value(value: Any) -> str:
    """YAML flow style: null, true, 0.0001, 1.0e-05, [onnx, python], {}, {atol: 1.0e-05};
    a model as the keys where it differs from its class's defaults."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return render_value(value.value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _render_float(value)
    if isinstance(value, PurePath):
        return _render_str(value.as_posix())
    if isinstance(value, str):
        return _render_str(value)
    if isinstance(value, BaseModel):
        return render_value(value.model_dump(mode="json", exclude_defaults=True, by_alias=True))
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_render_str(str(k))}: {render_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return "[" + ", ".join(render_value(v) for v in items) + "]"
    return _render_str(str(value))


def _render_float(value: float) -> str:
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value)
    if "e" in text:  # YAML 1.1 (PyYAML) reads 1e-05 as a string; 1.0e-05 is a float
        mantissa, exponent = text.split("e")
        mantissa = mantissa if "." in mantissa else f"{mantissa}.0"
        exponent = exponent if exponent.startswith(("-", "+")) else f"+{exponent}"
        text = f"{mantissa}e{exponent}"
    return text


def _render_str(text: str) -> str:
    """Plain when YAML reads it back as the same string, else double-quoted."""
    plain = _PLAIN.match(text) and not _NOT_STR.match(text) and not text.endswith(" ")
    if plain and text.lower() not in _YAML_WORDS and ": " not in text:
        return text
    return json.dumps(text, ensure_ascii=False)


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


# -- sections and Markdown -----------------------------------------------------------------------
def sections() -> list[Section]:
    """The shared fields, then one section per stage in the registry's (name) order."""
    from pipeline.config import DeployConfig
    from pipeline.registry import stage_specs

    shared = Section(
        "Shared keys",
        "Top-level keys of the config file.",
        tuple(rows(DeployConfig)),
    )
    out = [shared]
    for name, spec in stage_specs().items():
        intro = f"{spec.description}." if spec.description else ""
        out.append(
            Section(f"`{STAGES_FIELD}.{name}`", intro, tuple(rows(spec.params, f"{STAGES_FIELD}.{name}")))
        )
    return out


def missing_descriptions() -> list[str]:
    """Paths of every field that has no description (the test lists them)."""
    return [row.path for section in sections() for row in section.rows if not row.description]


def _cell(text: str) -> str:
    """A table cell: `|` escaped (also inside code spans, as GFM tables require), and `<`
    outside code spans, so that `<name>` is not taken for an HTML tag."""
    parts = text.split("`")
    parts[::2] = [part.replace("<", "\\<") for part in parts[::2]]
    return "`".join(parts).replace("|", "\\|")


def _code(text: str) -> str:
    return "`" + text.replace("|", "\\|") + "`"


def render(parts: Sequence[Section] | None = None) -> str:
    """Markdown: a short preamble, then per section a heading and a table of
    field | type | default | description. Deterministic."""
    parts = sections() if parts is None else parts
    lines = [
        "<!-- Generated by `python -m deploy.reference --write README.md` from the pydantic models: do not edit by hand. -->",
        "",
        "Every key a config may hold. A nested object's own row gives its default as a whole; the",
        "defaults of its fields' rows are those of the keys you leave out when you write that object",
        "(writing `tolerance: {atol: 0.1}` resets the other keys to their defaults listed here).",
        "`list[...]` is a YAML sequence, `map[...]` a mapping; `a[]` is every item of the list `a`,",
        "`m.*` every value of the mapping `m`.",
    ]
    for section in parts:
        lines += ["", f"### {section.title}", ""]
        if section.intro:
            lines += [section.intro, ""]
        lines += ["| field | type | default | description |", "| --- | --- | --- | --- |"]
        if not section.rows:
            lines.append("| (none) | | | This stage takes no parameters. |")
        lines += [
            f"| {_code(r.path)} | {_code(r.type)} | {_code(r.default) if r.default != REQUIRED else REQUIRED} | {_cell(r.description)} |"
            for r in section.rows
        ]
    return "\n".join(lines) + "\n"


# -- the README section -----------------------------------------------------------------------------
def current(document: str) -> str:
    """The text between the markers (exclusive), without the newline that follows START."""
    start, end = _bounds(document)
    return document[start:end]


def replace(document: str, reference: str) -> str:
    start, end = _bounds(document)
    return document[:start] + reference + document[end:]


def _bounds(document: str) -> tuple[int, int]:
    start, end = document.find(START), document.find(END)
    if start < 0 or end < start or document.count(START) != 1 or document.count(END) != 1:
        raise ValueError(f"expected exactly one '{START}' followed by one '{END}'")
    body = start + len(START)
    if document.startswith("\n", body):
        body += 1
    return body, end


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.reference", description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--check",
        type=Path,
        metavar="FILE",
        help="exit 1, with a diff, if FILE's section is not the generated one",
    )
    group.add_argument(
        "--write", type=Path, metavar="FILE", help="replace FILE's section with the generated one"
    )
    args = parser.parse_args(argv)
    reference = render()
    target = args.check or args.write
    if target is None:
        sys.stdout.write(reference)
        return 0
    try:
        document = target.read_text(encoding="utf-8")
        old = current(document)
    except (OSError, ValueError) as exc:
        print(f"{target}: {exc}", file=sys.stderr)
        return 2
    if args.write:
        if old != reference:
            target.write_text(replace(document, reference), encoding="utf-8")
        print(f"{target}: config reference {'updated' if old != reference else 'already up to date'}")
        return 0
    if old == reference:
        return 0
    diff = difflib.unified_diff(
        old.splitlines(keepends=True), reference.splitlines(keepends=True), f"{target} (current)", "generated"
    )
    sys.stdout.writelines(diff)
    print(
        f"\n{target}: the config reference is stale; run: python -m deploy.reference --write {target}",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
