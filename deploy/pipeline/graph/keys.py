"""Cache keys: sha256 of the canonical JSON of everything a stage's output depends on.

    {stage, version, params (its own only), config (only the sections it declares),
     inputs (artifact digests), env (versions of the libraries it declares)}

`reasons` diffs two such documents, so `deploy plan` can say *what* changed.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import BaseModel

from deploy.pipeline.graph.contract import StageSpec
from deploy.pipeline.graph.hashing import digest_json
from deploy.spec.config import DeployConfig

KEY_SCHEMA = 1
NEVER_RAN = "never ran with this cache"


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


@cache
def _installed() -> dict[str, str]:
    """name -> version from the `.dist-info` folder names on sys.path (first wins, as
    for imports). One directory scan instead of importing importlib.metadata (~25 ms
    of a warm run's 0.5 s budget)."""
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = [e.name for e in os.scandir(entry or ".") if e.name.endswith(".dist-info")]
        except OSError:
            continue
        for folder in names:
            name, _, version = folder.removesuffix(".dist-info").partition("-")
            found.setdefault(_normalise(name), version)
    return found


@cache
def dist_version(name: str) -> str | None:
    """A distribution's version, read from metadata, never by importing it."""
    version = _installed().get(_normalise(name))
    if version is not None:
        return version
    from importlib import metadata  # egg-info and other layouts the scan misses

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def environment(spec: StageSpec, params: BaseModel, config: DeployConfig) -> dict[str, object]:
    env: dict[str, object] = {"python": platform.python_version()}
    env.update({name: dist_version(name) for name in spec.env})
    if spec.identity is not None:
        env.update(spec.identity(params))
    if spec.observes is not None:
        env.update(spec.observes(params, config))
    return env


@dataclass(frozen=True)
class KeyParts:
    """Everything a stage's output depends on; the cache key is the sha256 of its
    canonical JSON. Stored with each cache entry and each pipeline head (what `deploy
    plan` diffs)."""

    stage: str
    version: int
    params: Mapping[str, object]  # the stage's own params, as JSON
    config: Mapping[str, object]  # the shared config sections it declares (`uses`)
    inputs: Mapping[str, str]  # input name -> artifact digest (or ABSENT)
    env: Mapping[str, object]  # library versions and the stage's identity facts

    def to_json(self) -> dict[str, object]:
        return {
            "schema": KEY_SCHEMA,
            "stage": self.stage,
            "version": self.version,
            "params": dict(self.params),
            "config": dict(self.config),
            "inputs": dict(sorted(self.inputs.items())),
            "env": dict(self.env),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KeyParts:
        fields = ("stage", "version", "params", "config", "inputs", "env")
        return cls(*(data[name] for name in fields))

    @property
    def key(self) -> str:
        return key_of(self.to_json())

    def own(self) -> dict[str, object]:
        """What the stage itself decides: everything but the input digests."""
        return {k: v for k, v in self.to_json().items() if k != "inputs"}


def components(
    spec: StageSpec, params: BaseModel, config: DeployConfig, inputs: Mapping[str, str]
) -> KeyParts:
    return KeyParts(
        spec.name,
        spec.version,
        params.model_dump(mode="json"),
        {s.value: s.extract(config) for s in sorted(spec.uses, key=lambda s: s.value)},
        dict(inputs),
        environment(spec, params, config),
    )


def key_of(document: Mapping[str, object]) -> str:
    return digest_json(document)


def reasons(old: KeyParts | None, new: KeyParts) -> list[str]:
    """Human-readable differences, e.g. 'params.opset: 17 -> 18'."""
    if old is None:
        return [NEVER_RAN]
    flat_old, flat_new = _flatten(old.to_json()), _flatten(new.to_json())
    changed = []
    for path in sorted(set(flat_old) | set(flat_new)):
        before, after = flat_old.get(path, "<unset>"), flat_new.get(path, "<unset>")
        if before != after:
            changed.append(f"{path}: {_short(before)} -> {_short(after)}")
    return changed


def _flatten(value: object, prefix: str = "") -> dict[str, object]:
    if isinstance(value, Mapping) and value:
        out: dict[str, object] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def _short(value: object) -> str:
    text = str(value)
    # Digests are long; their first 12 characters identify them well enough.
    return text[:12] + "…" if len(text) == 64 and text.isalnum() else text
