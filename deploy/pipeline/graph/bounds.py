"""Bounds on what a config may be, checked before anything reads it deeply. YAML aliases
share one object per reference, so ten lines of `&a [*b, *b, ...]` describe billions of
values: pyyaml builds them in milliseconds, and the first thing that walks them (a key's
canonical JSON) runs out of memory. A config is a few kilobytes of settings; these
limits are orders of magnitude above any real one."""

from __future__ import annotations

from typing import Any

from deploy.domain.issues import Issue
from deploy.pipeline.errors import ConfigError

# The config file's size, bytes.
MAX_BYTES = 1 << 20
# Values (mappings, lists and scalars) the config amounts to with every alias expanded.
MAX_VALUES = 100_000
# Nesting depth of mappings and lists.
MAX_DEPTH = 64


def check_size(source: str, size: int) -> None:
    if size > MAX_BYTES:
        raise ConfigError(
            source, [Issue("", f"is {size} bytes; a config is at most {MAX_BYTES} bytes (1 MiB)")]
        )


def check_expansion(source: str, raw: Any) -> None:
    """ConfigError when the config, aliases expanded, holds more than MAX_VALUES values,
    nests deeper than MAX_DEPTH, or refers to itself (a recursive alias)."""
    problem = _problem(raw)
    if problem:
        raise ConfigError(source, [Issue("", problem)])


def _problem(raw: Any) -> str | None:
    counts: dict[int, int] = {}
    try:
        total = _count(raw, counts, set(), 0)
    except _Refused as refused:
        return str(refused)
    if total > MAX_VALUES:
        return (
            f"expands to {total:.3g} values (YAML aliases repeat what they refer to); a config holds at most "
            f"{MAX_VALUES}: write the repeated part once"
        )
    return None


class _Refused(Exception):
    pass


def _count(value: Any, counts: dict[int, int], open_: set[int], depth: int) -> int:
    """Values with aliases expanded, each shared object counted once per reference and
    walked once (its count memoised): linear in the document, whatever it expands to."""
    if not isinstance(value, dict | list):
        return 1
    key = id(value)
    if key in counts:
        return counts[key]
    if key in open_:
        raise _Refused("refers to itself (a recursive YAML alias): a config must be a tree")
    if depth > MAX_DEPTH:
        raise _Refused(f"nests deeper than {MAX_DEPTH} levels")
    open_.add(key)
    children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
    counts[key] = 1 + sum(_count(child, counts, open_, depth + 1) for child in children)
    open_.discard(key)
    return counts[key]
