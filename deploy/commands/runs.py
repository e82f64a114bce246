"""`deploy run`'s parts around the engine's Runner: the stage selection, the console
at the end of a run, and the CI files (JUnit, JSON) — also for a run rejected before
anything ran."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.text import Text

from deploy.pipeline.errors import DeployError, ExitCode
from deploy.pipeline.report.results import RunStatus, RunSummary, StageSummary, Status

if TYPE_CHECKING:
    from deploy.console.screen import Screen
    from deploy.pipeline.graph.project import Project
    from deploy.pipeline.process.runner import Runner
    from deploy.pipeline.report.reporter import Reporter


@dataclass(frozen=True)
class Choice:
    """The stages asked for on the command line."""

    force: list[str]
    start: str | None
    stop: str | None
    only: list[str]
    accept_regression: str | None = None  # stages.release.accept_regression, for this run
    remeasure: bool = False  # --wait-quiet: a bench cached as provisional (contended) runs again

    @property
    def whole(self) -> bool:
        """The whole pipeline as configured, nothing forced: what a replay shows (deploy.commands.replay)."""
        return not (
            self.force or self.start or self.stop or self.only or self.accept_regression or self.remeasure
        )


def run_pipeline(
    config: Path,
    cache_dir: Path | None,
    choice: Choice,
    console: Console,
    verbose: bool,
    junit: Path | None,
    summary_json: Path | None,
) -> None:
    """`deploy run` once no replay answered it: the full path, which checks every stage."""
    from deploy.commands.replay import forget, remember

    junit, summary_json = _ci_files(config, junit, summary_json)
    from deploy.console.ui import ConsoleReporter
    from deploy.pipeline.process import stopping

    # SIGTERM and SIGHUP as Ctrl-C from here to the end, not only while a stage runs: one
    # landing after the last stage killed the run before its JUnit and --json were written.
    stopping.stop_on_signals()
    runner: Runner | None = None
    screen, written = None, True
    reporter = ConsoleReporter(console, verbose)
    try:
        runner = make_runner(_load(config, cache_dir, choice.accept_regression), choice, reporter)
        forget(runner)
        with reporter:
            _run_to_its_records(runner)
    except DeployError as exc:
        if runner is None or runner.summary is None:  # rejected: no summary or report was written
            ci_files_for_rejection(config, exc, junit, summary_json)
        raise
    finally:
        if runner is not None and runner.summary is not None:
            stopping.absorb()  # the outcome is written: a stop now changes none of it
            screen = _finish_whole(runner, console, verbose, junit, summary_json)
            written = screen is not None
            if (late := stopping.late()) is not None:
                typer.echo(
                    f"{late} arrived after the run's records were written: the run is as they say", err=True
                )
    if not written:
        raise typer.Exit(ExitCode.CONFIG)
    if choice.whole and runner is not None and screen is not None:
        with contextlib.suppress(OSError):  # no footprint only costs the next run its full path
            remember(runner, config, cache_dir, screen, reporter.warned)


def _run_to_its_records(runner: Runner) -> None:
    """runner.run(); a stop that lands once its summary says ok or failed (between the
    runner putting its handlers back and this command absorbing stops) is no interrupt:
    the run is what its records say, and its failure, if any, is still raised."""
    from deploy.pipeline.process import stopping
    from deploy.pipeline.report.results import RunStatus

    try:
        runner.run()
    except KeyboardInterrupt as stop:
        if runner.summary is None or runner.summary.status is RunStatus.INTERRUPTED:
            raise
        stopping.absorb(str(stop) or "Ctrl-C")
        if (failure := runner.failure()) is not None:
            raise failure from None


def _ci_files(config: Path, junit: Path | None, summary_json: Path | None) -> tuple[Path | None, Path | None]:
    """--junit and --json checked before anything runs, symlinks followed to their targets."""
    for option, path in (("--junit", junit), ("--json", summary_json)):
        check_writable(option, path, config)
    return _followed(junit), _followed(summary_json)


def _finish_whole(
    runner: Runner, console: Console, verbose: bool, junit: Path | None, summary_json: Path | None
) -> Screen | None:
    """finish_run with a stop held until the CI files are whole (it is raised after them)."""
    from deploy.pipeline.process import faults, stopping

    with stopping.deferred():
        faults.point("ci-files")
        return finish_run(runner, console, verbose, junit, summary_json)


def _load(config: Path, cache_dir: Path | None, accept_regression: str | None) -> Project:
    """The project; with --accept-regression, its release stage told the reason."""
    from deploy.domain.issues import Issue
    from deploy.pipeline.errors import ConfigError
    from deploy.pipeline.graph.project import project_from, read_yaml

    raw = read_yaml(config)
    if accept_regression is not None:
        stages = raw.get("stages")
        if not isinstance(stages, dict) or "release" not in stages:
            issue = Issue("--accept-regression", "needs a release stage (stages.release) in the config")
            raise ConfigError(str(config), [issue])
        release = stages["release"] if isinstance(stages["release"], dict) else {}
        raw = {**raw, "stages": {**stages, "release": {**release, "accept_regression": accept_regression}}}
    return project_from(raw, config, cache_dir)


def make_runner(project: Project, choice: Choice, reporter: Reporter) -> Runner:
    """The API's runner (deploy/api.py), reporting to `reporter` (the console's)."""
    from deploy.api import Pipeline
    from deploy.pipeline.graph.choice import ALL_STAGES

    unknown = [f for f in choice.force if f != ALL_STAGES and f not in project.graph.names()]
    if unknown:  # a command-line usage error (exit 2), as typer reports its own
        raise typer.BadParameter(f"unknown stage(s) {unknown}", param_hint="--force")
    return Pipeline(project).runner(
        reporter, choice.force, choice.only, choice.start, choice.stop, redo_provisional=choice.remeasure
    )


def check_writable(option: str, path: Path | None, config: Path | None = None) -> None:
    """A CI file we could not write at the end of a long run is found out now; so is one
    that would replace what is not a CI file: the config itself, a device or a FIFO (the
    file is written by rename: /dev/null would become a regular file)."""
    if path is None:
        return
    from deploy.pipeline.store.writable import problem

    if path.is_dir():
        raise typer.BadParameter(f"cannot write {path}: a directory", param_hint=option)
    if why := problem(path.absolute().parent):  # a file in the way, /proc, a read-only mount
        raise typer.BadParameter(f"cannot write {path}: {why}", param_hint=option)
    if path.exists() and not os.access(path, os.W_OK):
        raise typer.BadParameter(f"cannot write {path}: no write permission", param_hint=option)
    if config is not None and path.resolve() == config.resolve():
        raise typer.BadParameter(f"{path} is the config this run reads; name another file", param_hint=option)
    if path.exists() and not path.resolve().is_file():
        raise typer.BadParameter(
            f"{path} is not a regular file (a device, a FIFO): name a file", param_hint=option
        )


def _followed(path: Path | None) -> Path | None:
    """A symlink's target: what is written there, the link left as it is."""
    return path.resolve() if path is not None and path.is_symlink() else path


def finish_run(
    runner: Runner, console: Console, verbose: bool, junit: Path | None, summary_json: Path | None
) -> Screen | None:
    """The results, where the summary and report are, and the CI files asked for; the
    screen shown, or None when one of those files could not be written."""
    from deploy.console.ui import make_screen
    from deploy.pipeline.process.runner import REPORT_FILE

    project, summary = runner.project, runner.summary
    if summary is None:  # the runner writes it before it returns, whatever happened
        return None
    moved: list[str] = []
    try:  # the files first: after SIGHUP the terminal they would be printed to is gone
        moved = _write_ci_files(summary, junit, summary_json)
        failure = None
    except (OSError, DeployError) as exc:  # printed, not raised: it must not hide the run's own outcome
        failure = exc
    closing = (
        f"run {summary.status.value}   summary: {project.run_dir / 'summary.json'}   "
        f"report: {project.run_dir / REPORT_FILE}{_repository(summary, project)}"
    )
    screen = make_screen(runner.results, project.graph.names(), closing)
    with contextlib.suppress(OSError):  # a closed terminal (EIO) or pipe: the files hold it all
        screen.show(console, full_notes=verbose)
        for line in moved:
            console.print(Text.assemble(("warning", "bold yellow"), f": {line}"), highlight=False)
        if failure is not None:
            console.print(
                Text.assemble(("error", "bold red"), f": could not write a --junit / --json file: {failure}")
            )
    return screen if failure is None else None


def _repository(summary: RunSummary, project: Project) -> str:
    """The closing line's repository: what this run published there, if anything."""
    from deploy.pipeline.graph.contract import Phase

    repository = project.config.repository
    left = journal_left(repository, project.config.name)
    if left:
        return f"   repository: {repository} ({left})"
    if summary.publishing:
        return f"   repository: {repository}{_published(summary)}"
    if any(n.spec.phase is Phase.RELEASE for n in project.graph.nodes) and repository.is_dir():
        return f"   repository: {repository} (its released versions: deploy releases CONFIG)"
    if repository.is_dir():
        return f"   repository: {repository} (nothing published by this run)"
    return ""  # never published: naming it would send the user to a directory that is not there


def journal_left(repository: Path, pipeline: str) -> str:
    """A publish or release stopped amid its renames (a kill, Ctrl-C between a release's
    switches) leaves its journal: said, with what completes it."""
    from deploy.pipeline.publish import publish_journal
    from deploy.serving import release_journal

    for what, journal in (("publish", publish_journal), ("release", release_journal)):
        if journal.path(repository, pipeline).exists():
            if journal is release_journal:  # one journal for releases and rollbacks: its kind says which
                with contextlib.suppress(Exception):  # unreadable: the next command says so
                    what = release_journal.Journal.from_json(
                        journal.path(repository, pipeline).read_text()
                    ).kind.value
            return (
                f"a {what} was stopped amid its renames: its journal is there, and the next "
                "`deploy run`, `releases`, `serve` or `rollback` completes it"
            )
    return ""


def _published(summary: RunSummary) -> str:
    """The local repository's fate in a few words: verified, unverified, or not replaced."""
    from deploy.pipeline.report.results import PublishState

    states = {n.state for n in summary.publishing}
    if PublishState.WITHHELD in states:
        return " (NOT replaced: see the warning above)"
    if PublishState.UNVERIFIED in states:
        return " (UNVERIFIED: no server check)"
    by = sorted({v for n in summary.publishing for v in n.verified_by})
    unchecked = sorted({m for n in summary.publishing for m in n.unchecked})
    left = f"; {len(unchecked)} model(s) UNVERIFIED: its server could not load them" if unchecked else ""
    return f" (verified by {', '.join(by)}{left})" if by else ""


def ci_files_for_rejection(
    config: Path, exc: DeployError, junit: Path | None, summary_json: Path | None
) -> None:
    """An invocation rejected before anything ran (a config that does not load, a
    selection whose upstream isn't cached) is one failed pseudo-stage for a CI server:
    `config` or `selection`."""
    from deploy.pipeline.errors import SelectionError

    selection = isinstance(exc, SelectionError)
    what, status = (
        ("selection", RunStatus.SELECTION_ERROR) if selection else ("config", RunStatus.CONFIG_ERROR)
    )
    failed = StageSummary(what, Status.FAILED, message=str(exc))
    summary = RunSummary(config.stem, str(config), status, [failed], message=str(exc))
    _write_ci_files(summary, junit, summary_json)


def _write_ci_files(summary: RunSummary, junit: Path | None, summary_json: Path | None) -> list[str]:
    """Writes them; returns a line for each that went to the temp dir for want of room."""
    import json

    from deploy.pipeline.graph.hashing import write_with_room
    from deploy.pipeline.report.junit import write_xml

    moved = []
    if junit is not None and (went := write_xml(junit, summary)) != junit:
        moved.append(f"no room for {junit}: the JUnit file is at {went}")
    if summary_json is not None:
        went = write_with_room(summary_json, json.dumps(summary.to_json(), indent=1))
        moved += [f"no room for {summary_json}: the summary is at {went}"] if went != summary_json else []
    return moved
