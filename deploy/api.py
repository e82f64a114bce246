"""The Python API: `deploy.load(...)` gives a `Pipeline` to validate, plan and run, and a
run gives a typed `RunResult`. The CLI is a layer over the same calls. Nothing prints:
what a run has to say goes to the `deploy` logger (a NullHandler unless the caller
configures logging) or to a reporter the caller passes. Errors are the engine's typed
exceptions (`ConfigError`, `SelectionError`, `StageError`, `EnvError`, ...)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from deploy.domain.issues import Issue
from deploy.pipeline.errors import ConfigError
from deploy.pipeline.report.results import RunStatus, RunSummary, StageResult, StageSummary

if TYPE_CHECKING:
    from deploy.pipeline.graph.plan import PlanRow
    from deploy.pipeline.graph.project import Project
    from deploy.pipeline.process.progress import Progress
    from deploy.pipeline.process.runner import Runner
    from deploy.pipeline.report.reporter import Reporter
    from deploy.runtimes.selection_record import Selection

LOG = logging.getLogger("deploy")


def load(config: str | Path | Mapping[str, object], cache_dir: str | Path | None = None) -> Pipeline:
    """A validated pipeline from a YAML file or a mapping with the same keys. A mapping's
    relative paths start at the current directory; the YAML it amounts to is written
    to `<run_dir>/<name>/config.yaml`, the file its resume hints and CI jobs name."""
    from deploy.pipeline.graph.project import load_project, project_from

    cache = Path(cache_dir).expanduser() if cache_dir is not None else None
    if not isinstance(config, Mapping):
        return Pipeline(load_project(Path(config).expanduser(), cache))
    origin = Path.cwd() / "deploy.load(mapping)"  # messages name it; its directory is where paths start
    project = project_from(dict(config), origin, cache)
    return Pipeline(_written(project, config))


def _written(project: Project, config: Mapping[str, object]) -> Project:
    import yaml

    path = project.run_dir / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    raw, stages = _plain(config), {n.name: n.params for n in project.graph.nodes}
    found = _resolved(raw, project.config)
    if (
        isinstance(raw, dict) and isinstance(found, dict) and "stages" in raw
    ):  # stage params resolve their own
        found["stages"] = _resolved(raw["stages"], stages)
    path.write_text(yaml.safe_dump(found, sort_keys=False))
    return replace(project, path=path)


def _resolved(raw: object, validated: object) -> object:
    """The mapping with each path as the config resolved it (absolute): a YAML file reads
    its relative paths from its own folder, the mapping's started at the current one."""
    if isinstance(validated, Path):
        return str(validated)
    if isinstance(raw, dict) and hasattr(validated, "model_fields"):
        return {k: _resolved(v, getattr(validated, k, None)) for k, v in raw.items()}
    if isinstance(raw, dict) and isinstance(validated, Mapping):
        return {k: _resolved(v, validated.get(k)) for k, v in raw.items()}
    if isinstance(raw, list) and isinstance(validated, (list, tuple)) and len(raw) == len(validated):
        return [_resolved(r, v) for r, v in zip(raw, validated, strict=True)]
    return raw


def _plain(value: object) -> object:
    """YAML-safe: paths as strings, tuples as lists (mappings keep their order)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value) if isinstance(value, Path) else value


@dataclass(frozen=True, repr=False)
class Pipeline:
    project: Project

    def __repr__(self) -> str:
        from deploy.console.display import pipeline_repr

        return pipeline_repr(self.project.config.name, str(self.project.path), self.stages)

    @property
    def stages(self) -> list[str]:
        """The stages in the order they run (implied ones included)."""
        return self.project.graph.names()

    def validate(self) -> list[str]:
        """The checks `load` made; the stage order, for a caller that wants to see it."""
        return self.stages

    def plan(self, warn: Callable[[str], None] = LOG.warning) -> list[PlanRow]:
        """What `run` would do, from keys alone (nothing runs, nothing is downloaded);
        `warn` hears of an unreachable remote cache or an unreadable last summary."""
        from deploy.pipeline.graph.plan import make_plan
        from deploy.pipeline.store.objects import Store
        from deploy.pipeline.store.remote import remote_for

        return make_plan(
            self.project, Store(self.project.cache_dir), remote_for(self.project.config, warn), warn
        )

    def runner(
        self,
        reporter: Reporter,
        force: str | Sequence[str] = (),
        only: str | Sequence[str] = (),
        from_: str | None = None,
        to: str | None = None,
        redo_provisional: bool = False,
    ) -> Runner:
        """The engine's Runner for this selection (the CLI drives it with its console);
        `redo_provisional`: cached results their stage called provisional run again."""
        from deploy.pipeline.graph.choice import ALL_STAGES, StageSelection
        from deploy.pipeline.graph.dag import select
        from deploy.pipeline.process.runner import Runner
        from deploy.pipeline.store.objects import Store
        from deploy.pipeline.store.remote import remote_for

        force, only = _names(force), _names(only)  # one stage's name as a string, too
        names = select(self.project.graph, list(only), from_, to)
        unknown = [f for f in force if f != ALL_STAGES and f not in self.stages]
        if unknown:
            issue = Issue("force", f"unknown stage(s) {unknown} (stages: {', '.join(self.stages)})")
            raise ConfigError("stage selection", [issue])
        remote = remote_for(self.project.config, reporter.warn)
        selection = StageSelection(frozenset(names), frozenset(force), redo_provisional)
        return Runner(self.project, Store(self.project.cache_dir), reporter, selection, remote)

    def run(
        self,
        force: str | Sequence[str] = (),
        only: str | Sequence[str] = (),
        from_: str | None = None,
        to: str | None = None,
        reporter: Reporter | None = None,
    ) -> RunResult:
        """Runs what is not cached. A failed stage raises StageError (the summary, report
        and logs are written first); otherwise the result of every stage."""
        runner = self.runner(reporter or LogReporter(), force, only, from_, to)
        runner.run()
        assert runner.summary is not None  # written before run() returns
        return RunResult(runner.summary, self.project.config.repository)


def _names(given: str | Sequence[str]) -> tuple[str, ...]:
    """`force="validate"` was read letter by letter ("unknown stage(s) ['v', 'a', ...]")."""
    return (given,) if isinstance(given, str) else tuple(given)


@dataclass(frozen=True, repr=False)
class RunResult:
    """What a run did: the run summary as a record, and where things are."""

    summary: RunSummary
    repository: Path  # the published Triton model repository

    def __repr__(self) -> str:
        from deploy.console.display import result_repr

        return result_repr(self.summary)

    def _repr_html_(self) -> str:
        from deploy.console.display import result_html

        return result_html(self.summary)

    @property
    def ok(self) -> bool:
        return self.summary.status is RunStatus.OK

    @property
    def stages(self) -> dict[str, StageSummary]:
        return {s.stage: s for s in self.summary.stages}

    def artifact(self, stage: str, name: str) -> Path:
        """Where an output of a stage that ran or was cached lies in the store: the file
        itself when the artifact is one file (an ONNX model without a weights file), else
        its directory."""
        found = self.stages.get(stage)
        if found is None or name not in found.outputs:
            have = {s: sorted(row.outputs) for s, row in self.stages.items() if row.outputs}
            raise KeyError(f"no artifact '{name}' of stage '{stage}' in this run (outputs: {have})")
        path = Path(found.outputs[name].path)
        files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else []
        return files[0] if len(files) == 1 else path

    @property
    def selection(self) -> Selection | None:
        """The select stage's decision, where it ran."""
        from deploy.runtimes.selection_record import Selection

        stage = self.stages.get("select")
        return Selection.read(self.artifact("select", "selection")) if stage and stage.outputs else None


class LogReporter:
    """A run's progress to the `deploy` logger: silent unless the caller configures logging."""

    def started(self, name: str, reasons: list[str]) -> None:
        LOG.info("%s: running (%s)", name, "; ".join(reasons))

    def finished(self, result: StageResult) -> None:
        LOG.info("%s: %s in %.2f s", result.name, result.status.value, result.duration_s)

    def warn(self, message: str) -> None:
        LOG.warning(message)

    def note(self, message: str) -> None:
        LOG.info(message)

    def progress(self, event: Progress) -> None:
        LOG.debug("%s: %s of %s %s", event.stage, event.done, event.total or "?", event.what)
