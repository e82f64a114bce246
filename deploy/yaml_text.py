"""How the config reference writes a pydantic field's type and default in YAML's terms:
`1 ≤ int ≤ 5`, `onnx | python`, `non-empty list[str]`; values in flow style as PyYAML
reads them back (1.0e-05, not 1e-05, which YAML 1.1 reads as a string)."""

from __future__ import annotations

import enum
import json
import math
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

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


def is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


# -- types ----------------------------------------------------------------------------------------
def render_type(annotation: Any, metadata: Sequence[Any] = ()) -> str:
    """Readable, YAML-minded: Literal -> `a | b`, tuples -> `list[int]`, Optional ->
    `... | null`, a nested model -> `object`, with the field's bounds: `1 ≤ int ≤ 5`,
    `non-empty list[str]`."""
    annotation, metadata = _unwrap(annotation, metadata)
    if is_union(annotation):
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
    if is_model(annotation):
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
