"""A boolean where the config's model wants a number: refused, naming the key. pydantic
reads `true` as 1.0 and `false` as 0.0 for a float (and YAML reads `yes`, `no`, `on` and
`off` as booleans), so `atol: yes` passed validation as a tolerance 10^4 times looser than
meant, and `min_cosine: no` turned the cosine check off. The walk follows the models'
fields, their containers and nested models, over the raw YAML that validated."""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from deploy.domain.issues import Issue

NUMBERS = (int, float)
UNIONS = (Union, types.UnionType)


def booleans_as_numbers(model: type[BaseModel], raw: object, where: str = "") -> list[Issue]:
    """Every place in `raw` (the input `model` validated) where a bool stands for a number."""
    if not isinstance(raw, Mapping):
        return []
    issues: list[Issue] = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key in raw:
            issues += _value(field.annotation, raw[key], f"{where}.{key}" if where else key)
    return issues


def _value(annotation: Any, value: object, where: str) -> list[Issue]:
    if isinstance(value, bool):
        return [_issue(where, value)] if _number_only(annotation) else []
    if isinstance(value, Mapping):
        return _mapping(annotation, value, where)
    if isinstance(value, list | tuple):
        return _items(annotation, value, where)
    return []


def _mapping(annotation: Any, value: Mapping[Any, Any], where: str) -> list[Issue]:
    for member in _members(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel) and set(value) <= _keys(member):
            return booleans_as_numbers(member, value, where)
        if get_origin(member) in (dict, Mapping) and len(get_args(member)) == 2:
            inner = get_args(member)[1]
            return [i for k, v in value.items() for i in _value(inner, v, f"{where}.{k}")]
    return []


def _items(annotation: Any, value: list[Any] | tuple[Any, ...], where: str) -> list[Issue]:
    for member in _members(annotation):
        args = get_args(member)
        if get_origin(member) in (list, tuple) and args:
            fixed = get_origin(member) is tuple and Ellipsis not in args
            inner = [args[i] if fixed and i < len(args) else args[0] for i in range(len(value))]
            return [
                i
                for n, (a, v) in enumerate(zip(inner, value, strict=True))
                for i in _value(a, v, f"{where}[{n}]")
            ]
    return []


def _members(annotation: Any) -> list[Any]:
    """The types an annotation allows, with Annotated and Optional unwrapped."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin in UNIONS:
        return [m for a in get_args(annotation) for m in _members(a)]
    return [annotation]


def _number_only(annotation: Any) -> bool:
    """A number is wanted and a bool is not: no bool, Literal of bools, Any or object among
    the members (bool is an int to Python, so `int` alone does not admit it here)."""
    members = _members(annotation)
    admits = any(
        m in (bool, Any, object)
        or (get_origin(m) is Literal and any(isinstance(a, bool) for a in get_args(m)))
        for m in members
    )
    return not admits and any(m in NUMBERS for m in members)


def _keys(model: type[BaseModel]) -> set[str]:
    return {f.alias or n for n, f in model.model_fields.items()} | set(model.model_fields)


def _issue(where: str, value: bool) -> Issue:
    return Issue(
        where, f"a number, not the boolean {str(value).lower()} (YAML reads yes/no/on/off as booleans)"
    )
