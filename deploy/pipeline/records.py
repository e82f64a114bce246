"""Versioned JSON records: what one stage writes and another reads carries a `schema`
number, and a reader meeting another number fails with one clear message instead of a
KeyError deep inside. A producer bumps its record's SCHEMA together with its stage's
version, so a cached file of the old layout is never found by the new key; a mismatch
therefore means a file from another deploy release (a copied run dir, a stale path)."""

from __future__ import annotations

from collections.abc import Mapping

from deploy.pipeline.errors import StageFailed


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
