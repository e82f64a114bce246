"""Versioned JSON records: what one stage writes and another reads carries a `schema`
number, and a reader meeting another number fails with one clear message instead of a
KeyError deep inside. A producer bumps its record's SCHEMA together with its stage's
version, so a cached file of the old layout is never found by the new key; a mismatch
therefore means a file from another deploy release (a copied run dir, a stale path)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

from deploy.pipeline.errors import StageFailed

T = TypeVar("T")


class SchemaMismatch(StageFailed):
    """A record file written with another layout than this release reads."""


def expect_schema(data: object, record: str, expected: int) -> Mapping[str, object]:
    """`data` as a mapping of the expected schema, else SchemaMismatch naming the record."""
    if not isinstance(data, Mapping):
        raise SchemaMismatch(f"{record}: not a JSON object")
    found = data.get("schema")
    if found != expected:
        raise SchemaMismatch(
            f"{record}: schema {found!r}, this deploy reads schema {expected}; it was written by "
            "another release: rerun the stage that writes it (deploy run CONFIG --force STAGE)"
        )
    return data


def typed(kind: Any, value: object, what: str) -> Any:
    """`value` (decoded JSON) as `kind` (a dataclass, nested dataclasses and enums
    included, or a container of them), checked field by field by pydantic; a wrong or
    missing field is a SchemaMismatch saying `what` and where."""
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(kind).validate_python(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the record"
        raise SchemaMismatch(f"{what} ({where}: {first['msg']})") from None


def read_record(path: Path, kind: type[T], schema: int, what: str) -> T:
    """The record file at `path`: its schema checked, then its fields as `kind`'s."""
    try:
        data = dict(expect_schema(json.loads(path.read_text()), str(path), schema))
    except ValueError as exc:  # not JSON (UnicodeDecodeError included)
        raise SchemaMismatch(f"{path}: not {what} ({type(exc).__name__}: {exc})") from None
    data.pop("schema")
    result: T = typed(kind, data, f"{path}: not {what}")
    return result


def record_json(record: Any, schema: int) -> dict[str, object]:
    """A dataclass record as the JSON object its reader takes back, with its schema."""
    return {"schema": schema, **asdict(record)}
