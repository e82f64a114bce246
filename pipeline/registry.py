"""Finds the stages: every public module in the `stages` package that defines SPEC.

Adding a stage means adding a module to `stages/`; nothing here changes. Stage
modules import their heavy libraries inside their run functions, so discovery is cheap.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from pipeline.stage import StageSpec


@cache
def stage_specs() -> dict[str, StageSpec]:
    import stages

    specs: dict[str, StageSpec] = {}
    for info in sorted(pkgutil.iter_modules(stages.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        spec = getattr(importlib.import_module(f"stages.{info.name}"), "SPEC", None)
        if not isinstance(spec, StageSpec):
            raise TypeError(f"stages/{info.name}.py defines no SPEC = StageSpec(...)")
        if spec.name in specs:
            raise TypeError(f"two stage modules declare the stage name '{spec.name}'")
        specs[spec.name] = spec
    return specs
