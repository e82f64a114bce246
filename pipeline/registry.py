"""Finds the stages: the module `stages/<name>.py` defines the stage `<name>` as
SPEC = StageSpec(name=<name>, ...).

Adding a stage means adding a module to `stages/`; nothing here changes. Only the stages
a config names are imported (each costs a few ms of a no-op run's budget), and stage
modules import their heavy libraries inside their run functions.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from pipeline.stage import StageSpec


@cache
def stage_names() -> tuple[str, ...]:
    import stages

    return tuple(sorted(i.name for i in pkgutil.iter_modules(stages.__path__) if not i.name.startswith("_")))


@cache
def stage_spec(name: str) -> StageSpec | None:
    if name not in stage_names():
        return None
    spec = getattr(importlib.import_module(f"stages.{name}"), "SPEC", None)
    if not isinstance(spec, StageSpec) or spec.name != name:
        raise TypeError(f"stages/{name}.py must define SPEC = StageSpec(name='{name}', ...)")
    return spec


def stage_specs() -> dict[str, StageSpec]:
    """Every stage (imports them all: for listings and tests, not for runs)."""
    return {name: spec for name in stage_names() if (spec := stage_spec(name)) is not None}
