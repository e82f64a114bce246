"""A warm `deploy run CONFIG` that would change nothing is answered from the last no-op
run's footprint (pipeline.store.footprint): its screen, printed again, without importing the
stage modules or building the config's models.

`remember` keeps a footprint after a run of the whole pipeline in which every stage came
from the local cache (nothing ran, was repaired, pulled or pushed, and nothing warned).
`replayed` matches it: only for a plain invocation (no stage selection, no -v, no CI
files to write), and only when every stat, the environment and the invocation are as
they were. Anything else takes the full path, which checks every stage: `-v` does so
on purpose (and renews the footprint).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from rich.console import Console
from rich.text import Text

from deploy.console.screen import Screen
from deploy.pipeline.store import footprint

if TYPE_CHECKING:
    from deploy.pipeline.process.runner import Runner

MAX_CONFIG_BYTES = 1 << 20  # larger configs take the full path and its bounds checks


def location(config: Path) -> Path | None:
    """Where the config's run keeps its footprint: <run_dir>/<name>/, read from the YAML
    as the config's own validation would resolve it. A guess is harmless: a footprint
    found holds the invocation and every stat, and is used only when all match."""
    try:
        if config.stat().st_size > MAX_CONFIG_BYTES:
            return None
        raw = yaml.load(config.read_bytes(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        return None
    run_dir = raw.get("run_dir")
    if run_dir is None:
        return Path("runs") / raw["name"] / footprint.FILE  # the default is relative to the working dir
    if not isinstance(run_dir, str):
        return None
    return config.parent / run_dir / raw["name"] / footprint.FILE


def replayed(config: Path, cache_dir: Path | None, console: Console) -> bool:
    """True when the last no-op run's results were printed again (nothing changed)."""
    where = location(config)
    found = footprint.load(where) if where is not None else None
    if found is None or footprint.difference(found, footprint.invocation(config, cache_dir)) is not None:
        return False
    note = (
        f"nothing changed since the run that finished {found.made}: its results follow, "
        "checked by stat without loading the pipeline (-v checks every stage)"
    )
    console.print(Text(note, style="dim"), soft_wrap=not console.is_terminal)
    Screen.from_json(found.screen).show(console, with_stages=True)
    return True


def forget(runner: Runner) -> None:
    """A full run starts by dropping the footprint: what it does may change anything. (A
    run dir it can't write is the preflight's to report.)"""
    with contextlib.suppress(OSError):
        footprint.forget(runner.project.run_dir / footprint.FILE)


def remember(runner: Runner, config: Path, cache_dir: Path | None, screen: Screen, warned: bool) -> None:
    """Keeps the footprint of a run that was a no-op; any other run keeps none."""
    if warned or not _was_noop(runner) or runner.summary is None:
        return
    invoked = footprint.invocation(config, cache_dir)
    try:
        found = footprint.take(
            invoked, _consulted(runner), _listed(runner), screen.to_json(), runner.summary.finished
        )
    except footprint.TooLarge:
        return
    footprint.save(runner.project.run_dir / footprint.FILE, found)


def _was_noop(runner: Runner) -> bool:
    from deploy.pipeline.report.results import RunStatus, Status

    results = runner.results
    return (
        runner.summary is not None
        and runner.summary.status is RunStatus.OK
        and runner.remote is None
        and len(results) == len(runner.project.graph.names())
        and all(r.status in (Status.CACHED, Status.SKIPPED) and not r.remote for r in results)
        and all(isinstance(dest, Path) for dest, _ in runner.published)
    )


def _consulted(runner: Runner) -> Iterator[Path]:
    """Every path the run's outcome rests on (see pipeline.store.footprint)."""
    project, store = runner.project, runner.store
    yield project.path
    yield from (Path(p) for p in sorted(store.memo.consulted))
    for node in project.graph.nodes:
        yield from _named_paths(node.params.model_dump(mode="json"), project.path.parent)
    if any(node.spec.observes is not None for node in project.graph.nodes):
        yield project.config.repository  # what is deployed there enters a stage's key
    for result in runner.results:
        yield from _cache_paths(runner, result.key, result.outputs)
    yield store.root / "heads" / f"{project.config.name}.json"
    for dest, models in runner.published:
        yield from _published_paths(Path(dest), models)
    yield from _run_records(project.run_dir)


def _listed(runner: Runner) -> Iterator[Path]:
    """Folders whose listing matters, not their contents: the repository (another model
    of this pipeline appearing there is stale) and the run's history (a replay adds no
    run to it)."""
    from deploy.pipeline.store.history import HISTORY

    yield from (Path(dest) for dest, _ in runner.published)
    yield runner.project.run_dir / HISTORY


def _cache_paths(runner: Runner, key: str | None, outputs: dict[str, Any]) -> Iterator[Path]:
    from deploy.pipeline.graph.contract import ArtifactKind

    store = runner.store
    if key is not None:
        yield store.entry_path(key)
    for output in outputs.values():
        yield store.object_path(output.digest)
        if output.kind is ArtifactKind.TREE:
            yield from (store.object_path(m.digest) for m in store.tree_manifest(output.digest).values())
            yield store.root / "trees" / output.digest


def _published_paths(dest: Path, models: list[str]) -> Iterator[Path]:
    """The repository's top-level files (publish manifests) and each published model's tree."""
    if dest.is_dir():
        yield from (p for p in dest.iterdir() if p.is_file())
    yield from (dest / model for model in models)


def _run_records(run_dir: Path) -> Iterator[Path]:
    from deploy.pipeline.store.history import LATEST, REPORT_FILE, SUMMARY_FILE

    yield from (run_dir / name for name in (SUMMARY_FILE, REPORT_FILE, LATEST))


def _named_paths(value: object, base: Path) -> Iterator[Path]:
    """Files and folders a stage's params name (data, tokenizers, labels): their contents
    are in stage keys through the stages' identities."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _named_paths(item, base)
    elif isinstance(value, list):
        for item in value:
            yield from _named_paths(item, base)
    elif isinstance(value, str) and 0 < len(value) < 4096 and "\0" not in value:
        for path in (Path(value), base / value):
            if path.exists():
                yield path
