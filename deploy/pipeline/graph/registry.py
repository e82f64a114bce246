"""Finds the stages: every module (or package) `<name>` directly inside a stage package
whose name does not start with `_` defines the stage `<name>` as
SPEC = StageSpec(name=<name>, ...).

The stage packages are `stages` plus those named in $DEPLOY_STAGE_PACKAGES (import
paths, separated by `:`), so a stage can live outside this repository; the engine never
names a stage. Adding a stage means adding a module to a stage package; nothing here
changes. Only the stages a config names are imported (each costs a few ms of a no-op
run's budget), and stage modules import their heavy libraries inside their run functions.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from functools import cache
from types import ModuleType
from typing import TypeVar

from deploy.pipeline.errors import EnvError
from deploy.pipeline.graph.contract import StageSpec
from deploy.pipeline.graph.facts import Fact
from deploy.spec.config import DeployConfig

T = TypeVar("T")

BUILTIN = "deploy.stages"
PACKAGES_ENV = "DEPLOY_STAGE_PACKAGES"


def packages() -> tuple[str, ...]:
    extra = [name for name in os.environ.get(PACKAGES_ENV, "").split(":") if name]
    return (BUILTIN, *extra)


@cache
def _modules() -> dict[str, str]:
    """module name -> import path, of every stage module; the first package that has a
    name wins. A module defines the stage of its name (SPEC), or a family of stages from one
    definition (SPECS: one per parameter, e.g. a precision), named as it names them."""
    found: dict[str, str] = {}
    for package in packages():
        for info in pkgutil.iter_modules(_import(package).__path__):
            if not info.name.startswith("_"):
                found.setdefault(info.name, f"{package}.{info.name}")
    return found


def specs_in(module: ModuleType) -> dict[str, StageSpec]:
    """The stages a module defines: its SPEC, or each of its SPECS."""
    declared = getattr(module, "SPECS", None) or (getattr(module, "SPEC", None),)
    return {s.name: s for s in declared if isinstance(s, StageSpec)}


@cache
def _families() -> dict[str, str]:
    """stage name -> import path, for the stages of modules that define SPECS (each
    stage module imported: only where a name is not a module's own)."""
    found: dict[str, str] = {}
    for path in _modules().values():
        module = importlib.import_module(path)
        if hasattr(module, "SPECS"):
            found.update(dict.fromkeys(specs_in(module), path))
    return found


def _module_of(name: str) -> str | None:
    path = _modules().get(name)
    return path if path is not None else _families().get(name)


def _import(package: str) -> ModuleType:
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise EnvError(f"${PACKAGES_ENV}: cannot import the stage package '{package}': {exc}") from exc


def stage_names() -> tuple[str, ...]:
    families = set(_families().values())
    return tuple(sorted({n for n, path in _modules().items() if path not in families} | set(_families())))


def stage_module(name: str) -> str:
    """The import path of the module that defines stage `name` (a child process imports
    it by this path to run the stage)."""
    path = _module_of(name)
    if path is None:
        raise KeyError(name)
    return path


@cache
def stage_spec(name: str) -> StageSpec | None:
    module = _module_of(name)
    if module is None:
        return None
    spec = specs_in(importlib.import_module(module)).get(name)
    if spec is None:
        raise TypeError(f"{module} must define SPEC = StageSpec(name='{name}', ...) or SPECS holding it")
    return spec


def stage_specs() -> dict[str, StageSpec]:
    """Every stage (imports them all: for listings and tests, not for runs)."""
    return {name: spec for name in stage_names() if (spec := stage_spec(name)) is not None}


def read_fact(config: DeployConfig, wanted: Fact[T]) -> T:
    """A fact (pipeline/graph/facts.py) as the configured stage that provides it states it, read
    from that stage's validated params; the fact's default when none provides it."""
    for name, section in config.stages.items():
        spec = stage_spec(name)
        provider = next((p for p in spec.provides if p.fact.name == wanted.name), None) if spec else None
        if spec is not None and provider is not None:
            value: T = provider.read(spec.params_from(section, config.base_dir))
            return value
    return wanted.default
