"""Loads a YAML file into a validated project: shared config + stage graph.

Every problem is collected and reported at once, each with its YAML path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from deploy.domain.issues import Issue
from deploy.pipeline.errors import ConfigError
from deploy.pipeline.graph import bounds
from deploy.pipeline.graph.contract import RunSettings, StageSpec, split_section
from deploy.pipeline.graph.dag import Graph, build_graph
from deploy.pipeline.graph.facts import duplicate_issues
from deploy.pipeline.graph.numbers import booleans_as_numbers
from deploy.pipeline.graph.registry import stage_names, stage_spec
from deploy.spec.config import DeployConfig
from deploy.spec.config_checks import shape_issues

CACHE_ENV = "DEPLOY_CACHE_DIR"
REMOTE_ENV = "DEPLOY_CACHE_REMOTE"  # a CI job's shared cache, whatever the config says


@dataclass(frozen=True)
class Project:
    path: Path
    config: DeployConfig
    graph: Graph
    settings: dict[str, RunSettings] = field(default_factory=dict)  # stage -> how it is run
    cache_given: bool = False  # the cache is --cache-dir's or $DEPLOY_CACHE_DIR's, not the config's

    def settings_of(self, spec: StageSpec) -> RunSettings:
        return self.settings.get(spec.name) or RunSettings(timeout_s=spec.timeout_s)

    @property
    def cache_dir(self) -> Path:
        return self.config.cache_dir

    @property
    def run_dir(self) -> Path:
        return self.config.run_dir / self.config.name


# libyaml's parser when PyYAML was built with it: ~10x faster than the pure-Python one,
# which matters to the 0.5 s budget of a no-op run.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_SafeLoader):  # type: ignore[valid-type,misc]
    """PyYAML keeps the last of two equal keys silently; a config typo should not."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        # A merge key (`<<: *defaults`) is YAML's own override: the mapping's keys win over
        # the merged ones (the base class flattens it), so only its own keys are compared.
        own = [(k, v) for k, v in node.value if k.tag != "tag:yaml.org,2002:merge"]
        keys = [self.construct_object(k, deep=deep) for k, _ in own]
        seen: set[Any] = set()
        for (key_node, _), key in zip(own, keys):
            if isinstance(key, (list, dict)):  # `{[a]: 8}`: YAML allows it, no config key is one
                line = key_node.start_mark.line + 1
                raise yaml.constructor.ConstructorError(
                    None, None, f"a key that is a {type(key).__name__} at line {line}"
                )
            if key in seen:
                line = key_node.start_mark.line + 1
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key '{key}' at line {line}")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path) -> dict[str, Any]:
    if path.is_dir():
        raise ConfigError(
            str(path), [Issue("", "is a directory; give the config file (e.g. configs/resnet50.yaml)")]
        )
    if path.exists() and not path.is_file():  # `<(cat x.yaml)`, a device: no folder for its paths
        raise ConfigError(
            str(path),
            [
                Issue(
                    "",
                    "is not a regular file (a pipe?): give the config file itself, whose folder its relative paths start at",
                )
            ],
        )
    if not path.is_file():
        raise ConfigError(str(path), [Issue("", "config file not found")])
    bounds.check_size(str(path), path.stat().st_size)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except UnicodeDecodeError as exc:  # a binary file, or text in another encoding: YAML is UTF-8
        raise ConfigError(
            str(path),
            [Issue("", f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})")],
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), [Issue("yaml", str(exc).replace("\n", " "))]) from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), [Issue("", "the top level must be a mapping")])
    return data


def host_issues(project: Project) -> list[Issue]:
    """What this machine's install cannot do of the configured stages (StageSpec.host)."""
    nodes = project.graph.nodes
    return [i for n in nodes if n.spec.host is not None for i in n.spec.host(n.params, project.config)]


def load_project(path: Path, cache_dir: Path | None = None) -> Project:
    return project_from(read_yaml(path), path, cache_dir)


def project_from(raw: dict[str, Any], path: Path, cache_dir: Path | None = None) -> Project:
    """A validated project from a config mapping; `path` names it in messages, and its
    directory is where the config's relative paths start."""
    bounds.check_expansion(str(path), raw)
    env_cache = os.environ.get(CACHE_ENV)
    if cache_dir is not None or env_cache:
        raw = {**raw, "cache_dir": str((cache_dir or Path(env_cache or "").expanduser()).absolute())}
    env_remote = os.environ.get(REMOTE_ENV)
    if env_remote and isinstance(raw.get("cache", {}), dict):
        raw = {**raw, "cache": {**raw.get("cache", {}), "remote": env_remote}}
    config, issues = _validate_shared(raw, path.parent)
    stages, settings, stage_issues = _validate_stages(raw.get("stages"), path.parent)
    stages = _with_implied(stages) if stages is not None and not stage_issues else stages
    issues += stage_issues
    graph = None
    if stages is not None and not stage_issues:
        graph, graph_issues = _graph(stages)
        issues += graph_issues
    if config is not None and stages is not None and not stage_issues:
        issues += duplicate_issues({spec.name: spec.provides for spec, _ in stages})
        issues += [i for spec, params in stages if spec.check for i in spec.check(params, config)]
    if issues or config is None or graph is None:
        raise ConfigError(str(path), issues)
    return Project(path, config, graph, settings, cache_given=cache_dir is not None or bool(env_cache))


def _validate_shared(raw: dict[str, Any], base: Path) -> tuple[DeployConfig | None, list[Issue]]:
    try:
        config = DeployConfig.model_validate(raw, context={"base_dir": base})
    except ValidationError as exc:
        return None, _issues(exc)
    return config, booleans_as_numbers(DeployConfig, raw) + shape_issues(config) + _overlap_issues(config)


def _overlap_issues(config: DeployConfig) -> list[Issue]:
    """The cache and the run records apart from the repository: either inside it put
    `actions/`, `objects/` (or `<name>/summary.json`, logs) beside the models, which a
    Triton loading the folder takes for models; a repository inside the cache is a tree
    its own cleaning may remove (run records are never cleaned so: a run_dir may hold it)."""
    repository = config.repository.resolve()  # `..` collapsed: out/../runs is beside out, not in it
    found = []
    for key, path in (("cache_dir", config.cache_dir.resolve()), ("run_dir", config.run_dir.resolve())):
        if path == repository:
            where = "is the repository"
        elif repository in path.parents:
            where = "is inside the repository"
        elif path in repository.parents and key == "cache_dir":
            where = "holds the repository"
        else:
            continue
        found.append(Issue(key, f"{path} {where} {repository}: give them separate directories"))
    return found


Stages = list[tuple[StageSpec, BaseModel]]


def _validate_stages(raw: Any, base: Path) -> tuple[Stages | None, dict[str, RunSettings], list[Issue]]:
    if not isinstance(raw, dict) or not raw:
        return None, {}, []  # reported by the shared model
    stages, settings, issues = [], {}, []
    for name, section in raw.items():
        spec = stage_spec(str(name))
        if spec is None:
            issues.append(Issue(f"stages.{name}", f"unknown stage (known: {', '.join(stage_names())})"))
            continue
        params, run = split_section(section)
        try:
            stages.append((spec, spec.params.model_validate(params, context={"base_dir": base})))
            issues += booleans_as_numbers(spec.params, params, f"stages.{name}")
        except ValidationError as exc:
            issues += _issues(exc, prefix=f"stages.{name}")
        try:
            settings[spec.name] = RunSettings.model_validate({"timeout_s": spec.timeout_s, **run})
            issues += booleans_as_numbers(RunSettings, run, f"stages.{name}")
        except ValidationError as exc:
            issues += _issues(exc, prefix=f"stages.{name}")
    return stages, settings, issues


def _with_implied(stages: Stages) -> Stages:
    """Adds, with its defaults, each implied stage (StageSpec.implied) named after an
    artifact that a stage reads and none makes; looked up by name, so only the stages a
    config needs are imported."""
    found = list(stages)
    for spec, params in found:  # grows while it runs: an implied stage's own needs too
        made = {a.name for s, _ in found for a in s.outputs}
        for artifact in spec.inputs_for(params):
            implied = stage_spec(artifact) if artifact not in made else None
            if implied is not None and implied.implied:
                found.append((implied, implied.params.model_validate({})))
                made.update(a.name for a in implied.outputs)
    return found


def _graph(stages: list[tuple[StageSpec, BaseModel]]) -> tuple[Graph | None, list[Issue]]:
    try:
        return build_graph(stages), []
    except ConfigError as exc:
        return None, exc.issues


def _issues(exc: ValidationError, prefix: str = "") -> list[Issue]:
    errors = exc.errors()
    return [Issue(_where(prefix, err["loc"]), _message(err)) for err in errors if not _echo(err, errors)]


def _echo(err: Any, errors: list[Any]) -> bool:
    """pydantic checks a list's length after dropping its invalid items, so one bad input
    also reports 'inputs: should have at least 1 item': noise next to the real error."""
    loc = tuple(err["loc"])
    return err["type"] == "too_short" and any(
        tuple(o["loc"])[: len(loc)] == loc and len(o["loc"]) > len(loc) for o in errors
    )


def _where(prefix: str, loc: tuple[int | str, ...]) -> str:
    where = prefix
    for part in loc:
        if isinstance(part, int):
            where += f"[{part}]"
        elif not part.startswith(("function-", "tagged-union", "json-or-python")):
            where += f".{part}" if where else part
    return where


def _message(err: Any) -> str:
    from deploy.spec.config import error_text

    return error_text(err)
